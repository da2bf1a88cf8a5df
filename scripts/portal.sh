#!/usr/bin/env bash
# Builds the portal (web/) into web/dist, which modelplane serves at / — only when dist is
# missing or older than its sources. Installs the npm packages locked in
# web/package-lock.json first when they are missing or stale (`npm ci`, registry only).
#
#   scripts/portal.sh            # build if needed; prints the dist directory
#   scripts/portal.sh --check    # also: API types match openapi/openapi.json, typecheck,
#                                # component tests (Vitest), and a fresh build
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
web="$root/web"
check=false
[[ "${1:-}" == "--check" ]] && check=true

command -v npm >/dev/null || { echo "error: the portal needs Node.js 20+ and npm (apt-get install nodejs npm)" >&2; exit 1; }
cd "$web"
if [[ ! -x node_modules/.bin/vite || package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --ignore-scripts --no-audit --no-fund >&2
fi

if $check; then
  # The API types are generated from the committed OpenAPI document, never hand-written.
  generated=$(mktemp --suffix=.d.ts)
  trap 'rm -f "$generated"' EXIT
  npx --no-install openapi-typescript ../openapi/openapi.json -o "$generated" >/dev/null 2>&1
  diff -u src/api/schema.d.ts "$generated" >&2 || {
    echo "error: web/src/api/schema.d.ts is stale: run 'cd web && npm run api-types'" >&2
    exit 1
  }
  npx --no-install tsc -b >&2
  npx --no-install vitest run --reporter=dot >&2
fi

# Stale when any source is newer than the last build.
stale=false
if [[ ! -f dist/index.html ]] || $check; then
  stale=true
elif [[ -n "$(find src public index.html package-lock.json vite.config.ts tsconfig.json -newer dist/index.html -print -quit)" ]]; then
  stale=true
fi
if $stale; then
  npx --no-install tsc -b >&2
  npx --no-install vite build --logLevel warn >&2
  touch dist/index.html
fi
echo "$web/dist"
