#!/usr/bin/env bash
# The portal's end-to-end tests: starts the whole system with the README's run command
# (scripts/run.sh: the emulator, modelplane's API + worker + portal) on free ports and a
# fresh database, then drives the portal in Debian's headless Chromium with playwright-core
# (tests/browser/portal.js). Screenshots go to target/portal-screenshots/. Called by
# scripts/test.sh; fails (never skips) when anything it needs is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/postgres.sh

ensure_postgres modelplane_e2e
e2e_db="${DATABASE_URL%/*}/modelplane_e2e"
base_db="${DATABASE_URL%/*}/postgres"
browser_dir=$(scripts/browser.sh)

# A fresh database each run, so the bootstrap token below is the one stored.
drop_database "$e2e_db"
ensure_database "$e2e_db"

free_port() {
  local port=$1
  while port_open "$port"; do port=$((port + 1)); done
  echo "$port"
}
api_port=$(free_port 18080)
emulator_port=$(free_port 16443)
gateway_port=$(free_port $((api_port + 1)))
activator_port=$(free_port $((api_port + 2)))
authz_port=$(free_port $((activator_port + 1)))
idp_port=$(free_port $((authz_port + 1)))
state=target/e2e
mkdir -p "$state" target/portal-screenshots
token="mpt_e2e_$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
base="http://127.0.0.1:$api_port"
issuer="http://127.0.0.1:$idp_port"
token_ttl=20

# A real OpenID Connect provider (oidc-provider, npm) for single sign-on, up before the API,
# which reads its keys at start.
log "starting an OpenID Connect provider at $issuer"
NODE_PATH="$browser_dir/node_modules" PORT=$idp_port TOKEN_TTL=$token_ttl \
  REDIRECT="$base/auth/callback" POST_LOGOUT="$base/" \
  setsid node tests/browser/idp.js >"$state/idp.log" 2>&1 &
idp_pid=$!
deadline=$((SECONDS + 30))
until curl -fsS "$issuer/.well-known/openid-configuration" >/dev/null 2>&1; do
  if ! kill -0 "$idp_pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
    cat "$state/idp.log" >&2
    die "the OpenID Connect provider did not start (log above)"
  fi
  sleep 0.2
done

log "starting the whole system for the portal tests (API on 127.0.0.1:$api_port)"
MODELPLANE_OIDC_ISSUER=$issuer MODELPLANE_OIDC_AUDIENCE=modelplane-portal \
  MODELPLANE_OIDC_JWKS_URL="$issuer/jwks" MODELPLANE_OIDC_CLIENT_ID=modelplane-portal \
  MODELPLANE_OIDC_SCOPES=openid,profile,groups \
DATABASE_URL=$e2e_db MODELPLANE_BOOTSTRAP_TOKEN=$token \
  MODELPLANE_LISTEN=127.0.0.1:$api_port MODELPLANE_EMULATOR_LISTEN=127.0.0.1:$emulator_port \
  MODELPLANE_EMULATOR_GATEWAY_LISTEN=127.0.0.1:$gateway_port MODELPLANE_ACTIVATOR_PORT=$activator_port \
  MODELPLANE_AUTHZ_PORT=$authz_port \
  MODELPLANE_EMULATOR_KUBECONFIG=$state/kubeconfig MODELPLANE_LOG=warn MODELPLANE_LOAD_INTERVAL_SECS=2 \
  setsid scripts/run.sh >"$state/run.log" 2>&1 &
run_pid=$!
stop() {
  kill -TERM -- "-$run_pid" "-$idp_pid" 2>/dev/null || true
  wait "$run_pid" "$idp_pid" 2>/dev/null || true
}
trap stop EXIT

# run.sh builds what is missing first (cargo, npm): allow it up to ten minutes.
deadline=$((SECONDS + 600))
until curl -fsS "$base/readyz" >/dev/null 2>&1 && curl -fsS -o /dev/null "$base/"; do
  if ! kill -0 "$run_pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
    cat "$state/run.log" >&2
    die "the system did not start for the portal tests (log above)"
  fi
  sleep 0.5
done

# The official OpenAI Python client, for model keys through the Gateway URL (PyPI, once).
venv=target/openai-venv
if ! "$venv/bin/python" -c 'import openai' >/dev/null 2>&1; then
  log "installing the OpenAI Python client (PyPI, once)"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian splits venv (and its pip) out of python3.
    sudo_=$([ "$(id -u)" -eq 0 ] || echo sudo)
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv >&2 \
      || { $sudo_ apt-get update >&2 && $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv >&2; }
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv failed even with python3-venv installed"
  fi
  "$venv/bin/pip" install --quiet "openai==3.57.0" || die "cannot install the openai package from PyPI"
fi

log "portal end-to-end tests (headless Chromium)"
if ! NODE_PATH="$browser_dir/node_modules" BASE="$base" TOKEN="$token" ISSUER="$issuer" \
  SCREENSHOTS="$PWD/target/portal-screenshots" node tests/browser/portal.js; then
  echo "---- the system's log (target/e2e/run.log, last 80 lines) ----" >&2
  tail -80 "$state/run.log" >&2
  exit 1
fi

log "single sign-on through the OpenID Connect provider (headless Chromium)"
if ! NODE_PATH="$browser_dir/node_modules" BASE="$base" TOKEN="$token" ISSUER="$issuer" \
  TOKEN_TTL=$token_ttl node tests/browser/oidc.js; then
  echo "---- the system's log (target/e2e/run.log, last 80 lines) ----" >&2
  tail -80 "$state/run.log" >&2
  echo "---- the provider's log (target/e2e/idp.log, last 40 lines) ----" >&2
  tail -40 "$state/idp.log" >&2
  exit 1
fi

log "model keys with the OpenAI Python client, through the Gateway URL"
if ! "$venv/bin/python" tests/openai/keys.py "$base" "$token"; then
  echo "---- the system's log (target/e2e/run.log, last 80 lines) ----" >&2
  tail -80 "$state/run.log" >&2
  exit 1
fi
