#!/usr/bin/env bash
# API throughput next to raw Postgres doing the same row work, in one run on this machine.
#
#   bench/api.sh                 # 10 s per measurement (after 3 s unmeasured), 16 connections,
#                                # 10,000 rows in 20 projects
#   DURATION=30 CONNECTIONS=32 ROWS=2000 PROJECTS=5 bench/api.sh
#
# The rows are what users store: each deployment's spec is a vLLM deployment as a team would
# write it (engine args and env, labels, annotations, resources, scheduling, cache; about
# 1.5 KB of JSON once stored with its defaults), spread over PROJECTS projects; a get reads a
# random row of a random project, a list the first page of 50 of a random project. (Before
# 2026-11-28 the bench seeded 1,000 three-field `sim` specs in one project: lists looked
# cheaper than they are.) Postgres is reached over TCP on both sides.
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
ROWS=${ROWS:-10000}
PROJECTS=${PROJECTS:-20}

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
# No `%` and no `'` in it: it goes into a Lua format string and an SQL literal as it is.
spec='{"model":{"source":"hf://meta-llama/Llama-3.1-8B-Instruct","revision":"0e9e39f249a16976918f6564b8830bc894c89659","secretRef":{"name":"hf-token","key":"token"}},"engine":{"kind":"vllm","image":"vllm/vllm-openai:v0.11.0","tensorParallelSize":1,"maxModelLen":16384,"args":["--enable-prefix-caching","--gpu-memory-utilization","0.92","--max-num-seqs","256","--enable-chunked-prefill","--max-num-batched-tokens","8192","--kv-cache-dtype","fp8"],"env":[{"name":"VLLM_LOGGING_LEVEL","value":"INFO"},{"name":"HF_HUB_ENABLE_HF_TRANSFER","value":"1"},{"name":"OMP_NUM_THREADS","value":"8"}]},"replicas":2,"resources":{"cpu":"8","memory":"48Gi","sharedMemory":"8Gi","gpu":{"count":1,"product":"NVIDIA-L4"}},"labels":{"team":"search","cost-center":"cc-4411","env":"prod","model-family":"llama"},"annotations":{"example.com/owner":"search-ml@example.com","example.com/runbook":"https://wiki.example.com/runbooks/llm-serving","example.com/oncall":"search-ml-oncall"},"scheduling":{"nodeSelector":{"pool":"gpu-l4"},"tolerations":[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]},"storage":{"cache":{"sizeLimit":"100Gi"}},"probes":{"startupTimeoutSeconds":1800},"shutdown":{"drainSeconds":30}}'
log "creating $PROJECTS projects and $ROWS deployments to read (row n in project n mod $PROJECTS)"
seq 1 "$PROJECTS" | xargs -P 4 -I{} curl -fsS -o /dev/null -H "$auth" -H 'Content-Type: application/json' \
  "$base/api/v1/projects" -d '{"name":"bench-{}"}'
seq 1 "$ROWS" | xargs -P 16 -I{} sh -c 'curl -fsS -o /dev/null -H "$1" -H "Content-Type: application/json" \
  "$2/api/v1/projects/bench-$(( $3 % $4 + 1 ))/deployments" -d "{\"name\":\"d$3\",\"spec\":$5}"' \
  create "$auth" "$base" {} "$PROJECTS" "$spec"
stored=$(psql -tA "$db" -c "select round(avg(pg_column_size(spec) + pg_column_size(status))) || ' bytes stored per row (spec and status, after TOAST compression); ' || round(avg(length(spec::text))) || ' bytes of spec JSON' from model_deployment")
log "$stored"

# wrk: one Lua script per kind of request.
cat >"$work/get.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
request = function()
  local n = math.random(1, $ROWS)
  return wrk.format("GET", "/api/v1/projects/bench-" .. (n % $PROJECTS + 1) .. "/deployments/d" .. n)
end
LUA
cat >"$work/list.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
request = function()
  return wrk.format("GET", "/api/v1/projects/bench-" .. math.random(1, $PROJECTS) .. "/deployments?limit=50")
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
  return wrk.format("POST", "/api/v1/projects/bench-" .. math.random(1, $PROJECTS) .. "/deployments", nil, body)
end
LUA

# pgbench: the same row work, straight in SQL. pgbench takes every `:name` for one of its
# variables, even inside a string literal: in the spec's copy the colon of the image tag
# (`…:v0.11.0`) is written `\u003a`, which jsonb stores as the same `:` (the spec has no
# `true`/`false`/`null`, the only values a structural colon could precede with a letter).
pgspec=$(printf '%s' "$spec" | sed 's/:\([A-Za-z_]\)/\\u003a\1/g')
cat >"$work/get.sql" <<SQL
\\set n random(1, $ROWS)
\\set p :n % $PROJECTS + 1
select d.* from model_deployment d join project p on p.id = d.project_id where p.name = 'bench-' || :p and d.name = 'd' || :n;
SQL
cat >"$work/list.sql" <<SQL
\\set p random(1, $PROJECTS)
select d.* from model_deployment d join project p on p.id = d.project_id where p.name = 'bench-' || :p order by d.name limit 51;
SQL
cat >"$work/create.sql" <<SQL
\\set p random(1, $PROJECTS)
with p as (select id from project where name = 'bench-' || :p),
     d as (insert into model_deployment (id, project_id, name, spec, spec_version, engine, status)
           select gen_random_uuid(), p.id, 'pg-' || gen_random_uuid(), '$pgspec'::jsonb, 1, 'vllm', '{}'::jsonb from p
           returning id)
insert into reconcile_work (deployment_id) select id from d;
SQL
# Every row modelplane's create writes, in the one statement raw Postgres would need: the
# record, revision 1, the timeline entry, the work item and its NOTIFY (the change-feed
# triggers fire for both, as for modelplane).
cat >"$work/create-all.sql" <<SQL
\\set p random(1, $PROJECTS)
with p as (select id from project where name = 'bench-' || :p),
     d as (insert into model_deployment (id, project_id, name, spec, spec_version, engine, phase, status, route_gateway, route_path)
           select gen_random_uuid(), p.id, 'pa-' || gen_random_uuid(), '$pgspec'::jsonb, 1, 'vllm', 'Pending', '{}'::jsonb, '', '/bench/x' from p
           returning id, project_id, name, generation, spec),
     r as (insert into deployment_revision (deployment_id, revision, spec, reason, actor)
           select id, generation, spec, 'created', 'token-bench' from d),
     e as (insert into deployment_event (deployment_id, project_id, deployment_name, kind, message, actor)
           select id, project_id, name, 'Created', 'created with 2 replica(s) of vllm serving hf://meta-llama/Llama-3.1-8B-Instruct', 'token-bench' from d),
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

printf '%-28s %12s %10s %14s %7s\n' "work ($CONNECTIONS conns, $ROWS rows)" "modelplane/s" "p99" "postgres tx/s" "ratio" >"$work/table"
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
