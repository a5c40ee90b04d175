# shellcheck shell=bash
# Shared helpers for scripts/tour and scripts/test (sourced, not executed).

# Debian packages every tessera build needs (libopenblas-dev and libboost-dev are optional to
# tessera itself: without OpenBLAS, float/double matrix products use tessera's own kernel; without
# Boost.Hana, Hana structs and hana::maps are not tree nodes and tree_hana_test is not built).
TESSERA_BASE_PACKAGES=(cmake g++ make pkg-config xtensor-dev libxsimd-dev
                       catch2 libbenchmark-dev ccache libopenblas-dev nlohmann-json3-dev libboost-dev)

tessera_log() { printf '\n==> %s\n' "$*"; }

# tessera_ensure_packages PKG...
#   Installs the missing Debian packages with apt-get when running as root;
#   otherwise prints the exact command to run and exits 1. On systems without
#   dpkg the check is skipped (dependencies must then be provided manually).
tessera_ensure_packages() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "warning: dpkg-query not found; not checking packages ($*)." >&2
    echo "         Make sure cmake, a C++20 compiler, xtensor, xsimd, Boost," >&2
    echo "         Catch2 v2 and Google Benchmark are installed." >&2
    return 0
  fi
  local missing=() pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
      missing+=("$pkg")
    fi
  done
  if ((${#missing[@]} == 0)); then
    echo "all required packages present: $*"
    return 0
  fi
  echo "missing Debian packages: ${missing[*]}"
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
  else
    echo "Please install them first, e.g.:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}

# Number of parallel build jobs (defaults to 2; override with TESSERA_JOBS).
TESSERA_JOBS=${TESSERA_JOBS:-2}
