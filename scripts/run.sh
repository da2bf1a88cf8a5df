#!/usr/bin/env bash
# Runs the whole system on this machine: Postgres (found or started), the Kubernetes
# emulator (unless you name a cluster), and modelplane with its API, reconciler worker and
# portal. Ctrl-C stops everything it started.
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

# Each address this command listens on must be free; say which variable moves it.
port_free() {
  local host=${1%:*} port=${1##*:}
  [ "$host" = 0.0.0.0 ] && host=127.0.0.1
  ! (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}
check_free() {
  port_free "$2" || die "$2 is already in use (by another ./scripts/run.sh?): stop what listens there, or set $1 to another address, e.g. $1=${2%:*}:$(( ${2##*:} + 100 ))"
}
check_free MODELPLANE_LISTEN "${MODELPLANE_LISTEN:-127.0.0.1:8080}"
if [ -z "${MODELPLANE_KUBECONFIG:-}" ]; then
  check_free MODELPLANE_EMULATOR_LISTEN "${MODELPLANE_EMULATOR_LISTEN:-127.0.0.1:6443}"
  check_free MODELPLANE_EMULATOR_GATEWAY_LISTEN "${MODELPLANE_EMULATOR_GATEWAY_LISTEN:-127.0.0.1:8081}"
fi
# The activator (scale from zero): its own port, on every interface, reached by the
# Gateway at this machine's network address (an EndpointSlice may not name loopback). With
# the emulator it is on unless no such address exists; with a cluster, set
# MODELPLANE_ACTIVATOR_PORT and MODELPLANE_ACTIVATOR_ADDRESSES to addresses its Gateway
# reaches.
if [ -z "${MODELPLANE_KUBECONFIG:-}" ] && [ -z "${MODELPLANE_ACTIVATOR_ADDRESSES:-}" ]; then
  host_ip=$(ip -4 route get 192.0.2.255 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n1)
  [ -n "$host_ip" ] || host_ip=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -v '^127\.' | grep '\.' | head -n1 || true)
  if [ -n "$host_ip" ]; then
    export MODELPLANE_ACTIVATOR_ADDRESSES=$host_ip
    export MODELPLANE_ACTIVATOR_PORT=${MODELPLANE_ACTIVATOR_PORT:-8082}
    # The model key check, beside it (the routes' ExternalAuth filter calls it).
    export MODELPLANE_AUTHZ_PORT=${MODELPLANE_AUTHZ_PORT:-8083}
  fi
fi
if [ -n "${MODELPLANE_ACTIVATOR_PORT:-}" ]; then
  check_free MODELPLANE_ACTIVATOR_PORT "0.0.0.0:$MODELPLANE_ACTIVATOR_PORT"
  activator_note="the activator listens on port $MODELPLANE_ACTIVATOR_PORT, reached at ${MODELPLANE_ACTIVATOR_ADDRESSES:-?} (autoscaling.minReplicas: 0 allowed)"
else
  activator_note="off: no network address for the Gateway to reach the activator by (autoscaling.minReplicas: 0 refused)"
fi
if [ -n "${MODELPLANE_AUTHZ_PORT:-}" ] && [ -n "${MODELPLANE_ACTIVATOR_ADDRESSES:-}${MODELPLANE_ACTIVATOR_SERVICE:-}" ]; then
  check_free MODELPLANE_AUTHZ_PORT "0.0.0.0:$MODELPLANE_AUTHZ_PORT"
  keys_note="the key check listens on port $MODELPLANE_AUTHZ_PORT: new deployments take model keys (spec.access: keys)"
else
  keys_note="off: model URLs answer anyone who reaches the Gateway (set MODELPLANE_AUTHZ_PORT and addresses)"
fi

ensure_postgres modelplane
ensure_database "$DATABASE_URL"

# A platform-admin token for this database. modelplane stores it on the first start of a
# database with no live platform-admin token, so it belongs to the database, not to this
# checkout: it is kept (mode 600) under ~/.local/state/modelplane, one file per database,
# and every checkout using that database finds the same one. .dev/bootstrap-token is a copy.
token_file=.dev/bootstrap-token
if [ -n "${MODELPLANE_BOOTSTRAP_TOKEN:-}" ]; then
  token_shown="(MODELPLANE_BOOTSTRAP_TOKEN, from your environment)"
  token_check=$MODELPLANE_BOOTSTRAP_TOKEN
else
  state_dir=${XDG_STATE_HOME:-$HOME/.local/state}/modelplane
  token_key=$(printf '%s' "${DATABASE_URL%%\?*}" | sha256sum | cut -c1-16)
  shared_token="$state_dir/bootstrap-token-$token_key"
  mkdir -p "$state_dir" .dev
  chmod 700 "$state_dir"
  if [ ! -s "$shared_token" ]; then
    if [ -s .dev/bootstrap-token ]; then
      # A token this checkout made before tokens were kept per database.
      (umask 077; cp .dev/bootstrap-token "$shared_token")
    else
      (umask 077; printf 'mpt_%s\n' "$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')" > "$shared_token")
    fi
  fi
  (umask 077; cp "$shared_token" .dev/bootstrap-token)
  MODELPLANE_BOOTSTRAP_TOKEN=$(cat "$shared_token")
  export MODELPLANE_BOOTSTRAP_TOKEN
  token_shown=$MODELPLANE_BOOTSTRAP_TOKEN
  token_check=$MODELPLANE_BOOTSTRAP_TOKEN
fi

log "installing GraphiQL's files (npm, once)"
scripts/graphiql.sh >/dev/null
log "building the portal (npm; only when web/ changed)"
MODELPLANE_WEB_DIR=${MODELPLANE_WEB_DIR:-$(scripts/portal.sh)}
export MODELPLANE_WEB_DIR

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
  kubeconfig=${MODELPLANE_EMULATOR_KUBECONFIG:-.dev/kubeconfig}
  mkdir -p "$(dirname "$kubeconfig")"
  rm -f "$kubeconfig"
  gateway_listen=${MODELPLANE_EMULATOR_GATEWAY_LISTEN:-127.0.0.1:8081}
  # The published CRDs (Gateway API, InferencePool, LeaderWorkerSet, PodMonitor), so the
  # emulator validates them as a real cluster with them installed does; without them it
  # falls back to built-in definitions that validate nothing, and says so below.
  crd_args=()
  # The Gateway API's experimental channel: its HTTPRoute has the ExternalAuth filter that
  # model keys need (the standard channel's refuses it, as a real API server does).
  if crds_dir=$(MODELPLANE_GATEWAY_API_CHANNEL=experimental scripts/crds.sh target/crds-experimental 2>/dev/null); then
    crd_args=(--crds "$crds_dir")
    crds_note="the published CRDs from $crds_dir (scripts/crds.sh, Gateway API experimental channel)"
  else
    crds_note="built-in definitions (no CRD manifests: run scripts/crds.sh to see why)"
  fi
  # A simulated cluster: 3 nodes with 8 GPUs each, kubelets, and a Gateway whose data plane
  # listens on $gateway_listen (sim models answer OpenAI requests there).
  ./target/debug/modelplane-emulator --listen "$emulator_listen" --kubeconfig-out "$kubeconfig" \
    --nodes 3 --gpus-per-node 8 --gateway gateway-system/inference --gateway-listen "$gateway_listen" \
    "${crd_args[@]}" &
  pids+=($!)
  for _ in $(seq 1 100); do [ -s "$kubeconfig" ] && break; sleep 0.1; done
  [ -s "$kubeconfig" ] || die "the emulator did not start (see the log above)"
  export MODELPLANE_KUBECONFIG=$kubeconfig
  export MODELPLANE_GATEWAY=${MODELPLANE_GATEWAY:-gateway-system/inference}
  cluster_note="the emulator: kubectl --kubeconfig $kubeconfig get deploy,pods,svc,httproute -A
                    its Gateway serves http://$gateway_listen
                    custom resources: $crds_note"
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

if ! curl -fsS -o /dev/null -H "Authorization: Bearer $token_check" "$base/api/v1/whoami"; then
  printf '\033[1;33mwarning:\033[0m %s\n' "the sign-in token is not known to this database: it already had a platform-admin token when this token was made. Sign in with that installation's token, or start on a fresh database: DATABASE_URL=postgres://postgres@127.0.0.1:5432/modelplane_fresh ./scripts/run.sh" >&2
fi

cat >&2 <<MSG

  modelplane is running.
    Portal          $base/   (sign in with the token below)
    REST API        $base/api/v1/projects
    API reference   $base/api/docs
    OpenAPI         $base/api/openapi.json
    GraphQL         $base/graphql (GraphiQL in a browser; subscriptions at ${base/http/ws}/graphql/ws)
    Live (SSE)      curl -N -H "\$AUTH" $base/api/v1/projects/<project>/watch
    Health          $base/healthz  $base/readyz   Metrics  $base/metrics
    Database        ${DATABASE_URL}
    Kubernetes      $cluster_note
    Scale to zero   $activator_note
    Model keys      $keys_note

  Sign-in token (platform admin; also in $token_file):
        $token_shown
  Every /api/v1 call needs it:
        AUTH="Authorization: Bearer \$(cat $token_file)"
        curl -s -H "\$AUTH" $base/api/v1/whoami
  Stop: Ctrl-C

MSG
wait "$api_pid"
