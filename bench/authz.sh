#!/usr/bin/env bash
# The model key check as the Gateway calls it, next to raw Postgres looking the same key up,
# in one run on this machine.
#
#   bench/authz.sh                    # 10,000 keys, 1,000 deployments, 10 s, 16 connections
#   KEYS=1000 DEPLOYMENTS=100 DURATION=30 CONNECTIONS=32 bench/authz.sh
#
# modelplane (release build, `--role api` with its key check on its own port, a scratch
# database over TCP) holds KEYS live model keys of one project and DEPLOYMENTS deployments.
# wrk (the Debian package, installed when missing) sends what the Gateway's ExternalAuth
# filter sends: `POST /check/<deployment id>/v1/chat/completions` with a random key as
# `Authorization: Bearer`, to a random deployment, each let through (200). pgbench runs the
# lookup a check without its memory would need (the key's row by its unique index) with
# as many clients. Then the same through the gRPC protocol, as Envoy's ext_authz calls it
# (bench/grpc_check.rs: long-lived HTTP/2 connections, the deployment found from the path).
# Printed: checks/s and p99, and the ratio. The check answers from memory,
# so the ratio says what the cache buys; the target is p99 <= 1 ms at 5,000 checks/s.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/postgres.sh
source bench/lib.sh

KEYS=${KEYS:-10000}
DEPLOYMENTS=${DEPLOYMENTS:-1000}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-3}
CONNECTIONS=${CONNECTIONS:-16}
# The paced run: about RATE checks/s from 10 connections, each waiting 10000/RATE ms between
# requests (wrk's `delay` hook; the wait is not in the latency).
RATE=${RATE:-5000}

ensure_wrk_and_pgbench

ensure_postgres modelplane_bench_authz
db="${DATABASE_URL%/*}/modelplane_bench_authz"
psql "${DATABASE_URL%/*}/postgres" -qc 'drop database if exists modelplane_bench_authz with (force)' >/dev/null
ensure_database "$db"

log "building modelplane and the gRPC caller (release)"
SQLX_OFFLINE=true cargo build --quiet --release --bin modelplane
SQLX_OFFLINE=true cargo bench --quiet --bench grpc_check --no-run

port=$(free_port 18680)
authz_port=$(free_port $((port + 1)))
base="http://127.0.0.1:$port"
token="mpt_bench_$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
work=$(mktemp -d)
# The key check needs the addresses the Gateway reaches it at only for the routes the worker
# writes; here the Gateway is wrk, so any address will do.
DATABASE_URL=$db MODELPLANE_BOOTSTRAP_TOKEN=$token MODELPLANE_LISTEN=127.0.0.1:$port \
  MODELPLANE_AUTHZ_PORT=$authz_port MODELPLANE_ACTIVATOR_ADDRESSES=192.0.2.1 \
  MODELPLANE_ROLE=api MODELPLANE_LOG=warn MODELPLANE_DB_MAX_CONNECTIONS=$CONNECTIONS \
  MODELPLANE_RATE_LIMIT_PER_MINUTE=100000000 MODELPLANE_RATE_LIMIT_BURST=10000000 \
  target/release/modelplane serve >"$work/api.log" 2>&1 &
api=$!
trap 'kill $api 2>/dev/null; rm -rf "$work"' EXIT
until curl -fsS "$base/readyz" >/dev/null 2>&1; do
  kill -0 "$api" 2>/dev/null || { cat "$work/api.log"; die "modelplane did not start"; }
  sleep 0.2
done

auth="Authorization: Bearer $token"
spec='{"model":{"source":"hf://Qwen/Qwen2.5-0.5B-Instruct"},"engine":{"kind":"sim"},"replicas":1,"access":"keys"}'
curl -fsS -o /dev/null -H "$auth" -H 'Content-Type: application/json' "$base/api/v1/projects" -d '{"name":"bench"}'
log "creating $DEPLOYMENTS deployments and $KEYS model keys"
seq 1 "$DEPLOYMENTS" | xargs -P 16 -I{} curl -fsS -o /dev/null -H "$auth" -H 'Content-Type: application/json' \
  "$base/api/v1/projects/bench/deployments" -d "{\"name\":\"d{}\",\"spec\":$spec}"
