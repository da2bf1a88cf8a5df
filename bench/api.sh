#!/usr/bin/env bash
# API throughput next to raw Postgres doing the same row work, in one run on this machine.
#
#   bench/api.sh                 # 10 s per measurement (after 3 s unmeasured), 16 connections, 1,000 rows
#   DURATION=30 CONNECTIONS=32 ROWS=5000 bench/api.sh
#
# modelplane (release build, `--role api`, its own scratch database) is loaded with wrk (the
# Debian package, installed when missing); Postgres with pgbench running the statements the
# same work needs (the row and its project, a page of 50, a row plus its queue row; and, for
# create, also every row modelplane's create writes, in one statement) against
# the same database with the same number of clients. The ratio is what counts: absolute
# figures move with the machine's load.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/postgres.sh
source bench/lib.sh

DURATION=${DURATION:-10}
# Unmeasured seconds before each measurement, on both sides: the first seconds after start
# (connections opening, caches filling, autovacuum analysing the new rows) are not the
# steady state the ratio is about.
WARMUP=${WARMUP:-3}
CONNECTIONS=${CONNECTIONS:-16}
ROWS=${ROWS:-1000}

ensure_wrk_and_pgbench

ensure_postgres modelplane_bench_api
db="${DATABASE_URL%/*}/modelplane_bench_api"
psql "${DATABASE_URL%/*}/postgres" -qc 'drop database if exists modelplane_bench_api with (force)' >/dev/null
ensure_database "$db"

log "building modelplane (release)"
SQLX_OFFLINE=true cargo build --quiet --release --bin modelplane

port=18580
while port_open "$port"; do port=$((port + 1)); done
base="http://127.0.0.1:$port"
token="mpt_bench_$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
work=$(mktemp -d)
DATABASE_URL=$db MODELPLANE_BOOTSTRAP_TOKEN=$token MODELPLANE_LISTEN=127.0.0.1:$port \
  MODELPLANE_ROLE=api MODELPLANE_LOG=warn MODELPLANE_DB_MAX_CONNECTIONS=${CONNECTIONS} \
  MODELPLANE_RATE_LIMIT_PER_MINUTE=100000000 MODELPLANE_RATE_LIMIT_BURST=10000000 \
  target/release/modelplane serve >"$work/api.log" 2>&1 &
api=$!
trap 'kill $api 2>/dev/null; rm -rf "$work"' EXIT
until curl -fsS "$base/readyz" >/dev/null 2>&1; do
  kill -0 "$api" 2>/dev/null || { cat "$work/api.log"; die "modelplane did not start"; }
  sleep 0.2
done

auth="Authorization: Bearer $token"
spec='{"model":{"source":"hf://Qwen/Qwen2.5-0.5B-Instruct"},"engine":{"kind":"sim"},"replicas":1}'
curl -fsS -o /dev/null -H "$auth" -H 'Content-Type: application/json' "$base/api/v1/projects" -d '{"name":"bench"}'
log "creating $ROWS deployments to read"
seq 1 "$ROWS" | xargs -P 16 -I{} curl -fsS -o /dev/null -H "$auth" -H 'Content-Type: application/json' \
  "$base/api/v1/projects/bench/deployments" -d "{\"name\":\"d{}\",\"spec\":$spec}"

# wrk: one Lua script per kind of request.
cat >"$work/get.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
request = function()
  return wrk.format("GET", "/api/v1/projects/bench/deployments/d" .. math.random(1, $ROWS))
end
LUA
cat >"$work/list.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
request = function()
  return wrk.format("GET", "/api/v1/projects/bench/deployments?limit=50")
end
LUA
cat >"$work/create.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["Content-Type"] = "application/json"
local thread_id = 0
local n = 0
local run = "m"
setup = function(thread)
  thread_id = thread_id + 1
  thread:set("tid", thread_id)
end
-- The warm-up and the measurement create different names.
init = function(args)
  run = args[1] or run
end
request = function()
  n = n + 1
  local body = string.format('{"name":"%s%d-%d","spec":$spec}', run, tid, n)
  return wrk.format("POST", "/api/v1/projects/bench/deployments", nil, body)
end
LUA

