#!/usr/bin/env bash
# Compile times of every example before and after a change, in one run: the tree at revision
# BASE (a git worktree) and this one, alternating file by file so that both see the same
# machine. g++ -O2 -c, one job, one run; seconds and peak MiB.
#
#   bash bench/compile_times_vs.sh 3697fab
#   CXX=clang++ OPT=-O0 bash bench/compile_times_vs.sh HEAD~3
#   FILES="examples/data_sharding.cpp" bash bench/compile_times_vs.sh 3697fab
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE=${1:?usage: bench/compile_times_vs.sh BASE_REVISION}
CXX=${CXX:-g++}
OPT=${OPT:--O2}
WORK=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$WORK/base" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
git -C "$ROOT" worktree add --detach -f "$WORK/base" "$BASE" >/dev/null 2>&1

cat >"$WORK/reference.cpp" <<'REF'
// The reference of bench/compile_times.sh: xtensor + Hana and a trivial main.
#include <boost/hana.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>
int main() {
  xt::xtensor<float, 1> a = {1.0f, 2.0f, 3.0f};
  return static_cast<int>(xt::sum(a)()) + static_cast<int>(boost::hana::size(boost::hana::make_tuple(1, 2))) - 8;
}
REF

# one TREE FILE -> "seconds peak_MiB"
one() {
  /usr/bin/time -o "$WORK/time" -f '%e %M' "$CXX" -std=c++20 "$OPT" -I"$1/include" -I"$1/examples" -c "$2" \
    -o "$WORK/out.o" >/dev/null 2>&1 || { echo "fail -"; return; }
  read -r s m <"$WORK/time"
  echo "$s $((m / 1024))"
}

printf '%-34s %16s %16s %7s\n' "file ($CXX $OPT)" "before (s MiB)" "after (s MiB)" "after/before"
read -r rs rm <<<"$(one "$ROOT" "$WORK/reference.cpp")"
printf '%-34s %16s\n' "reference" "$rs $rm"
for f in ${FILES:-$(cd "$ROOT" && ls examples/*.cpp)}; do
  [[ -f $WORK/base/$f ]] || continue
  read -r bs bm <<<"$(one "$WORK/base" "$WORK/base/$f")"
  read -r as am <<<"$(one "$ROOT" "$ROOT/$f")"
  printf '%-34s %16s %16s %7s\n' "$f" "$bs $bm" "$as $am" "$(awk -v a="$as" -v b="$bs" 'BEGIN{printf "%.2f", a/b}')"
done
read -r rs rm <<<"$(one "$ROOT" "$WORK/reference.cpp")"
printf '%-34s %16s\n' "reference" "$rs $rm"
