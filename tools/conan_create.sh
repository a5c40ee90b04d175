#!/usr/bin/env bash
# Runs the real `conan create` of conan/conanfile.py, twice (with_blas=False and True),
# each building and running conan/test_package, and prints a PASS/FAIL summary.
#
# Conan comes from PyPI into a venv (build/conan-venv) and keeps its cache and profiles in a
# private home (build/conan-home), so the user's ~/.conan2 is never touched. Nothing else is
# downloaded: ConanCenter is disabled in that home and the host profile lists xtensor, xsimd
# (and OpenBLAS for with_blas=True) under [platform_requires] at the versions dpkg reports,
# so the packages are the system's (Debian: xtensor-dev, libxsimd-dev, libopenblas-dev).
#
# usage: tools/conan_create.sh            (from anywhere; exit status 0 only if both pass)
# Not run by CI or ctest: it needs PyPI and takes a few minutes.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build"
venv="$build/conan-venv"
export CONAN_HOME="$build/conan-home"
logs="$build/conan-create-logs"

die() { printf 'conan_create.sh: %s\n' "$*" >&2; exit 2; }

# The version conan create must be given: version.hpp's, which packaging.versions keeps
# equal to CMakeLists.txt's and the recipe's.
version=$(sed -n 's/^#define TESSERA_VERSION_STRING "\([^"]*\)".*/\1/p' "$root/include/tessera/version.hpp")
[[ -n "$version" ]] || die "no TESSERA_VERSION_STRING in include/tessera/version.hpp"

# The upstream version of an installed Debian package: 1:0.3.21+ds-4 -> 0.3.21.
debian_version() {
  local v
  v=$(dpkg-query -W -f='${Version}' "$1" 2>/dev/null) || return 1
  [[ -n "$v" ]] || return 1
  v=${v#*:}; v=${v%-*}; v=${v%%[+~]*}
  printf '%s\n' "$v"
}
command -v dpkg-query >/dev/null || die "dpkg-query not found: this script reads the system's xtensor, xsimd and OpenBLAS versions from dpkg (Debian/Ubuntu)"
xtensor_v=$(debian_version xtensor-dev) || die "xtensor-dev is not installed (apt-get install xtensor-dev)"
xsimd_v=$(debian_version libxsimd-dev) || die "libxsimd-dev is not installed (apt-get install libxsimd-dev)"
openblas_v=$(debian_version libopenblas-dev) || die "libopenblas-dev is not installed (apt-get install libopenblas-dev); the with_blas=True run links it"

mkdir -p "$build" "$logs"
if [[ ! -x "$venv/bin/conan" ]]; then
  echo "==> creating $venv with Conan 2 from PyPI"
  python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install --quiet 'conan>=2,<3' || die "pip install 'conan>=2,<3' failed (is PyPI reachable?)"
fi
conan="$venv/bin/conan"
conan_version=$("$conan" --version) || die "$conan --version failed"
echo "==> $conan_version, CONAN_HOME=$CONAN_HOME"

"$conan" profile detect --force >"$logs/profile-detect.log" 2>&1 \
  || die "conan profile detect failed; see $logs/profile-detect.log"
# Only the system's packages: a requirement missing from [platform_requires] must fail here
# rather than be fetched from ConanCenter.
if "$conan" remote list 2>/dev/null | grep -q '^conancenter'; then
  "$conan" remote disable conancenter >/dev/null || die "conan remote disable conancenter failed"
fi

# Host profiles: the detected one (compiler, arch, build type), C++20 (tessera's validate()
# requires it; the detected default is older), and the system's libraries.
profiles="$CONAN_HOME/profiles"
write_profile() {  # write_profile <name> <platform requirement>...
  local name=$1; shift
  {
    echo "include(default)"
    echo "[settings]"
    echo "compiler.cppstd=20"
    echo "[platform_requires]"
    printf '%s\n' "$@"
  } >"$profiles/$name"
}
write_profile tessera-system "xtensor/$xtensor_v" "xsimd/$xsimd_v"
write_profile tessera-system-blas "xtensor/$xtensor_v" "xsimd/$xsimd_v" "openblas/$openblas_v"

declare -a summary=()
failed=0
run_create() {  # run_create <with_blas> <profile>
  local blas=$1 profile=$2 log="$logs/create-with_blas-$1.log" start rc
  # test_package builds under build/ rather than in conan/test_package, and writes no
  # CMakeUserPresets.json there: the checkout stays clean.
  local cmd=("$conan" create "$root/conan" --version "$version"
             -pr:h "$profile" -pr:b default -o "tessera/*:with_blas=$blas"
             -c "tools.cmake.cmake_layout:test_folder=$build/conan-test-package"
             -c "tools.cmake.cmaketoolchain:user_presets=")
  echo "==> ${cmd[*]#"$venv/bin/"}"
  echo "    (log: $log)"
  start=$SECONDS
  "${cmd[@]}" >"$log" 2>&1
  rc=$?
  # test_package's own verdict, printed by the program conan create ran.
  grep -E '^(tessera [0-9]|matmul of|FAILED)' "$log" | sed 's/^/    /'
  if ((rc == 0)); then
    summary+=("PASS  with_blas=$blas  ($((SECONDS - start)) s)")
  else
    summary+=("FAIL  with_blas=$blas  (exit $rc; last lines of $log below)")
    tail -n 25 "$log" | sed 's/^/    | /'
    failed=1
  fi
}

"$conan" remove "tessera/*" --confirm >/dev/null 2>&1 || true  # build from this checkout, always
run_create False tessera-system
run_create True tessera-system-blas

echo
echo "==> conan create summary: tessera $version, $conan_version, system xtensor $xtensor_v, xsimd $xsimd_v, OpenBLAS $openblas_v"
printf '    %s\n' "${summary[@]}"
if ((failed)); then
  echo "FAIL"
  exit 1
fi
echo "PASS"
