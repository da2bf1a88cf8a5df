"""Model keys through the Gateway URL with the official OpenAI Python client, against the
whole system as `scripts/run.sh` runs it (scripts/e2e.sh calls this after the portal tests).

A deployment with `access: keys` (the default where the key check runs): the client with no
key gets AuthenticationError (401), with a key of the project an answer (and a token
stream), with another project's key PermissionDeniedError (403), past a key's
requestsPerMinute RateLimitError (429), and once the key is revoked AuthenticationError
again. Usage: python keys.py BASE TOKEN (the API's base URL and a platform-admin token).
"""

import json
import sys
import time
import urllib.request

import openai

BASE, TOKEN = sys.argv[1], sys.argv[2]
API = f"{BASE}/api/v1"
PROJECTS = ("keys-a", "keys-b")


def rest(method, path, body=None):
    request = urllib.request.Request(
        API + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def until(what, check, seconds=120):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def client(key):
    # No retries: each answer is the Gateway's own.
    return openai.OpenAI(base_url=base_url, api_key=key or "none", max_retries=0)


def ask(key, **extra):
    return client(key).chat.completions.create(
        model="qwen-keys", messages=[{"role": "user", "content": "hello keys"}], max_tokens=4, **extra
    )


def refused_with(error, key):
    try:
        ask(key)
    except error:
        return True
    except openai.APIStatusError as other:
        raise SystemExit(f"expected {error.__name__}, got {other.status_code}: {other.message}")
    raise SystemExit(f"expected {error.__name__}, got an answer")


for project in PROJECTS:
    status, body = rest("POST", "/projects", {"name": project})
    assert status in (201, 409), (status, body)
spec = {"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct", "servedName": "qwen-keys"}, "engine": {"kind": "sim"}}
status, body = rest("POST", "/projects/keys-a/deployments", {"name": "qwen", "spec": spec})
assert status == 201, (status, body)
assert body["spec"]["access"] == "keys", body["spec"]
deployment = until(
    "the deployment Ready with its URL",
    lambda: (d := rest("GET", "/projects/keys-a/deployments/qwen")[1])["status"]["phase"] == "Ready"
    and d["status"]["endpoints"]["openaiBase"]
    and d,
)
base_url = deployment["status"]["endpoints"]["openaiBase"]

# No key (the client sends "Bearer none"): 401.
refused_with(openai.AuthenticationError, None)

status, key = rest("POST", "/projects/keys-a/keys", {"name": "python"})
assert status == 201, (status, key)


def answered(secret):
    try:
        return ask(secret)
    except openai.AuthenticationError:
        return None


answer = until("the new key let through", lambda: answered(key["secret"]), 10)
assert answer.model == "qwen-keys" and answer.choices[0].message.content, answer
chunks = list(ask(key["secret"], stream=True))
assert any(c.choices and c.choices[0].delta.content for c in chunks), chunks

status, other = rest("POST", "/projects/keys-b/keys", {"name": "theirs"})
assert status == 201, (status, other)


def forbidden(secret):
    try:
        ask(secret)
    except openai.PermissionDeniedError:
        return True
    except openai.AuthenticationError:
        return False  # not known to the check yet
    raise SystemExit("another project's key got an answer")


until("another project's key refused with 403", lambda: forbidden(other["secret"]), 10)

status, slow = rest("POST", "/projects/keys-a/keys", {"name": "slow", "requestsPerMinute": 1})
assert status == 201, (status, slow)
until("the limited key let through", lambda: answered(slow["secret"]), 10)
try:
    ask(slow["secret"])
    raise SystemExit("a second request in the minute got an answer")
except openai.RateLimitError as error:
    retry = int(error.response.headers["retry-after"])
    assert 1 <= retry <= 60, retry

status, _ = rest("DELETE", f"/projects/keys-a/keys/{key['id']}")
assert status == 200, status
revoked_at = time.monotonic()
until("the revoked key refused", lambda: answered(key["secret"]) is None, 10)
print(f"openai client: 401 without a key, 200 and a stream with one, 403 for another project's, "
      f"429 past the limit, 401 {1000 * (time.monotonic() - revoked_at):.0f} ms after the revocation")