psql "$db" -Atc "select id from model_deployment" >"$work/deployments"
psql "$db" -Atc "select route_path || '/v1/chat/completions' from model_deployment" >"$work/paths"
# Each answer to a file of its own: parallel writers to one pipe may interleave.
mkdir "$work/created"
seq 1 "$KEYS" | xargs -P 16 -I{} curl -fsS -o "$work/created/{}.json" -H "$auth" -H 'Content-Type: application/json' \
  "$base/api/v1/projects/bench/keys" -d '{"name":"k{}"}'
find "$work/created" -name '*.json' -exec grep -ho '"secret":"[^"]*"' {} + | cut -d'"' -f4 >"$work/keys"
[ "$(wc -l <"$work/deployments")" -eq "$DEPLOYMENTS" ] || die "not every deployment was created"
[ "$(wc -l <"$work/keys")" -eq "$KEYS" ] || die "not every key was created"
# Every process's key cache follows the table: wait until this one knows them all.
probe_key=$(tail -n1 "$work/keys")
probe_deployment=$(head -n1 "$work/deployments")
until [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $probe_key" \
  -X POST "http://127.0.0.1:$authz_port/check/$probe_deployment/v1/chat/completions")" = 200 ]; do
  sleep 0.1
done

{
  echo 'local keys = {'
  sed 's/.*/"&",/' "$work/keys"
  echo '}'
  echo 'local deployments = {'
  sed 's/.*/"&",/' "$work/deployments"
  echo '}'
  cat <<'LUA'
request = function()
  local key = keys[math.random(1, #keys)]
  local id = deployments[math.random(1, #deployments)]
  return wrk.format("POST", "/check/" .. id .. "/v1/chat/completions",
    { ["Authorization"] = "Bearer " .. key, ["Content-Length"] = "0" })
end
LUA
} >"$work/check.lua"
{
  cat "$work/check.lua"
  echo "delay = function() return $(awk -v r="$RATE" 'BEGIN { printf "%.3f", 10000 / r }') end"
} >"$work/paced.lua"

cat >"$work/lookup.sql" <<SQL
\\set n random(1, $KEYS)
select k.id, k.project_id, k.deployments, k.requests_per_minute, k.expires_at, k.revoked_at
from model_key k where k.project_id = (select id from project where name = 'bench') and k.name = 'k' || :n and k.revoked_at is null;
SQL

threads=2
log "the key check: wrk for ${DURATION}s ($CONNECTIONS connections)"
wrk -t"$threads" -c"$CONNECTIONS" -d"${WARMUP}s" -s "$work/check.lua" "http://127.0.0.1:$authz_port" >/dev/null 2>&1
wrk -t"$threads" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$work/check.lua" "http://127.0.0.1:$authz_port" >"$work/check.wrk" 2>&1
errors=$(awk '/Non-2xx/ {print $5}' "$work/check.wrk")
[ -z "$errors" ] || { cat "$work/check.wrk" >&2; die "$errors checks were not let through"; }
rps=$(awk '/Requests\/sec/ {print $2}' "$work/check.wrk")
p50=$(awk '$1 == "50%" {print $2}' "$work/check.wrk")
p99=$(awk '$1 == "99%" {print $2}' "$work/check.wrk")
# The check's own time (from its handler's start to its answer) in a run, from its
# histogram: the bucket bound under which 99% of the run's checks fell.
buckets() { curl -fsS -H "$auth" "$base/metrics" | grep '^modelplane_key_check_seconds_bucket' | sed 's/.*le="\([^"]*\)"} /\1 /'; }
p99_between() {
  awk 'NR == FNR { before[$1] = $2; next }
    { le[++n] = $1; count[n] = $2 - before[$1] }
    END { for (i = 1; i <= n; i++) if (count[i] >= 0.99 * count[n]) {
      print (le[i] == "+Inf" ? "inf" : le[i] * 1e6); exit } }' "$1" "$2"
}
buckets >"$work/before"
log "the key check paced at about $RATE/s: wrk for ${DURATION}s (10 connections)"
wrk -t"$threads" -c10 -d"${DURATION}s" --latency -s "$work/paced.lua" "http://127.0.0.1:$authz_port" >"$work/paced.wrk" 2>&1
buckets >"$work/after"
http_server_p99=$(p99_between "$work/before" "$work/after")
errors=$(awk '/Non-2xx/ {print $5}' "$work/paced.wrk")
[ -z "$errors" ] || { cat "$work/paced.wrk" >&2; die "$errors paced checks were not let through"; }
paced_rps=$(awk '/Requests\/sec/ {print $2}' "$work/paced.wrk")
paced_p50=$(awk '$1 == "50%" {print $2}' "$work/paced.wrk")
paced_p99=$(awk '$1 == "99%" {print $2}' "$work/paced.wrk")
log "the same lookup in Postgres: pgbench for ${DURATION}s"
pgbench -n -M prepared -c "$CONNECTIONS" -j "$threads" -T "$WARMUP" -f "$work/lookup.sql" "$db" >/dev/null 2>&1
tps=$(pgbench -n -M prepared -c "$CONNECTIONS" -j "$threads" -T "$DURATION" -f "$work/lookup.sql" "$db" 2>/dev/null |
  awk '/^tps/ {print $3; exit}')
ratio=$(awk -v a="$rps" -v b="$tps" 'BEGIN { printf "%.2f", a / b }')
grpc() {
  ADDR=127.0.0.1:$authz_port KEYS=$work/keys PATHS=$work/paths DURATION=$DURATION WARMUP=$WARMUP \
    SQLX_OFFLINE=true cargo bench --quiet --bench grpc_check
}
log "the key check over gRPC: ${DURATION}s ($CONNECTIONS HTTP/2 connections)"
read -r grpc_rps grpc_p50 grpc_p99 grpc_refused < <(CONNECTIONS=$CONNECTIONS RATE=0 grpc)
[ "$grpc_refused" = 0 ] || die "$grpc_refused gRPC checks were not let through"
buckets >"$work/before"
log "the key check over gRPC paced at about $RATE/s (10 connections)"
read -r grpc_paced_rps grpc_paced_p50 grpc_paced_p99 grpc_refused < <(CONNECTIONS=10 RATE=$RATE grpc)
buckets >"$work/after"
grpc_server_p99=$(p99_between "$work/before" "$work/after")
[ "$grpc_refused" = 0 ] || die "$grpc_refused paced gRPC checks were not let through"
echo
printf '%-44s %10s %8s %8s %14s %7s\n' "$KEYS keys, $DEPLOYMENTS deployments, $CONNECTIONS conns" "checks/s" "p50" "p99" "postgres tx/s" "ratio"
printf '%-44s %10.0f %8s %8s %14.0f %7s\n' "key check (HTTP, as the Gateway asks)" "$rps" "$p50" "$p99" "$tps" "$ratio"
printf '%-44s %10.0f %8s %8s\n' "key check paced (10 connections)" "$paced_rps" "$paced_p50" "$paced_p99"
printf '%-44s %10s %8s %7sus\n' "  its own time in modelplane (p99 bound)" "" "" "$http_server_p99"
printf '%-44s %10.0f %7sus %7sus\n' "key check (gRPC, as Envoy's ext_authz asks)" "$grpc_rps" "$grpc_p50" "$grpc_p99"
printf '%-44s %10.0f %7sus %7sus\n' "key check gRPC paced (10 connections)" "$grpc_paced_rps" "$grpc_paced_p50" "$grpc_paced_p99"
printf '%-44s %10s %8s %7sus\n' "  its own time in modelplane (p99 bound)" "" "" "$grpc_server_p99"
