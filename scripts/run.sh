#!/usr/bin/env bash
# Runs the whole system on this machine: Postgres (found or started), the Kubernetes
# emulator (unless you name a cluster), and modelplane with its API and reconciler worker.
# Ctrl-C stops everything it started.
#
#   ./scripts/run.sh                                  # emulator + API on http://127.0.0.1:8080
#   ./scripts/run.sh --kubeconfig ~/.kube/config --context staging   # a real cluster
#   MODELPLANE_LISTEN=0.0.0.0:9000 ./scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/postgres.sh

while [ $# -gt 0 ]; do
  case "$1" in
    --kubeconfig) MODELPLANE_KUBECONFIG=$2; export MODELPLANE_KUBECONFIG; shift 2 ;;
    --context) MODELPLANE_KUBE_CONTEXT=$2; export MODELPLANE_KUBE_CONTEXT; shift 2 ;;
    *) die "unknown argument $1 (use --kubeconfig PATH [--context NAME])" ;;
  esac
done

ensure_postgres modelplane
ensure_database "$DATABASE_URL"

# A platform-admin token for this installation, kept in .dev (git-ignored) across runs.
token_file=.dev/bootstrap-token
if [ -z "${MODELPLANE_BOOTSTRAP_TOKEN:-}" ]; then
  if [ ! -s "$token_file" ]; then
    mkdir -p .dev
    (umask 077; printf 'mpt_%s\n' "$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')" > "$token_file")
  fi
  MODELPLANE_BOOTSTRAP_TOKEN=$(cat "$token_file")
  export MODELPLANE_BOOTSTRAP_TOKEN
fi

log "installing GraphiQL's files (npm, once)"
scripts/graphiql.sh >/dev/null

log "building modelplane"
SQLX_OFFLINE=true cargo build --quiet --bin modelplane
SQLX_OFFLINE=true cargo build --quiet -p modelplane-emulator --bin modelplane-emulator

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

if [ -z "${MODELPLANE_KUBECONFIG:-}" ]; then
  emulator_listen=${MODELPLANE_EMULATOR_LISTEN:-127.0.0.1:6443}
  log "starting the Kubernetes emulator on $emulator_listen (no cluster named)"
  mkdir -p .dev
  rm -f .dev/kubeconfig
  gateway_listen=${MODELPLANE_EMULATOR_GATEWAY_LISTEN:-127.0.0.1:8081}
  # A simulated cluster: 3 nodes with 8 GPUs each, kubelets, and a Gateway whose data plane
  # listens on $gateway_listen (sim models answer OpenAI requests there).
  ./target/debug/modelplane-emulator --listen "$emulator_listen" --kubeconfig-out .dev/kubeconfig \
    --nodes 3 --gpus-per-node 8 --gateway gateway-system/inference --gateway-listen "$gateway_listen" &
  pids+=($!)
  for _ in $(seq 1 100); do [ -s .dev/kubeconfig ] && break; sleep 0.1; done
  [ -s .dev/kubeconfig ] || die "the emulator did not start (see the log above)"
  export MODELPLANE_KUBECONFIG=.dev/kubeconfig
  export MODELPLANE_GATEWAY=${MODELPLANE_GATEWAY:-gateway-system/inference}
  cluster_note="the emulator: kubectl --kubeconfig .dev/kubeconfig get deploy,pods,svc,httproute -A
                    its Gateway serves http://$gateway_listen"
else
  cluster_note="$MODELPLANE_KUBECONFIG${MODELPLANE_KUBE_CONTEXT:+ (context $MODELPLANE_KUBE_CONTEXT)}"
fi

listen=${MODELPLANE_LISTEN:-127.0.0.1:8080}
export MODELPLANE_LISTEN=$listen
base="http://$listen"
base=${base/0.0.0.0/127.0.0.1}

./target/debug/modelplane serve &
api_pid=$!
pids+=("$api_pid")

for _ in $(seq 1 100); do
  if curl -fsS "$base/readyz" >/dev/null 2>&1; then break; fi
  kill -0 "$api_pid" 2>/dev/null || die "modelplane exited during start-up (see the log above)"
  sleep 0.2
done
curl -fsS "$base/readyz" >/dev/null || die "modelplane did not become ready at $base/readyz"

cat >&2 <<MSG

  modelplane is running.
    REST API        $base/api/v1/projects
    API reference   $base/api/docs
    OpenAPI         $base/api/openapi.json
    GraphQL         $base/graphql (GraphiQL in a browser; subscriptions at ${base/http/ws}/graphql/ws)
    Live (SSE)      curl -N -H "\$AUTH" $base/api/v1/projects/<project>/watch
    Health          $base/healthz  $base/readyz   Metrics  $base/metrics
    Database        ${DATABASE_URL}
    Kubernetes      $cluster_note

  Every /api/v1 call needs a token. A platform-admin token is in $token_file:
        AUTH="Authorization: Bearer \$(cat $token_file)"
        curl -s -H "\$AUTH" $base/api/v1/whoami
  (It is stored on the first start of a database with no live platform-admin token.)
  Stop: Ctrl-C

MSG
wait "$api_pid"
