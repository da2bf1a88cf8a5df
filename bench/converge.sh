#!/usr/bin/env bash
# End-to-end convergence and the idle check, on release builds, in one run on this machine.
#
#   bench/converge.sh                  # N = 100 and 1,000
#   bench/converge.sh 100 1000 10000   # any list of N
#   CLIENTS=16 IDLE_SECONDS=10 bench/converge.sh 1000
#   GATEWAY= bench/converge.sh 1000    # without a Gateway (no routes), as before 2026-11-28
#
# The Gateway is on by default, as the README's run command has it: every record gets an
# HTTPRoute (validated by the Gateway API's CRD) that the emulator's Gateway must accept and
# serve, and a record is Ready only once its route is.
#
# For each N, on a fresh emulator (simulated cluster, zero pod start delay, enough nodes for
# N pods) and a fresh database: modelplane's API and worker run as two processes
# (`--role api`, `--role worker`), N `sim` deployments are POSTed through the REST API by
# one curl over CLIENTS parallel connections, and the clock stops when every record's phase is Ready.
# Printed per N: seconds, Kubernetes requests per record (the emulator's
# `apiserver_request_total`, split into reads and writes), reconciles per record (the
# worker's `modelplane_reconcile_total`), the peak memory (VmHWM) of the API, the worker
# and the emulator, and that peak per record (the worker's includes its start-up baseline,
# so it is an upper bound). Then the idle check: IDLE_SECONDS with nothing
# changing, in which the worker must make no Kubernetes write and no database row may
# change, with each process's CPU time over that window.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/postgres.sh
source bench/lib.sh

CLIENTS=${CLIENTS:-16}
IDLE_SECONDS=${IDLE_SECONDS:-10}
TIMEOUT=${TIMEOUT:-600}
GATEWAY=${GATEWAY-gateway-system/inference}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100 1000)

ensure_postgres modelplane_bench_converge
admin_url="${DATABASE_URL%/*}/postgres"

log "building modelplane and the emulator (release)"
SQLX_OFFLINE=true cargo build --quiet --release --bin modelplane
SQLX_OFFLINE=true cargo build --quiet --release -p modelplane-emulator --bin modelplane-emulator

# The published CRDs, as a real cluster has them: custom resources are validated by them.
crds=$PWD/$(scripts/crds.sh)

work=$(mktemp -d)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT

# A fingerprint of every row the worker could write: the records (their row versions),
# timeline entries, queued work and the change feed. Equal before and after: nothing written.
db_fingerprint() { # database url
  psql -tA "$1" -c "select (select coalesce(sum(xmin::text::bigint), 0) from model_deployment)
    || '/' || (select count(*) from deployment_event)
    || '/' || (select count(*) || ':' || coalesce(sum(xmin::text::bigint), 0) from reconcile_work)
    || '/' || (select coalesce(max(seq), 0) from deployment_change where kind <> 'load')"
}
printf '%8s %9s %9s %14s %14s %15s %10s %10s %10s\n' N seconds "POSTs s" "k8s reads/rec" "k8s writes/rec" "reconciles/rec" "api MiB" "worker MiB" "emu MiB" >"$work/table"
printf '%8s %10s %12s %10s %10s\n' N "api cpu s" "worker cpu s" "emu cpu s" "pg cpu s" >"$work/cpu"
printf '%8s %14s %14s %14s\n' N "api KiB/rec" "worker KiB/rec" "emu KiB/pod" >"$work/memory"
printf '%8s %12s %12s %10s %12s %10s\n' N "k8s writes" "db changed" "api cpu s" "worker cpu s" "emu cpu s" >"$work/idle"

