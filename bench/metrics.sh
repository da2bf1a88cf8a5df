#!/usr/bin/env bash
# What collecting serving metrics costs, on release builds, in one run on this machine.
#
#   bench/metrics.sh                                # 1,000 deployments × 2 pods, 15 s interval
#   N=100 PODS=2 INTERVAL=5 DURATION=30 bench/metrics.sh
#
# A fresh emulator (simulated cluster, a Gateway, the published CRDs) and database; the API
# and the worker as two processes (`--role api`, `--role worker`, Postgres over TCP); N
# `sim` deployments of PODS replicas each, created through the REST API until all are
# Ready. Then, with the API under a steady read load (wrk, CONNECTIONS connections, `get`
# of a random deployment and `list` of 50), twice for DURATION seconds each:
#   1. without collection (the worker runs with MODELPLANE_LOAD_INTERVAL_SECS=0),
#   2. with collection every INTERVAL seconds (the worker restarted with it; it reads every
#      pod through the API server's pods/proxy, as a worker outside the cluster does).
# Both twice: first with every process free to use both cores, then pinned as they would
# run on separate machines (the API and wrk on CPU 0; the emulator, which stands for the
# cluster's API server and its 2,000 pods, and the worker on CPU 1; Postgres on either).
# Printed: the p99 of get and list in each (and their ratio, which must stay within 1.10),
# and per collection round, measured while nothing else runs: the CPU seconds of the
# worker, of the emulator (the API server proxying and the pods answering) and of Postgres,
# the rows written and the WAL bytes (the bytes Postgres writes for them), the duration.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/postgres.sh
source bench/lib.sh

N=${N:-1000}
PODS=${PODS:-2}
INTERVAL=${INTERVAL:-15}
DURATION=${DURATION:-60}
CONNECTIONS=${CONNECTIONS:-8}
GATEWAY=${GATEWAY:-gateway-system/inference}
TIMEOUT=${TIMEOUT:-900}

if ! command -v wrk >/dev/null; then
  log "installing wrk (Debian package)"
  sudo_=""; [ "$(id -u)" -ne 0 ] && sudo_=sudo
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

ensure_postgres modelplane_bench_metrics
db="${DATABASE_URL%/*}/modelplane_bench_metrics"
psql "${DATABASE_URL%/*}/postgres" -qc 'drop database if exists modelplane_bench_metrics with (force)' >/dev/null
ensure_database "$db"

log "building modelplane and the emulator (release)"
SQLX_OFFLINE=true cargo build --quiet --release --bin modelplane
SQLX_OFFLINE=true cargo build --quiet --release -p modelplane-emulator --bin modelplane-emulator
crds=$PWD/$(scripts/crds.sh)

work=$(mktemp -d)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT

emu_port=$(free_port 16543)
emulator_pin=""
$emulator_pin target/release/modelplane-emulator --listen "127.0.0.1:$emu_port" --kubeconfig-out "$work/kubeconfig" \
  --nodes $(( N * PODS / 100 + 3 )) --start-delay 0s --crds "$crds" --gateway "$GATEWAY" \
  >"$work/emulator.log" 2>&1 &
emulator_pid=$!
pids+=("$!")
until curl -fsS "http://127.0.0.1:$emu_port/readyz" >/dev/null 2>&1; do sleep 0.1; done

api_port=$(free_port 18780)
worker_port=$(free_port $((api_port + 1)))
token="mpt_bench_$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
common=(env DATABASE_URL="$db" MODELPLANE_BOOTSTRAP_TOKEN="$token" MODELPLANE_LOG=warn
        MODELPLANE_KUBECONFIG="$work/kubeconfig" MODELPLANE_INSTALLATION=bench
        MODELPLANE_GATEWAY="$GATEWAY" MODELPLANE_LOAD_SCRAPE=proxy
        MODELPLANE_RATE_LIMIT_PER_MINUTE=100000000 MODELPLANE_RATE_LIMIT_BURST=10000000)
"${common[@]}" MODELPLANE_ROLE=api MODELPLANE_LISTEN="127.0.0.1:$api_port" \
  MODELPLANE_LOAD_INTERVAL_SECS="$INTERVAL" MODELPLANE_DB_MAX_CONNECTIONS="$CONNECTIONS" \
  target/release/modelplane serve >"$work/api.log" 2>&1 &