# pgbench: the same row work, straight in SQL.
cat >"$work/get.sql" <<SQL
\\set n random(1, $ROWS)
select d.* from model_deployment d join project p on p.id = d.project_id where p.name = 'bench' and d.name = 'd' || :n;
SQL
cat >"$work/list.sql" <<'SQL'
select d.* from model_deployment d join project p on p.id = d.project_id where p.name = 'bench' order by d.name limit 51;
SQL
cat >"$work/create.sql" <<SQL
with p as (select id from project where name = 'bench'),
     d as (insert into model_deployment (id, project_id, name, spec, spec_version, engine, status)
           select gen_random_uuid(), p.id, 'pg-' || gen_random_uuid(), '$spec'::jsonb, 1, 'sim', '{}'::jsonb from p
           returning id)
insert into reconcile_work (deployment_id) select id from d;
SQL
# Every row modelplane's create writes, in the one statement raw Postgres would need: the
# record, revision 1, the timeline entry, the work item and its NOTIFY (the change-feed
# triggers fire for both, as for modelplane).
cat >"$work/create-all.sql" <<SQL
with p as (select id from project where name = 'bench'),
     d as (insert into model_deployment (id, project_id, name, spec, spec_version, engine, phase, status, route_gateway, route_path)
           select gen_random_uuid(), p.id, 'pa-' || gen_random_uuid(), '$spec'::jsonb, 1, 'sim', 'Pending', '{}'::jsonb, '', '/bench/x' from p
           returning id, project_id, name, generation, spec),
     r as (insert into deployment_revision (deployment_id, revision, spec, reason, actor)
           select id, generation, spec, 'created', 'token-bench' from d),
     e as (insert into deployment_event (deployment_id, project_id, deployment_name, kind, message, actor)
           select id, project_id, name, 'Created', 'created with 1 replica(s) of sim serving hf://Qwen/Qwen2.5-0.5B-Instruct', 'token-bench' from d),
     q as (insert into reconcile_work (deployment_id) select id from d returning deployment_id)
select pg_notify('modelplane_reconcile', deployment_id::text) from q;
SQL

threads=2
run_wrk() { # script → "req/s p99_ms"
  wrk -t"$threads" -c"$CONNECTIONS" -d"${WARMUP}s" -s "$work/$1.lua" "$base" -- w >/dev/null 2>&1
  wrk -t"$threads" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$work/$1.lua" "$base" >"$work/$1.wrk" 2>&1
  local rps p99 errors
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/$1.wrk")
  p99=$(awk '$1 == "99%" {print $2}' "$work/$1.wrk")
  errors=$(awk '/Non-2xx/ {print $5}' "$work/$1.wrk")
  [ -z "$errors" ] || { cat "$work/$1.wrk" >&2; die "$1: $errors non-2xx answers"; }
  echo "$rps $p99"
}
run_pgbench() { # script → "tps"
  pgbench -n -M prepared -c "$CONNECTIONS" -j "$threads" -T "$WARMUP" -f "$work/$1.sql" "$db" >/dev/null 2>&1
  pgbench -n -M prepared -c "$CONNECTIONS" -j "$threads" -T "$DURATION" -f "$work/$1.sql" "$db" 2>/dev/null |
    awk '/^tps/ {print $3; exit}'
}

printf '%-28s %12s %10s %14s %7s\n' "work ($CONNECTIONS connections)" "modelplane/s" "p99" "postgres tx/s" "ratio" >"$work/table"
for kind in get list create; do
  log "$kind: modelplane for ${DURATION}s"
  read -r rps p99 < <(run_wrk "$kind")
  log "$kind: pgbench for ${DURATION}s"
  tps=$(run_pgbench "$kind")
  ratio=$(awk -v a="$rps" -v b="$tps" 'BEGIN { printf "%.2f", a / b }')
  printf '%-28s %12.0f %10s %14.0f %7s\n' "$kind" "$rps" "$p99" "$tps" "$ratio" >>"$work/table"
  if [ "$kind" = create ]; then
    log "create, every row a create writes: pgbench for ${DURATION}s"
    tps=$(run_pgbench create-all)
    ratio=$(awk -v a="$rps" -v b="$tps" 'BEGIN { printf "%.2f", a / b }')
    printf '%-28s %12s %10s %14.0f %7s\n' "  vs every row it writes" "" "" "$tps" "$ratio" >>"$work/table"
  fi
done
echo
cat "$work/table"