for n in "${sizes[@]}"; do
  db="${DATABASE_URL%/*}/modelplane_bench_converge"
  psql "$admin_url" -qc 'drop database if exists modelplane_bench_converge with (force)' >/dev/null
  ensure_database "$db"

  emu_port=$(free_port 16443)
  nodes=$(( n / 100 + 3 ))
  target/release/modelplane-emulator --listen "127.0.0.1:$emu_port" --kubeconfig-out "$work/kubeconfig" \
    --nodes "$nodes" --start-delay 0s --crds "$crds" ${GATEWAY:+--gateway "$GATEWAY"} \
    >"$work/emulator-$n.log" 2>&1 &
  emu=$!; pids+=("$emu")
  until curl -fsS "http://127.0.0.1:$emu_port/readyz" >/dev/null 2>&1; do
    kill -0 "$emu" 2>/dev/null || { cat "$work/emulator-$n.log"; die "the emulator did not start"; }
    sleep 0.1
  done

  api_port=$(free_port 18680)
  token="mpt_bench_$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
  common=(env DATABASE_URL="$db" MODELPLANE_BOOTSTRAP_TOKEN="$token" MODELPLANE_LOG=warn
          MODELPLANE_KUBECONFIG="$work/kubeconfig" MODELPLANE_INSTALLATION=bench
          MODELPLANE_LOAD_INTERVAL_SECS=0
          MODELPLANE_RATE_LIMIT_PER_MINUTE=100000000 MODELPLANE_RATE_LIMIT_BURST=10000000
          ${GATEWAY:+MODELPLANE_GATEWAY="$GATEWAY"})
  "${common[@]}" MODELPLANE_ROLE=api MODELPLANE_LISTEN="127.0.0.1:$api_port" \
    MODELPLANE_DB_MAX_CONNECTIONS="$CLIENTS" target/release/modelplane serve >"$work/api-$n.log" 2>&1 &
  api=$!; pids+=("$api")
  base="http://127.0.0.1:$api_port"
  until curl -fsS "$base/healthz" >/dev/null 2>&1; do
    kill -0 "$api" 2>/dev/null || { cat "$work/api-$n.log"; die "modelplane (api) did not start"; }
    sleep 0.1
  done
  worker_port=$(free_port $((api_port + 1)))
  "${common[@]}" MODELPLANE_ROLE=worker MODELPLANE_LISTEN="127.0.0.1:$worker_port" \
    target/release/modelplane serve >"$work/worker-$n.log" 2>&1 &
  worker=$!; pids+=("$worker")
  until curl -fsS "http://127.0.0.1:$worker_port/healthz" >/dev/null 2>&1; do
    kill -0 "$worker" 2>/dev/null || { cat "$work/worker-$n.log"; die "modelplane (worker) did not start"; }
    sleep 0.1
  done

  auth="Authorization: Bearer $token"
  curl -fsS -o /dev/null -H "$auth" -H 'Content-Type: application/json' "$base/api/v1/projects" -d '{"name":"bench"}'
  reads0=$(k8s_requests "http://127.0.0.1:$emu_port" reads)
  writes0=$(k8s_requests "http://127.0.0.1:$emu_port" writes)

  # One curl process sends the N creates over CLIENTS parallel connections (--parallel);
  # each create is one operation of its config file.
  for i in $(seq 1 "$n"); do
    [ "$i" -eq 1 ] || echo next
    echo "url = \"$base/api/v1/projects/bench/deployments\""
    echo "header = \"$auth\""
    echo 'header = "Content-Type: application/json"'
    echo 'output = "/dev/null"'
    echo 'write-out = "%{http_code}\n"'
    echo "data = \"{\\\"name\\\":\\\"d$i\\\",\\\"spec\\\":{\\\"model\\\":{\\\"source\\\":\\\"hf://Qwen/Qwen2.5-0.5B-Instruct\\\"},\\\"engine\\\":{\\\"kind\\\":\\\"sim\\\"},\\\"replicas\\\":1}}\""
  done >"$work/creates.curl"
  a0=$(cpu_ticks "$api"); k0=$(cpu_ticks "$worker"); e0=$(cpu_ticks "$emu"); p0=$(postgres_ticks)
  started=$(date +%s.%N)
  curl -sS --no-progress-meter --parallel --parallel-max "$CLIENTS" --config "$work/creates.curl" >"$work/codes-$n.txt"
  posted=$(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  failed=$(grep -cv '^201$' "$work/codes-$n.txt" || true)
  [ "$failed" -eq 0 ] || { sort "$work/codes-$n.txt" | uniq -c; die "$failed creates failed"; }
  created=$(psql -tA "$db" -c "select count(*) from model_deployment")
  [ "$created" -eq "$n" ] || die "expected $n deployments, found $created"

  # The looks go over one psql session (a psql process per look started Perl's pg_wrapper
  # each time: about an eighth of the machine at 1,000 records, taken from the system under
  # test), every 1% of the time elapsed (0.1 s at least), each a scan of the table.
  coproc LOOK { psql -tAqX "$db"; }
  look_ready() {
    echo "select count(*) from model_deployment where phase = 'Ready';" >&"${LOOK[1]}"
    read -t 30 -r ready <&"${LOOK[0]}" || die "no answer from psql"
  }
  while :; do
    look_ready
    [ "$ready" -eq "$n" ] && break
    elapsed=$(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
    awk -v e="$elapsed" -v t="$TIMEOUT" 'BEGIN { exit !(e > t) }' && die "$n: only $ready Ready after ${TIMEOUT}s"
    sleep "$(awk -v e="$elapsed" 'BEGIN { printf "%.2f", (e / 100 > 0.1) ? e / 100 : 0.1 }')"
  done
  seconds=$(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  eval "exec ${LOOK[1]}>&-"
  wait "$LOOK_PID" 2>/dev/null || true
  a1=$(cpu_ticks "$api"); k1=$(cpu_ticks "$worker"); e1=$(cpu_ticks "$emu"); p1=$(postgres_ticks)
  hz=$(getconf CLK_TCK)
  printf '%8d %10.1f %12.1f %10.1f %10.1f\n' "$n" "$(awk -v t=$((a1 - a0)) -v h="$hz" 'BEGIN { print t / h }')" \
    "$(awk -v t=$((k1 - k0)) -v h="$hz" 'BEGIN { print t / h }')" \
    "$(awk -v t=$((e1 - e0)) -v h="$hz" 'BEGIN { print t / h }')" \
    "$(awk -v t=$((p1 - p0)) -v h="$hz" 'BEGIN { print t / h }')" >>"$work/cpu"
  reads=$(( $(k8s_requests "http://127.0.0.1:$emu_port" reads) - reads0 ))
  writes=$(( $(k8s_requests "http://127.0.0.1:$emu_port" writes) - writes0 ))
  reconciles=$(curl -fsS "http://127.0.0.1:$worker_port/metrics" |
    awk '/^modelplane_reconcile_total\{/ { sum += $NF } END { printf "%d\n", sum }')
  printf '%8d %9s %9s %14.1f %14.1f %15.1f %10.0f %10.0f %10.0f\n' "$n" "$seconds" "$posted" \
    "$(awk -v a="$reads" -v n="$n" 'BEGIN { print a / n }')" \
    "$(awk -v a="$writes" -v n="$n" 'BEGIN { print a / n }')" \
    "$(awk -v a="$reconciles" -v n="$n" 'BEGIN { print a / n }')" \
    "$(awk -v k="$(peak_kib "$api")" 'BEGIN { print k / 1024 }')" \
    "$(awk -v k="$(peak_kib "$worker")" 'BEGIN { print k / 1024 }')" \
    "$(awk -v k="$(peak_kib "$emu")" 'BEGIN { print k / 1024 }')" >>"$work/table"
  printf '%8d %14.1f %14.1f %14.1f\n' "$n" \
    "$(awk -v k="$(peak_kib "$api")" -v n="$n" 'BEGIN { print k / n }')" \
    "$(awk -v k="$(peak_kib "$worker")" -v n="$n" 'BEGIN { print k / n }')" \
    "$(awk -v k="$(peak_kib "$emu")" -v n="$n" 'BEGIN { print k / n }')" >>"$work/memory"
  log "$n Ready in ${seconds}s"

  # The idle check: wait until the last watch events have been worked off (the worker's
  # reconcile count unchanged for 3 s, at most 60 s), then watch a quiet window.
  reconciles_now() { curl -fsS "http://127.0.0.1:$worker_port/metrics" |
    awk '/^modelplane_reconcile_total\{/ { sum += $NF } END { printf "%d\n", sum }'; }
  last=$(reconciles_now); still=0; waited=0
  while [ "$still" -lt 3 ] && [ "$waited" -lt 60 ]; do
    sleep 1; waited=$((waited + 1))
    now=$(reconciles_now)
    if [ "$now" = "$last" ]; then still=$((still + 1)); else still=0; last=$now; fi
  done
  w0=$(k8s_requests "http://127.0.0.1:$emu_port" writes); r0=$(db_fingerprint "$db")
  a0=$(cpu_ticks "$api"); k0=$(cpu_ticks "$worker"); e0=$(cpu_ticks "$emu")
  sleep "$IDLE_SECONDS"
  w1=$(k8s_requests "http://127.0.0.1:$emu_port" writes); r1=$(db_fingerprint "$db")
  a1=$(cpu_ticks "$api"); k1=$(cpu_ticks "$worker"); e1=$(cpu_ticks "$emu")
  hz=$(getconf CLK_TCK)
  changed=no; [ "$r0" = "$r1" ] || changed=yes
  printf '%8d %12d %12s %10.2f %12.2f %10.2f\n' "$n" $((w1 - w0)) "$changed" \
    "$(awk -v t=$((a1 - a0)) -v h="$hz" 'BEGIN { print t / h }')" \
    "$(awk -v t=$((k1 - k0)) -v h="$hz" 'BEGIN { print t / h }')" \
    "$(awk -v t=$((e1 - e0)) -v h="$hz" 'BEGIN { print t / h }')" >>"$work/idle"
  stop_all
done

echo
echo "Convergence: N sim deployments POSTed with $CLIENTS connections until all Ready (Gateway: ${GATEWAY:-none})"
cat "$work/table"
echo
echo "Peak memory per record (one pod each)"
cat "$work/memory"
echo
echo "CPU seconds used from the first POST until all Ready"
cat "$work/cpu"
echo
echo "Idle: ${IDLE_SECONDS}s with nothing changing, after convergence"
cat "$work/idle"
