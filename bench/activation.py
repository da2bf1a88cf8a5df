"""The driver of bench/activation.sh (Python's standard library only): cold starts through the
activator, then steady requests with and without it having been on the path.

Times are this machine's monotonic clock, read by one process: the pod's Ready as the moment
a watch of the API server delivers it, the first byte as the moment the answer's status line
and headers arrive (http.client's getresponse returns then).
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse
import urllib.request

SPEC = {
    "model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
    "engine": {"kind": "sim", "args": ["--time-to-first-token=0", "--inter-token-latency=0"]},
    "resources": {"cpu": "1", "memory": "2Gi"},
    "replicas": 0,
    # The activator's own cost: the model-key filter, measured apart below, stays off here.
    "access": "public",
    "autoscaling": {
        "minReplicas": 0,
        "maxReplicas": 2,
        "target": {"metric": "waitingPerReplica", "value": 4},
        "activationTimeoutSeconds": 120,
    },
}


def api(args, method, path, body=None):
    request = urllib.request.Request(
        args.api + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": "Bearer " + args.token, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def wait(what, check, limit=120):
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def deployment(args, name):
    return api(args, "GET", f"/api/v1/projects/bench/deployments/{name}")


class ReadyWatch(threading.Thread):
    """Watches the project's pods of one deployment; notes when one first shows Ready."""

    def __init__(self, kube, name):
        super().__init__(daemon=True)
        selector = urllib.parse.quote(f"app.kubernetes.io/instance={name}")
        url = urllib.parse.urlparse(kube)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
        self.path = f"/api/v1/namespaces/bench/pods?watch=1&labelSelector={selector}"
        self.ready_at = None
        self.started = threading.Event()

    def run(self):
        self.conn.request("GET", self.path)
        response = self.conn.getresponse()
        self.started.set()
        while self.ready_at is None:
            line = response.readline()
            if not line:
                return
            pod = json.loads(line)["object"]
            conditions = pod.get("status", {}).get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                self.ready_at = time.monotonic()


class StatusWatch(threading.Thread):
    """Polls the deployment through the API; notes when its status first shows a replica
    available (the worker's pass after the pod turned Ready, written)."""

    def __init__(self, args, name):
        super().__init__(daemon=True)
        self.args, self.name = args, name
        self.available_at = None

    def run(self):
        while self.available_at is None:
            status = deployment(self.args, self.name)["status"]
            if status["replicas"]["available"] > 0 and status["replicas"]["desired"] > 0:
                self.available_at = time.monotonic()
            time.sleep(0.002)


def completion(base, model, key=None):
    """One completion through the Gateway: (status, seconds to the first byte, whole)."""
    url = urllib.parse.urlparse(base + "/completions")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
    body = json.dumps({"model": model, "prompt": "one two three", "max_tokens": 2})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    sent = time.monotonic()
    conn.request("POST", url.path, body=body, headers=headers)
    response = conn.getresponse()
    first = time.monotonic()
    response.read()
    conn.close()
    return response.status, sent, first


def quantiles(values):
    ordered = sorted(values)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return statistics.median(ordered), p(0.99)


def cold_start(args, name):
    api(args, "POST", "/api/v1/projects/bench/deployments", {"name": name, "spec": SPEC})
    wait(
        f"{name} at zero",
        lambda: (d := deployment(args, name))["status"]["phase"] == "ScaledToZero"
        and d["status"]["endpoints"].get("openaiBase"),
    )
    base = deployment(args, name)["status"]["endpoints"]["openaiBase"]
    watch = ReadyWatch(args.kube, name)
    watch.start()
    watch.started.wait()
    written = StatusWatch(args, name)
    written.start()
    status, sent, first = completion(base, name)
    if status != 200:
        raise SystemExit(f"{name}: the first request got {status}")
    if watch.ready_at is None:
        raise SystemExit(f"{name}: answered before the watch saw its pod Ready")
    # The status is polled every 2 ms: whether the answer came before the worker's pass had
    # written a replica available (the worker's word on the Service's first ready endpoint
    # sent it on), and that pass's lag after the pod's Ready.
    written.join(timeout=30)
    split = None
    if written.available_at is not None:
        split = (first < written.available_at, (written.available_at - watch.ready_at) * 1000)
    return base, (first - watch.ready_at) * 1000, (first - sent) * 1000, split


