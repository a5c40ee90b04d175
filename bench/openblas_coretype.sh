# Sourced by the bench/run_*.sh scripts whose tessera side multiplies through OpenBLAS: a
# DYNAMIC_ARCH OpenBLAS that does not know the CPU (Debian 12's 0.3.21 on a 2023 Xeon, family 6
# model 207) falls back to its SSE3 "Prescott" kernel, a third as fast as its AVX-512 one; tessera
# then multiplies with its own kernel (matmul_backend() says so). For the peers' comparisons the
# scripts give OpenBLAS the kernel a user would configure for this CPU, by OPENBLAS_CORETYPE,
# unless it is set already, and say so. (The transformer's step: 18 ms on "Prescott", 15 ms on
# tessera's kernel, 11 ms with OPENBLAS_CORETYPE=SkylakeX; bench/RESULTS.md.)
if [[ -z ${OPENBLAS_CORETYPE:-} ]] && command -v python3 >/dev/null 2>&1; then
  tessera_openblas_core=$(python3 - <<'PY' 2>/dev/null || true
import ctypes, ctypes.util
for name in ("libopenblas.so.0", ctypes.util.find_library("openblas")):
    if not name:
        continue
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        continue
    lib.openblas_get_corename.restype = ctypes.c_char_p
    print(lib.openblas_get_corename().decode())
    break
PY
)
  case "$tessera_openblas_core" in
    Prescott|Core2|Penryn|Dunnington|Nehalem|Katmai|Coppermine|Northwood|Banias|Atom|Unknown)
      tessera_cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
      if [[ $tessera_cpu_flags == *avx512f* && $tessera_cpu_flags == *avx512bw* && $tessera_cpu_flags == *avx512vl* ]]; then
        export OPENBLAS_CORETYPE=SkylakeX
      elif [[ $tessera_cpu_flags == *avx2* && $tessera_cpu_flags == *fma* ]]; then
        export OPENBLAS_CORETYPE=Haswell
      fi
      if [[ -n ${OPENBLAS_CORETYPE:-} ]]; then
        echo "OpenBLAS does not know this CPU (it chose its $tessera_openblas_core kernel): OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE" >&2
      fi
      ;;
  esac
  unset tessera_openblas_core tessera_cpu_flags
fi
