#!/usr/bin/env bash
# Creates build/jax-venv with the pinned JAX (PyPI only), for the golden generators and the
# JAX benchmarks. JAX 0.12 needs Python 3.12 or newer: set PYTHON, or have python3.12 on PATH.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${JAX_VENV:-$ROOT/build/jax-venv}
PY=${PYTHON:-}
if [[ -z $PY ]]; then
  for c in python3.13 python3.12 python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then PY=$c; break; fi
  done
fi
[[ -n $PY ]] || { echo "JAX 0.12 needs Python >= 3.12; set PYTHON=/path/to/python3.12" >&2; exit 1; }
[[ -x $VENV/bin/python ]] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q -r "$ROOT/tools/jax_reference/requirements.txt"
echo "$VENV"
