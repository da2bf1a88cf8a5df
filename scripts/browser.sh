#!/usr/bin/env bash
# Installs what the browser checks need: Debian's Chromium (/usr/bin/chromium) and
# playwright-core from npm (locked in tests/browser/package-lock.json). Never downloads a
# browser from elsewhere (no `playwright install`). Fails when it cannot: the tests that
# drive the browser never skip.
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/browser" && pwd)"
if [[ ! -x /usr/bin/chromium ]]; then
  command -v apt-get >/dev/null || { echo "error: Chromium is missing and apt-get is not here" >&2; exit 1; }
  sudo_=""; [[ $(id -u) -ne 0 ]] && sudo_="sudo"
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2 \
    || { $sudo_ apt-get update >&2 && $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2; }
fi
if [[ ! -d "$dir/node_modules/playwright-core" || "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]]; then
  command -v npm >/dev/null || { echo "error: the browser checks need npm" >&2; exit 1; }
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund >&2)
fi
echo "$dir"