api_pid=$!
pids+=("$!")
base="http://127.0.0.1:$api_port"
until curl -fsS "$base/healthz" >/dev/null 2>&1; do sleep 0.1; done

worker=""
worker_pin=""
start_worker() { # interval
  if [ -n "$worker" ]; then kill "$worker"; wait "$worker" 2>/dev/null || true; fi
  $worker_pin "${common[@]}" MODELPLANE_ROLE=worker MODELPLANE_LISTEN="127.0.0.1:$worker_port" \
    MODELPLANE_LOAD_INTERVAL_SECS="$1" target/release/modelplane serve >>"$work/worker.log" 2>&1 &
  worker=$!; pids+=("$worker")
  until curl -fsS "http://127.0.0.1:$worker_port/healthz" >/dev/null 2>&1; do
    kill -0 "$worker" 2>/dev/null || { cat "$work/worker.log"; die "the worker did not start"; }
    sleep 0.1
  done
}
start_worker 0

auth="Authorization: Bearer $token"
curl -fsS -o /dev/null -H "$auth" -H 'Content-Type: application/json' "$base/api/v1/projects" -d '{"name":"bench"}'
log "creating $N deployments of $PODS sim pods"
spec="{\\\"model\\\":{\\\"source\\\":\\\"hf://Qwen/Qwen2.5-0.5B-Instruct\\\"},\\\"engine\\\":{\\\"kind\\\":\\\"sim\\\"},\\\"replicas\\\":$PODS}"
for i in $(seq 1 "$N"); do
  [ "$i" -eq 1 ] || echo next
  echo "url = \"$base/api/v1/projects/bench/deployments\""
  echo "header = \"$auth\""
  echo 'header = "Content-Type: application/json"'
  echo 'output = "/dev/null"'
  echo "data = \"{\\\"name\\\":\\\"d$i\\\",\\\"spec\\\":$spec}\""
done >"$work/creates.curl"
curl -fsS --no-progress-meter --parallel --parallel-max 16 --config "$work/creates.curl"
started=$(date +%s)
until [ "$(psql -tA "$db" -c "select count(*) from model_deployment where phase = 'Ready'")" -eq "$N" ]; do
  [ $(( $(date +%s) - started )) -lt "$TIMEOUT" ] || die "not all $N Ready after ${TIMEOUT}s"
  sleep 1
done
log "$N deployments Ready"

cat >"$work/get.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
request = function()
  return wrk.format("GET", "/api/v1/projects/bench/deployments/d" .. math.random(1, $N))
end
LUA
cat >"$work/list.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
request = function()
  return wrk.format("GET", "/api/v1/projects/bench/deployments?limit=50")
end
LUA
wrk_pin=""
p99_ms() { # script → p99 in ms, over DURATION seconds (after 3 s unmeasured)
  $wrk_pin wrk -t2 -c"$CONNECTIONS" -d3s -s "$work/$1.lua" "$base" >/dev/null 2>&1
  $wrk_pin wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$work/$1.lua" "$base" >"$work/$1.wrk" 2>&1
  ! grep -q Non-2xx "$work/$1.wrk" || { cat "$work/$1.wrk" >&2; die "$1: non-2xx answers"; }
  awk '$1 == "99%" { v = $2; if (v ~ /us$/) { sub(/us$/, "", v); v /= 1000 }
       else if (v ~ /ms$/) sub(/ms$/, "", v); else if (v ~ /s$/) { sub(/s$/, "", v); v *= 1000 }
       printf "%.2f\n", v }' "$work/$1.wrk"
}
# Rows and WAL Postgres wrote, as "rows wal_bytes".
written() {
  psql -tA -F' ' "$db" -c "select (select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)
      from pg_stat_user_tables), pg_current_wal_lsn() - '0/0'::pg_lsn"
}
rounds() { curl -fsS "http://127.0.0.1:$worker_port/metrics" |
  awk '/^modelplane_load_rounds_total\{outcome="ok"\}/ { s += $NF } END { printf "%d\n", s }'; }
