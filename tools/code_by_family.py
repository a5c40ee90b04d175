#!/usr/bin/env python3
"""The code in an object file, by function family: where a translation unit's compile time goes.

    g++ -std=c++20 -O2 -c -Iinclude -Iexamples examples/transformer.cpp -o /tmp/t.o
    python3 tools/code_by_family.py /tmp/t.o [TOP]

g++'s time at -O2 follows the code it emits (bench/RESULTS.md, "Twenty-fourth session"), so
this is the map for trimming it. Each emitted function is counted once: constructor and
destructor aliases (C1/C2, D1/D2 of the same size) are merged. A family is the demangled
name with template arguments and parameters removed (`tessera::detail::fill_pass`); its
instantiations are listed as a count. The summary splits the code three ways:
  expression: functions whose type names an expression node or a lambda (code per node);
  sharding:   functions whose type names a named_sharding but no node (code per sharding);
  other:      the rest (per element type and rank, the runtime, the standard library).
Only per-node code moves the ratio of two programs' compile times (issue 31's target):
code both programs share moves both. Needs binutils' nm and c++filt.
"""
import collections
import re
import subprocess
import sys

NODE_MARKS = ("elementwise<", "contraction<", "reduction<", "einsum", "transposed<", "resharded<", "indexed<",
              "reshaped", "partial_array<", "map_cursor", "{lambda", "expression_fill")


def strip_templates(name):
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        if depth == 0:
            out.append(ch)
        if ch == ">":
            depth = max(depth - 1, 0)
    return "".join(out)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    obj = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    listing = subprocess.run(["nm", "-S", "--size-sort", obj], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            rows.append((int(parts[1], 16), parts[3]))
    seen, unique = set(), []
    for size, mangled in rows:
        key = (size, re.sub(r"([CD])[012]E", r"\1xE", mangled))
        if key not in seen:
            seen.add(key)
            unique.append((size, mangled))
    names = subprocess.run(["c++filt"], input="\n".join(m for _, m in unique), capture_output=True, text=True,
                           check=True).stdout.splitlines()
    family, count, kind = collections.Counter(), collections.Counter(), collections.Counter()
    for (size, _), name in zip(unique, names):
        if any(mark in name for mark in NODE_MARKS):
            kind["expression"] += size
        elif "named_sharding<" in name:
            kind["sharding"] += size
        else:
            kind["other"] += size
        key = re.sub(r"\(.*", "", strip_templates(name))
        family[key] += size
        count[key] += 1
    print(f"{obj}: {len(unique)} functions, {sum(kind.values())} bytes of code")
    for k in ("expression", "sharding", "other"):
        print(f"  {k:<10} {kind[k]:>9} bytes")
    print(f"\n{'bytes':>9} {'count':>6}  family")
    for key, size in family.most_common(top):
        print(f"{size:>9} {count[key]:>6}  {key[:150]}")


if __name__ == "__main__":
    main()
