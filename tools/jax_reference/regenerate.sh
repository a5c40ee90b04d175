#!/usr/bin/env bash
# Regenerates every golden file with the pinned JAX and shows how it differs from the committed
# one. `--write` replaces the committed files. Needs build/jax-venv (setup_venv.sh); CI does not.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${JAX_VENV:-$ROOT/build/jax-venv}/bin/python
[[ -x $PY ]] || { echo "no JAX venv: run tools/jax_reference/setup_venv.sh first" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for gen in "$ROOT"/tools/jax_reference/gen_*.py; do
  TESSERA_GOLDEN_OUT=$TMP "$PY" "$gen"
done
status=0
for f in "$TMP"/*.json; do
  name=$(basename "$f")
  if ! diff -u "$ROOT/tests/golden/$name" "$f" > "$TMP/$name.diff"; then
    status=1
    echo "== $name differs from the committed file:"
    head -100 "$TMP/$name.diff"
  else
    echo "== $name: unchanged"
  fi
done
if [[ ${1:-} == --write ]]; then
  cp "$TMP"/*.json "$ROOT/tests/golden/"
  echo "written to tests/golden/"
  exit 0
fi
exit $status
