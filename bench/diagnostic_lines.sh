#!/usr/bin/env bash
# How many lines g++ and clang++ print for each compile-fail test (issue 14's diagnostics target).
#
#   bash bench/diagnostic_lines.sh                     every tests/compile_fail/*.cpp, g++ and clang++
#   COMPILERS=g++ bash bench/diagnostic_lines.sh tests/compile_fail/jax_reject_spec_longer_than_rank.cpp
#
# Each file is compiled with -fsyntax-only as ctest's compile-fail tests compile it; the table
# gives the number of lines of diagnostics and the first line that says "error".
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
COMPILERS=${COMPILERS:-"g++ clang++"}
if (($# > 0)); then files=("$@"); else files=(tests/compile_fail/*.cpp); fi
read -r -a compilers <<<"$COMPILERS"

printf '| test |'; for c in "${compilers[@]}"; do printf ' %s lines |' "$c"; done; printf '\n'
printf '|---|'; for _ in "${compilers[@]}"; do printf '%s' '---|'; done; printf '\n'
declare -A total
for f in "${files[@]}"; do
  printf '| %s |' "$(basename "$f" .cpp)"
  for c in "${compilers[@]}"; do
    n=$("$c" -std=c++20 -fsyntax-only -pthread -fdiagnostics-color=never -I"$ROOT/include" "$f" 2>&1 | wc -l || true)
    total[$c]=$(( ${total[$c]:-0} + n ))
    printf ' %s |' "$n"
  done
  printf '\n'
done
printf '| **total** |'; for c in "${compilers[@]}"; do printf ' %s |' "${total[$c]}"; done; printf '\n'