round_seconds() { curl -fsS "http://127.0.0.1:$worker_port/metrics" |
  awk '/^modelplane_load_round_duration_seconds_sum/ { s = $NF } /^modelplane_load_round_duration_seconds_count/ { c = $NF }
       END { if (c > 0) printf "%.2f\n", s / c; else print "-" }'; }

log "without collection: get and list for ${DURATION}s each"
get0=$(p99_ms get); list0=$(p99_ms list)

start_worker "$INTERVAL"
log "waiting for the first round of readings"
until [ "$(rounds)" -ge 1 ]; do sleep 1; done
log "with collection every ${INTERVAL}s: get and list for ${DURATION}s each"
get1=$(p99_ms get); list1=$(p99_ms list)

# What a round costs with nothing else running: three whole rounds, start to start.
hz=$(getconf CLK_TCK)
r=$(rounds); until [ "$(rounds)" -gt "$r" ]; do sleep 0.2; done
k0=$(cpu_ticks "$worker"); e0=$(cpu_ticks "$emulator_pid"); g0=$(postgres_ticks)
read -r rows0 wal0 < <(written); r0=$(rounds)
until [ "$(rounds)" -ge $((r0 + 3)) ]; do sleep 0.2; done
k1=$(cpu_ticks "$worker"); e1=$(cpu_ticks "$emulator_pid"); g1=$(postgres_ticks)
read -r rows1 wal1 < <(written); r1=$(rounds)
n_rounds=$((r1 - r0))
readings=$(psql -tA "$db" -c "select count(*) from deployment_load where track = 'all' and (load ->> 'podsRead')::int = $PODS")
per_round() { awk -v t="$1" -v h="$hz" -v n="$n_rounds" 'BEGIN { printf "%.2f", t / h / n }'; }

log "pinned as on separate machines: the API and wrk on CPU 0, the emulator and the worker on CPU 1"
taskset -a -p -c 0 "$api_pid" >/dev/null
taskset -a -p -c 1 "$emulator_pid" >/dev/null
worker_pin="taskset -c 1"
wrk_pin="taskset -c 0"
start_worker 0
log "pinned, without collection: get and list for ${DURATION}s each"
get2=$(p99_ms get); list2=$(p99_ms list)
start_worker "$INTERVAL"
until [ "$(rounds)" -ge 1 ]; do sleep 1; done
log "pinned, with collection every ${INTERVAL}s: get and list for ${DURATION}s each"
get3=$(p99_ms get); list3=$(p99_ms list)

echo
echo "Serving-metrics collection: $N deployments × $PODS sim pods, every ${INTERVAL}s, read through pods/proxy"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf '%-40s %12s %12s %8s\n' "API p99 under $CONNECTIONS connections" "without (ms)" "with (ms)" ratio
printf '%-40s %12s %12s %8s\n' "get, sharing both cores" "$get0" "$get1" "$(ratio "$get1" "$get0")"
printf '%-40s %12s %12s %8s\n' "list of 50, sharing both cores" "$list0" "$list1" "$(ratio "$list1" "$list0")"
printf '%-40s %12s %12s %8s\n' "get, pinned" "$get2" "$get3" "$(ratio "$get3" "$get2")"
printf '%-40s %12s %12s %8s\n' "list of 50, pinned" "$list2" "$list3" "$(ratio "$list3" "$list2")"
echo
printf '%-34s %s\n' "rounds measured (nothing else running)" "$n_rounds"
printf '%-34s %s of %s\n' "deployments with every pod read" "$readings" "$N"
printf '%-34s %s\n' "mean round duration (s)" "$(round_seconds)"
printf '%-34s %s\n' "worker CPU seconds per round" "$(per_round $((k1 - k0)))"
printf '%-34s %s\n' "emulator CPU seconds per round" "$(per_round $((e1 - e0)))"
printf '%-34s %s\n' "Postgres CPU seconds per round" "$(per_round $((g1 - g0)))"
printf '%-34s %.0f\n' "Postgres rows written per round" "$(awk -v r=$((rows1 - rows0)) -v n="$n_rounds" 'BEGIN { print r / n }')"
printf '%-34s %.0f\n' "Postgres WAL bytes per round" "$(awk -v w=$((wal1 - wal0)) -v n="$n_rounds" 'BEGIN { print w / n }')"
