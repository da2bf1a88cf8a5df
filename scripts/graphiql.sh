#!/usr/bin/env bash
# Installs GraphiQL's files (npm packages graphiql@3, react@18 and react-dom@18, versions
# locked in web/graphiql/package-lock.json) into web/graphiql/node_modules, which modelplane
# serves at /graphql: no CDN is ever asked. Does nothing when they are already installed.
#
# Fails when it cannot install them (no npm, no registry): the tests that load GraphiQL need
# them and never skip.
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../web/graphiql" && pwd)"
marker="$dir/node_modules/.package-lock.json"
if [[ ! -f "$dir/node_modules/graphiql/graphiql.min.js" || "$dir/package-lock.json" -nt "$marker" ]]; then
  command -v npm >/dev/null || { echo "error: GraphiQL needs npm (apt-get install npm)" >&2; exit 1; }
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund >&2)
fi
echo "$dir/node_modules"
