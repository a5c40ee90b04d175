#!/bin/sh
# CXX_COMPILER_LAUNCHER of the tests a stage only compiles (TESSERA_TEST_SYNTAX_ONLY): runs the
# compile command with -fsyntax-only (every template the test instantiates is still checked,
# and its dependency file written), then leaves an empty object file for the build tool. With
# g++ -O0, code generation is three quarters of a unit test's compile time (matmul_test: 42.7 s
# of user CPU against 11.3 s), and the sanitizer stage builds and runs the same tests.
# A precompiled header (*.gch, *.pch) is built as usual, so the checks reuse it.
# With --no-link first, it is the CXX_LINKER_LAUNCHER of such targets (TESSERA_EXAMPLES_SYNTAX_ONLY,
# TESSERA_BENCH_SYNTAX_ONLY): their objects are empty, so it links nothing and only leaves an
# empty file where the executable would be.
no_link=""
if [ "$1" = "--no-link" ]; then no_link=1; shift; fi
out=""
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out=$a; fi
  prev=$a
done
if [ -n "$no_link" ]; then
  if [ -n "$out" ]; then : > "$out"; fi
  exit 0
fi
case "$out" in
  *.gch | *.pch) exec "$@" ;;
esac
"$@" -fsyntax-only || exit $?
if [ -n "$out" ]; then : > "$out"; fi
