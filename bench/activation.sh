#!/usr/bin/env bash
# What the activator adds to a cold start, and to steady traffic, on release builds.
#
#   bench/activation.sh                 # 30 cold starts, 300 steady requests
#   CYCLES=10 STEADY=100 bench/activation.sh
#
# A fresh emulator (simulated cluster whose kubelets take START_DELAY to start a pod, a
# Gateway, the published CRDs) and database; the API (with the activator on its own port,
# reached at this machine's network address) and the worker as two processes, Postgres over
# TCP. Each cycle creates a `sim` deployment at zero replicas with `minReplicas: 0` through
# the REST API, waits until it is ScaledToZero with its URL, then sends one completion through
# the Gateway URL while watching its pods: the time modelplane adds is the first byte of the
# answer at the client minus the moment the API server showed the pod Ready (the simulated
# model answers at once: `--time-to-first-token=0`). Printed: p50/p99 of that, and of the
# whole cold start. Then, on one deployment woken that way and one that never scaled to zero
# (the same spec with `minReplicas: 1`), STEADY sequential completions each once the route
# is back on the Service: p50/p99 of both, whose difference is what the activator leaves on
# steady traffic (nothing: it is no longer on the path). Last, STEADY completions with a
# model key to the same spec with `access: keys` (the Gateway's ExternalAuth filter asks
# the key check first) against the public one: what the key check adds end to end. The
# cold starts are `access: public`, so they measure the activator alone.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/postgres.sh
source bench/lib.sh

CYCLES=${CYCLES:-30}
STEADY=${STEADY:-300}
START_DELAY=${START_DELAY:-1s}
GATEWAY=${GATEWAY:-gateway-system/inference}

ensure_postgres modelplane_bench_activation
db="${DATABASE_URL%/*}/modelplane_bench_activation"
psql "${DATABASE_URL%/*}/postgres" -qc 'drop database if exists modelplane_bench_activation with (force)' >/dev/null
ensure_database "$db"

log "building modelplane and the emulator (release)"
SQLX_OFFLINE=true cargo build --quiet --release --bin modelplane
SQLX_OFFLINE=true cargo build --quiet --release -p modelplane-emulator --bin modelplane-emulator
# The experimental channel: its HTTPRoute takes the ExternalAuth filter of model keys.
crds=$PWD/$(MODELPLANE_GATEWAY_API_CHANNEL=experimental scripts/crds.sh target/crds-experimental)

host_ip=$(ip -4 route get 192.0.2.255 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n1)
[ -n "$host_ip" ] || die "no network address for the Gateway to reach the activator by (ip route get)"

work=$(mktemp -d)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap 'stop_all; rm -rf "$work"' EXIT

emu_port=$(free_port 16643)
gateway_port=$(free_port $((emu_port + 1)))
target/release/modelplane-emulator --listen "127.0.0.1:$emu_port" --kubeconfig-out "$work/kubeconfig" \
  --nodes 3 --start-delay "$START_DELAY" --crds "$crds" --gateway "$GATEWAY" \
  --gateway-listen "127.0.0.1:$gateway_port" >"$work/emulator.log" 2>&1 &
pids+=("$!")
until curl -fsS "http://127.0.0.1:$emu_port/readyz" >/dev/null 2>&1; do sleep 0.1; done

api_port=$(free_port 18880)
worker_port=$(free_port $((api_port + 1)))
activator_port=$(free_port $((api_port + 2)))
authz_port=$(free_port $((activator_port + 1)))
token="mpt_bench_$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
common=(env DATABASE_URL="$db" MODELPLANE_BOOTSTRAP_TOKEN="$token" MODELPLANE_LOG=warn
        MODELPLANE_KUBECONFIG="$work/kubeconfig" MODELPLANE_INSTALLATION=bench
        MODELPLANE_GATEWAY="$GATEWAY" MODELPLANE_LOAD_INTERVAL_SECS=15
        MODELPLANE_ACTIVATOR_PORT="$activator_port" MODELPLANE_ACTIVATOR_ADDRESSES="$host_ip"
        MODELPLANE_AUTHZ_PORT="$authz_port"
        MODELPLANE_RATE_LIMIT_PER_MINUTE=100000000 MODELPLANE_RATE_LIMIT_BURST=10000000)
"${common[@]}" MODELPLANE_ROLE=api MODELPLANE_LISTEN="127.0.0.1:$api_port" \
  target/release/modelplane serve >"$work/api.log" 2>&1 &
pids+=("$!")
"${common[@]}" MODELPLANE_ROLE=worker MODELPLANE_LISTEN="127.0.0.1:$worker_port" \
  target/release/modelplane serve >"$work/worker.log" 2>&1 &
pids+=("$!")
for port in "$api_port" "$worker_port"; do
  until curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do sleep 0.1; done
done

log "$CYCLES cold starts through the activator, then $STEADY steady requests each way"
python3 bench/activation.py --api "http://127.0.0.1:$api_port" --token "$token" \
  --kube "http://127.0.0.1:$emu_port" --cycles "$CYCLES" --steady "$STEADY" || {
  for f in api worker emulator; do echo "--- $f.log (last lines)"; tail -n 40 "$work/$f.log"; done >&2
  die "the benchmark failed"
}
