#!/usr/bin/env bash
# Compile times of tessera's translation units against a reference file, in one run.
#
#   bash bench/compile_times.sh                 every file, g++ and clang++, -O0 and -O2
#   COMPILERS="g++" OPTS="-O2" bash bench/compile_times.sh
#   FILES="examples/data_sharding.cpp examples/nn_layer.cpp" bash bench/compile_times.sh
#   REPEAT=3 bash bench/compile_times.sh        best of 3 for each figure
#   SEPARATE=1 bash bench/compile_times.sh      each tessera file also with TESSERA_SEPARATE_COMPILATION
#                                               (docs/headers.md: the runtime compiled once elsewhere)
#
# The reference is what a user of xtensor and Boost.Hana pays before writing any code:
# xtensor + xmath + xio + Hana and a trivial main. Each file is compiled alone (-c, one job),
# and the table gives seconds (best of REPEAT), the ratio to the reference with the same
# compiler and flags, and the compiler's peak memory. Run it on a quiet machine: the figures
# are wall-clock seconds of one process.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
COMPILERS=${COMPILERS:-"g++ clang++"}
OPTS=${OPTS:-"-O0 -O2"}
REPEAT=${REPEAT:-1}
# The reference includes Boost.Hana, the issue's point of comparison (tessera itself does not
# need Boost): install it for this script.
source "$ROOT/scripts/lib-deps.sh"
tessera_ensure_packages libboost-dev >&2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

cat >"$WORK/reference.cpp" <<'EOF'
// The reference: what xtensor + Hana cost before any code is written.
#include <boost/hana.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>
int main() {
  xt::xtensor<float, 1> a = {1.0f, 2.0f, 3.0f};
  return static_cast<int>(xt::sum(a)()) + static_cast<int>(boost::hana::size(boost::hana::make_tuple(1, 2))) - 8;
}
EOF
cat >"$WORK/minimal.cpp" <<'EOF'
// A minimal tessera program: one device_put and one to_host.
#include <tessera/tessera.hpp>
int main() {
  tessera::runtime rt{2};
  auto m = tessera::make_mesh<"x">({2});
  xt::xtensor<float, 1> h = {1.0f, 2.0f, 3.0f, 4.0f};
  auto a = tessera::device_put(h, tessera::named_sharding(m, tessera::P<"x">{}));
  return static_cast<int>(tessera::to_host(a)(0)) - 1;
}
EOF

if [[ -n ${FILES:-} ]]; then
  read -r -a files <<<"$FILES"
else
  files=(examples/*.cpp)
  for f in tests/unit/*_test.cpp; do files+=("$f"); done
fi

# time_one CXX OPT FILE -> "seconds peak_MiB" (best of REPEAT); "fail" if it does not compile.
time_one() {
  local cxx=$1 opt=$2 file=$3 best="" mem="" i s m
  local defs=()
  [[ -n ${4:-} ]] && defs=("$4")
  for ((i = 0; i < REPEAT; i++)); do
    if ! /usr/bin/time -o "$WORK/time" -f '%e %M' "$cxx" -std=c++20 "$opt" "${defs[@]}" -I"$ROOT/include" \
         -I"$ROOT/tests/unit" -c "$file" -o "$WORK/out.o" >/dev/null 2>"$WORK/err"; then
      echo "fail"; return
    fi
    read -r s m <"$WORK/time"
    if [[ -z $best ]] || awk -v a="$s" -v b="$best" 'BEGIN{exit !(a<b)}'; then best=$s; mem=$m; fi
  done
  echo "$best $((mem / 1024))"
}

printf '%-44s %-8s %-4s %9s %7s %9s\n' "file" "compiler" "opt" "seconds" "ratio" "peak MiB"
for cxx in $COMPILERS; do
  command -v "$cxx" >/dev/null || { echo "($cxx not found: skipped)"; continue; }
  for opt in $OPTS; do
    read -r ref_s ref_m <<<"$(time_one "$cxx" "$opt" "$WORK/reference.cpp")"
    printf '%-44s %-8s %-4s %9s %7s %9s\n' "reference (xtensor+xmath+xio+Hana)" "$cxx" "$opt" "$ref_s" "1.00" "$ref_m"
    for f in "$WORK/minimal.cpp" "${files[@]}"; do
      for mode in header-only separate; do
        [[ $mode == separate && ${SEPARATE:-0} != 1 ]] && continue
        name=${f#"$ROOT/"}
        [[ $f == "$WORK/minimal.cpp" ]] && name="minimal tessera program"
        def=""
        if [[ $mode == separate ]]; then
          name="$name (separate)"
          def="-DTESSERA_SEPARATE_COMPILATION"
        fi
        r=$(time_one "$cxx" "$opt" "$f" "$def")
        if [[ $r == fail ]]; then
          printf '%-44s %-8s %-4s %9s\n' "$name" "$cxx" "$opt" "FAILED"
          continue
        fi
        read -r s m <<<"$r"
        printf '%-44s %-8s %-4s %9s %7s %9s\n' "$name" "$cxx" "$opt" "$s" \
          "$(awk -v a="$s" -v b="$ref_s" 'BEGIN{printf "%.2f", a/b}')" "$m"
      done
    done
  done
done
