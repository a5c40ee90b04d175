#!/bin/sh
# CXX_LINKER_LAUNCHER of the targets a stage only compiles (TESSERA_EXAMPLES_SYNTAX_ONLY,
# TESSERA_BENCH_SYNTAX_ONLY): their objects are empty (cmake/syntax_only.sh), so there is
# nothing to link; it leaves an empty file where the executable would be, for the build tool.
out=""
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out=$a; fi
  prev=$a
done
if [ -n "$out" ]; then : > "$out"; fi