def steady(base, model, n, key=None):
    out = []
    for _ in range(n):
        status, sent, first = completion(base, model, key)
        if status != 200:
            raise SystemExit(f"steady request got {status}")
        out.append((first - sent) * 1000)
    return out


def route_on_service(args, name):
    """Whether a request goes straight to a pod (the emulator names it): the route is back."""
    base = deployment(args, name)["status"]["endpoints"]["openaiBase"]
    url = urllib.parse.urlparse(base + "/models")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("GET", url.path)
    response = conn.getresponse()
    response.read()
    return response.status == 200 and response.getheader("x-emulator-pod") is not None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--kube", required=True)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--steady", type=int, default=300)
    args = parser.parse_args()

    api(args, "POST", "/api/v1/projects", {"name": "bench"})
    added, whole, ahead, status_lag = [], [], [], []
    woken = None
    for i in range(args.cycles):
        name = f"cold{i}"
        base, extra, total, split = cold_start(args, name)
        added.append(extra)
        whole.append(total)
        if split:
            ahead.append(split[0])
            status_lag.append(split[1])
        if i == 0:
            woken = (name, base)
        else:
            api(args, "DELETE", f"/api/v1/projects/bench/deployments/{name}")
    p50, p99 = quantiles(added)
    print(f"cold starts: {len(added)}")
    print(f"  added by modelplane (first byte - pod Ready): p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(added):.1f} ms")
    p50, p99 = quantiles(whole)
    print(f"  whole cold start (request sent - first byte): p50 {p50:.0f} ms, p99 {p99:.0f} ms")
    if ahead:
        print(f"  answered before the status showed a replica available: {sum(ahead)} of {len(ahead)}")
        p50, p99 = quantiles(status_lag)
        print(f"  (pod Ready - status shows it available, the worker's pass: p50 {p50:.1f} ms, p99 {p99:.1f} ms)")

    plain = dict(SPEC, replicas=1)
    plain["autoscaling"] = dict(SPEC["autoscaling"], minReplicas=1)
    del plain["autoscaling"]["activationTimeoutSeconds"]
    api(args, "POST", "/api/v1/projects/bench/deployments", {"name": "plain", "spec": plain})
    wait("plain Ready", lambda: deployment(args, "plain")["status"]["phase"] == "Ready")
    name, base = woken
    wait(f"{name}'s route back on its Service", lambda: route_on_service(args, name))
    plain_base = deployment(args, "plain")["status"]["endpoints"]["openaiBase"]
    steady(base, name, 20)
    steady(plain_base, "plain", 20)
    after = steady(base, name, args.steady)
    never = steady(plain_base, "plain", args.steady)
    a50, a99 = quantiles(after)
    n50, n99 = quantiles(never)
    print(f"steady, {args.steady} sequential requests each through the Gateway:")
    print(f"  woken from zero (route back on its Service): p50 {a50:.2f} ms, p99 {a99:.2f} ms")
    print(f"  never at zero:                               p50 {n50:.2f} ms, p99 {n99:.2f} ms")
    print(f"  difference: p50 {a50 - n50:+.2f} ms, p99 {a99 - n99:+.2f} ms")

    # What a model key costs on the path: the same spec with `access: keys`, called with a
    # key (the Gateway's ExternalAuth filter asks the key check first), against `plain`.
    keyed = dict(plain, access="keys")
    api(args, "POST", "/api/v1/projects/bench/deployments", {"name": "keyed", "spec": keyed})
    wait("keyed Ready", lambda: deployment(args, "keyed")["status"]["phase"] == "Ready")
    key = api(args, "POST", "/api/v1/projects/bench/keys", {"name": "bench"})["secret"]
    keyed_base = deployment(args, "keyed")["status"]["endpoints"]["openaiBase"]
    wait("the key let through", lambda: completion(keyed_base, "keyed", key)[0] == 200)
    steady(keyed_base, "keyed", 20, key)
    with_key = steady(keyed_base, "keyed", args.steady, key)
    again = steady(plain_base, "plain", args.steady)
    k50, k99 = quantiles(with_key)
    o50, o99 = quantiles(again)
    print(f"  with a model key (filter and check):         p50 {k50:.2f} ms, p99 {k99:.2f} ms")
    print(f"  public (again, after):                       p50 {o50:.2f} ms, p99 {o99:.2f} ms")
    print(f"  the key check adds: p50 {k50 - o50:+.2f} ms, p99 {k99 - o99:+.2f} ms")


if __name__ == "__main__":
    main()
