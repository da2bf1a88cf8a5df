#!/usr/bin/env bash
# Runs every check and test: formatting, clippy, the sqlx offline data, the OpenAPI
# document, the Dockerfile (hadolint), the Helm chart (lint, template), the whole test suite against a real Postgres
# (one database per test), the portal's checks (API types, typecheck, Vitest) and its
# end-to-end tests in Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/postgres.sh

ensure_postgres modelplane_test
ensure_database "$DATABASE_URL"

log "cargo fmt --check"
cargo fmt --all --check

# Build from the committed .sqlx data, as a clean checkout without a database would.
export SQLX_OFFLINE=true
log "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

log "sqlx offline data (.sqlx) matches the queries"
# What `cargo sqlx prepare --check` does, without compiling sqlx-cli (minutes on a fresh
# machine): a scratch database with every migration (applied by modelplane itself), then
# the crates checked against it with the query macros online, writing what each query
# describes to a scratch folder, which must be .sqlx to the byte. The scratch database is
# made afresh: one left by an earlier run could hold a migration as it was then, and sqlx
# refuses a migration whose text changed since it was applied.
check_db="${DATABASE_URL%/*}/modelplane_sqlx_check"
drop_database "$check_db"
ensure_database "$check_db"
if command -v psql >/dev/null 2>&1; then
  # Each migration in one transaction, as sqlx applies them (none opts out of one).
  for migration in migrations/*.sql; do
    psql "$check_db" -q -v ON_ERROR_STOP=1 --single-transaction -f "$migration" >/dev/null \
      || die "migration $migration does not apply to a fresh database"
  done
else
  DATABASE_URL=$check_db cargo run --quiet --bin modelplane -- migrate >/dev/null \
    || die "the migrations do not apply to a fresh database"
fi
sqlx_dir=target/sqlx-check
rm -rf "$sqlx_dir" && mkdir -p "$sqlx_dir"
# Only modelplane uses the query macros; it is checked again so they all run, online.
cargo clean --quiet -p modelplane
DATABASE_URL=$check_db SQLX_OFFLINE=false SQLX_OFFLINE_DIR=$PWD/$sqlx_dir \
  cargo check -p modelplane --all-targets --quiet
diff -r .sqlx "$sqlx_dir" >&2 \
  || die ".sqlx is stale: run 'DATABASE_URL=$check_db cargo sqlx prepare --workspace -- --all-targets' (or copy $sqlx_dir over .sqlx)"

log "OpenAPI document (openapi/openapi.json) matches the code"
cargo run --quiet --bin modelplane -- openapi | diff -u openapi/openapi.json - \
  || die "openapi/openapi.json is stale: run 'cargo run --bin modelplane -- openapi > openapi/openapi.json'"

log "GraphQL schema (openapi/schema.graphql) matches the code"
cargo run --quiet --bin modelplane -- graphql-schema | diff -u openapi/schema.graphql - \
  || die "openapi/schema.graphql is stale: run 'cargo run --bin modelplane -- graphql-schema > openapi/schema.graphql'"

# GraphiQL's files, which the tests load from /graphql, and the browser that loads them.
scripts/graphiql.sh >/dev/null
scripts/browser.sh >/dev/null

log "portal: API types match openapi/openapi.json, typecheck, component tests, build"
scripts/portal.sh --check >/dev/null

if [ -x emulator/scripts/install-kubectl.sh ]; then
  KUBECTL=$(emulator/scripts/install-kubectl.sh)
  export KUBECTL
fi

log "Dockerfile: hadolint"
scripts/lint-dockerfile.sh

# The chart's own checks; tests/helm and tests/reconciler/rbac.rs render it with this helm.
HELM=$(scripts/install-helm.sh)
export HELM
log "helm chart: lint and template (defaults, and every option on)"
for values in values.yaml ci/everything-values.yaml; do
  "$HELM" lint --strict --quiet deploy/helm/modelplane --values "deploy/helm/modelplane/$values"
  "$HELM" template modelplane deploy/helm/modelplane --namespace modelplane-system \
    --values "deploy/helm/modelplane/$values" >/dev/null
done

log "tests"
# Every emulator the tests start installs the published CRD manifests (Gateway API,
# InferencePool, LeaderWorkerSet, PodMonitor) and validates custom resources with them.
log "CRD manifests (scripts/crds.sh)"
MODELPLANE_CRDS=$PWD/$(scripts/crds.sh) || die "the CRD manifests are needed by the tests (see above)"
export MODELPLANE_CRDS
# And with the Gateway API's experimental channel, whose HTTPRoute has the ExternalAuth
# filter that model keys need.
MODELPLANE_CRDS_EXPERIMENTAL=$PWD/$(MODELPLANE_GATEWAY_API_CHANNEL=experimental scripts/crds.sh target/crds-experimental) \
  || die "the experimental-channel CRD manifests are needed by the tests (see above)"
export MODELPLANE_CRDS_EXPERIMENTAL
# nextest runs every test in its own process: tests that capture logs with a thread-local
# subscriber, or spawn the binary, never see another test's global state.
if ! command -v cargo-nextest >/dev/null 2>&1; then
  log "installing cargo-nextest (a few minutes, once)"
  cargo install cargo-nextest --locked >&2
fi
# tests/reconciler/prometheus.rs runs a real Prometheus (Debian's, from apt, once); it
# fails rather than skips without one.
if ! command -v prometheus >/dev/null 2>&1; then
  log "installing prometheus (apt, once)"
  scripts/install-prometheus.sh >/dev/null
fi
# Most tests wait (on an emulator, a server, a timer) more than they compute: twice as many
# at once as there are cores keeps the cores busy. Measured on 2 cores: the reconciler tests
# took 139 s of wall time at 4 at once against about 225 s at 2, at 137% CPU.
cargo nextest run --workspace --no-fail-fast --test-threads "$(( $(nproc) * 2 ))"

log "portal end-to-end tests"
scripts/e2e.sh
