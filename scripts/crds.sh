#!/usr/bin/env bash
# Provides the published CustomResourceDefinition manifests of every custom resource
# modelplane writes, in one folder ready for `kubectl apply -f`, and prints that folder.
#
#   scripts/crds.sh [DEST]      DEST defaults to target/crds
#
# MODELPLANE_GATEWAY_API_CHANNEL picks the Gateway API channel: standard (default) or
# experimental (both define the same kinds, so a cluster has one of them).
#
# Where the manifests come from, in order:
#   1. ../shared/crds beside the checkout (the upstream releases, unchanged);
#   2. the same files downloaded from each project's release tag, checked against the
#      sha256 sums below (any machine with internet);
#   3. neither: the script stops and says what is missing and how to provide it.
# Either way each file is checked against its sum, so tests always see the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."

dest=${1:-target/crds}
channel=${MODELPLANE_GATEWAY_API_CHANNEL:-standard}
case "$channel" in
  standard | experimental) ;;
  *) echo "crds.sh: MODELPLANE_GATEWAY_API_CHANNEL must be standard or experimental, not '$channel'" >&2; exit 2 ;;
esac

gateway=https://raw.githubusercontent.com/kubernetes-sigs/gateway-api/v1.6.1/config/crd
inference=https://raw.githubusercontent.com/kubernetes-sigs/gateway-api-inference-extension/v1.6.0/config/crd/bases
lws=https://raw.githubusercontent.com/kubernetes-sigs/lws/v0.10.0/config/crd/bases
prometheus=https://raw.githubusercontent.com/prometheus-operator/prometheus-operator/v0.93.0/example/prometheus-operator-crd

# sha256, path under ../shared/crds, download address (the same file at the release tag).
manifests() {
  if [ "$channel" = standard ]; then cat <<LIST
53710048ba26f8620eed59d5e51b157ecf040daf5c6eef31a4b991e0808c4be5 gateway-api-v1.6.1/standard/gateway.networking.k8s.io_gatewayclasses.yaml $gateway/standard/gateway.networking.k8s.io_gatewayclasses.yaml
25b885f5870b8fff1ae82efa2628b2761cef3745900c2aecf8fb76629a01255a gateway-api-v1.6.1/standard/gateway.networking.k8s.io_gateways.yaml $gateway/standard/gateway.networking.k8s.io_gateways.yaml
53a8d029da8f07e55d3fa58a5cf6de5950dab19fbb8d6a8082fb5e51ca5ef6fc gateway-api-v1.6.1/standard/gateway.networking.k8s.io_grpcroutes.yaml $gateway/standard/gateway.networking.k8s.io_grpcroutes.yaml
a424a0d6c953b162e71d1d97bb7e75012d8f1ac264e7274f2763d1b96ab39852 gateway-api-v1.6.1/standard/gateway.networking.k8s.io_httproutes.yaml $gateway/standard/gateway.networking.k8s.io_httproutes.yaml
8c645e9333cfa67790cc2a53e0c00076f88b2bd4230d2b49688c78bc34f9b2c3 gateway-api-v1.6.1/standard/gateway.networking.k8s.io_referencegrants.yaml $gateway/standard/gateway.networking.k8s.io_referencegrants.yaml
LIST
  else cat <<LIST
ff653735d0477f97fb3cb2a21245f55ac6996dfe4f39969150f6989d0f1da826 gateway-api-v1.6.1/experimental/gateway.networking.k8s.io_gatewayclasses.yaml $gateway/experimental/gateway.networking.k8s.io_gatewayclasses.yaml
97092d53c4f61a9d1754f608ad1dc85566e197facb35d629132ff08954bd4422 gateway-api-v1.6.1/experimental/gateway.networking.k8s.io_gateways.yaml $gateway/experimental/gateway.networking.k8s.io_gateways.yaml
edfefc338093cdef9e0e4832c8286792934d76724c41a80eee22a1be73c132c6 gateway-api-v1.6.1/experimental/gateway.networking.k8s.io_grpcroutes.yaml $gateway/experimental/gateway.networking.k8s.io_grpcroutes.yaml
a3615d380381a768edbca2cfec067c037afa82e86bc9b1e29a0b84c8a28d76b3 gateway-api-v1.6.1/experimental/gateway.networking.k8s.io_httproutes.yaml $gateway/experimental/gateway.networking.k8s.io_httproutes.yaml
e1d9a270f94895640db547421dfa708db2ae935a1a8c033a6cf6481274f5029e gateway-api-v1.6.1/experimental/gateway.networking.k8s.io_referencegrants.yaml $gateway/experimental/gateway.networking.k8s.io_referencegrants.yaml
LIST
  fi
  cat <<LIST
55e0dbf39c50c4bbdd60106493a4573df4bb44479f9ce46762f1af718883e5cd gateway-api-inference-extension-v1.6.0/inference.networking.k8s.io_inferencepools.yaml $inference/inference.networking.k8s.io_inferencepools.yaml
3650e4cd42d12e14569ec8042d0c797c803e05eff9a3959b3406184d39cfef9f lws-v0.10.0/disaggregatedset.x-k8s.io_disaggregatedsetrolescalers.yaml $lws/disaggregatedset.x-k8s.io_disaggregatedsetrolescalers.yaml
6dc06e630cc88c28ba5406dc4a15ac593f4ec1af89ef439e1bdb770d4a7e74a8 lws-v0.10.0/disaggregatedset.x-k8s.io_disaggregatedsets.yaml $lws/disaggregatedset.x-k8s.io_disaggregatedsets.yaml
c5dcad8ed943e495490241f00b9a1b45d51203b6d484020db3636d5bf553568e lws-v0.10.0/leaderworkerset.x-k8s.io_leaderworkersets.yaml $lws/leaderworkerset.x-k8s.io_leaderworkersets.yaml
45a93443daa687d3654f7e9631909ff7edcdf3ec09c5e60251b74aa2722aee5d prometheus-operator-v0.93.0/monitoring.coreos.com_podmonitors.yaml $prometheus/monitoring.coreos.com_podmonitors.yaml
a99047972c9dd7679ce2050b9968e8a08773492e671b3e17abd476d42aa78a32 prometheus-operator-v0.93.0/monitoring.coreos.com_servicemonitors.yaml $prometheus/monitoring.coreos.com_servicemonitors.yaml
LIST
}

shared=../shared/crds
fetch() { # url file
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 2 --connect-timeout 10 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -T 10 -O "$2" "$1"
  else
    return 1
  fi
}

mkdir -p "$dest"
rm -f "$dest"/*.yaml
while read -r sum path url; do
  file="$dest/$(basename "$path")"
  if [ -f "$shared/$path" ]; then
    cp "$shared/$path" "$file"
  elif ! fetch "$url" "$file.part" 2>/dev/null; then
    rm -f "$file.part"
    cat >&2 <<MSG
crds.sh: the CustomResourceDefinition manifest $(basename "$path") is not available.
  It was looked for in $shared/$path (the shared folder beside the checkout)
  and could not be downloaded from $url.
  Provide it by putting the upstream release files at the paths this script names under $shared,
  or run this script once on a machine with internet and copy $dest here.
MSG
    exit 1
  else
    mv "$file.part" "$file"
  fi
  echo "$sum  $file" | sha256sum --check --quiet >/dev/null 2>&1 || {
    rm -f "$file"
    echo "crds.sh: $(basename "$path") does not match its recorded sha256 ($sum): refusing it" >&2
    exit 1
  }
  chmod 644 "$file"
done < <(manifests)
echo "$dest"
