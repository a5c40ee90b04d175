#!/usr/bin/env python3
"""Prints the table of bench/run_collectives.sh: tessera against OpenMPI and
against the memory-traffic floor, from one run's files.

usage: collectives_table.py TESSERA_JSON MPI_TXT [STREAM_AFTER_JSON]

TESSERA_JSON is bench_collectives_bench's --benchmark_out; MPI_TXT holds the
"mpi <op> <ranks> <bytes> <seconds>" lines of bench_collectives_mpi; the
optional STREAM_AFTER_JSON is a second STREAM measurement taken after the MPI
runs. The floor of a collective is its floor_bytes (what it must read and
write, counted as STREAM counts) over the STREAM copy bandwidth measured at the
nearest footprint at or above the collective's (inputs plus outputs of all
devices), the mean of the measurements before and after.
"""
import json
import re
import sys


def load_runs(path):
    with open(path) as f:
        data = json.load(f)
    return [b for b in data["benchmarks"] if b.get("run_type", "iteration") == "iteration"]


def to_us(run):
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[run["time_unit"]]
    return run["real_time"] * scale


def arg(name, key):
    m = re.search(key + r":(\d+)", name)
    return int(m.group(1)) if m else None


def plain_arg(name):
    m = re.match(r"[A-Za-z_]+/(\d+)", name)
    return int(m.group(1)) if m else None


def size_text(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def fmt_us(us):
    if us is None:
        return "-"
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.3g} us"


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}"


def stream_gbs(runs, name):
    """{footprint bytes: GB/s} of the STREAM runs called `name`."""
    return {int(r["footprint_bytes"]): r["bytes_per_second"] / 1e9 for r in runs if r["name"].startswith(name + "/")}


def mean_by_footprint(measurements):
    keys = set().union(*measurements)
    return {f: sum(m[f] for m in measurements if f in m) / sum(1 for m in measurements if f in m) for f in keys}


def copy_at(copy, footprint):
    """The copy bandwidth at the smallest measured footprint >= footprint, else the largest."""
    above = [f for f in copy if f >= footprint]
    return copy[min(above)] if above else copy[max(copy)]


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    runs = load_runs(argv[1])
    mpi = {}
    with open(argv[2]) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 5 and parts[0] == "mpi":
                mpi[(parts[1], int(parts[2]), int(parts[3]))] = float(parts[4]) * 1e6
    copies = [stream_gbs(runs, "BM_stream_copy")]
    triads = [stream_gbs(runs, "BM_stream_triad")]
    if len(argv) > 3:
        after = load_runs(argv[3])
        copies.append(stream_gbs(after, "BM_stream_copy"))
        triads.append(stream_gbs(after, "BM_stream_triad"))
    copy = mean_by_footprint(copies)

    print("STREAM on every core, GB/s (before / after the MPI runs):")
    for f in sorted(copy, reverse=True):
        print(f"- copy, {size_text(f)} footprint: " + " / ".join(f"{c[f]:.1f}" for c in copies if f in c))
    for f in sorted(mean_by_footprint(triads)):
        print(f"- triad, {size_text(f)} footprint: " + " / ".join(f"{t[f]:.1f}" for t in triads if f in t))
    print()

    print("| collective | devices = ranks | per device | tessera shard_map | tessera runtime | OpenMPI | "
          "speed-up (shard_map) | speed-up (runtime) | floor | shard_map / floor | runtime / floor |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    runtime_level = {}
    for r in runs:
        m = re.match(r"BM_runtime_(\w+?)/", r["name"])
        if m:
            runtime_level[(m.group(1), arg(r["name"], "devices"), arg(r["name"], "bytes"))] = r["us_per_call"]
    results = {}
    for op in ("psum", "all_gather", "all_to_all"):
        for r in runs:
            if not r["name"].startswith(f"BM_{op}/"):
                continue
            key = (op, arg(r["name"], "devices"), arg(r["name"], "bytes"))
            t, m, rt = r["us_per_call"], mpi.get(key), runtime_level.get(key)
            floor = r["floor_bytes"] / (copy_at(copy, r["footprint_bytes"]) * 1e9) * 1e6
            results[key] = (t, m)
            print(f"| {op} | {key[1]} | {size_text(key[2])} | {fmt_us(t)} | {fmt_us(rt)} | {fmt_us(m)} | "
                  f"{fmt_ratio(m / t if m else None)} | {fmt_ratio(m / rt if m and rt else None)} | {fmt_us(floor)} | "
                  f"{fmt_ratio(t / floor)} | {fmt_ratio(rt / floor if rt else None)} |")

    fixed = {}
    for r in runs:
        name = r["name"]
        for key, prefix in (("barrier", "BM_team_barrier/"), ("dispatch", "BM_dispatch/"),
                            ("empty", "BM_shard_map_empty/")):
            if name.startswith(prefix):
                fixed.setdefault(plain_arg(name), {})[key] = r["us_per_call"] if key == "barrier" else to_us(r)
        if name.startswith("BM_shard_map_one_psum/"):
            fixed.setdefault(arg(name, "devices"), {})["one_psum"] = to_us(r)
    print("\n| devices | team barrier phase | dispatch round trip | empty shard_map | (empty - dispatch) / barrier phase | shard_map with one 4 KiB psum |")
    print("|---|---|---|---|---|---|")
    for k in sorted(fixed):
        f = fixed[k]
        extra = (f["empty"] - f["dispatch"]) / f["barrier"] if {"empty", "dispatch", "barrier"} <= f.keys() else None
        print(f"| {k} | {fmt_us(f.get('barrier'))} | {fmt_us(f.get('dispatch'))} | {fmt_us(f.get('empty'))} | "
              f"{fmt_ratio(extra)} | {fmt_us(f.get('one_psum'))} |")

    print("\nTargets:")
    t, m = results.get(("psum", 8, 4 << 20), (None, None))
    if t and m:
        print(f"- psum 4 MiB, 8 devices: {fmt_us(t)}; OpenMPI here {fmt_us(m)}: {m / t:.2f}x (target 5x: "
              f"{'met' if m / t >= 5 else 'not met'}); against the issue's 11 ms: {11000 / t:.2f}x")
    t, m = results.get(("psum", 2, 4 << 20), (None, None))
    if t and m:
        print(f"- psum 4 MiB, 2 devices: {fmt_us(t)}; OpenMPI {fmt_us(m)}: {m / t:.2f}x (target 1.5x: "
              f"{'met' if m / t >= 1.5 else 'not met'})")
    t, _ = results.get(("psum", 2, 4 << 10), (None, None))
    one = fixed.get(2, {}).get("one_psum")
    if t:
        print(f"- psum 4 KiB, 2 devices: {fmt_us(t)} per call in a body (target 10 us: "
              f"{'met' if t <= 10 else 'not met'}); a whole shard_map whose body is that psum: {fmt_us(one)}")
    for k in sorted(fixed):
        f = fixed[k]
        if {"empty", "dispatch", "barrier"} <= f.keys():
            print(f"- empty shard_map, {k} devices: {fmt_us(f['empty'])} = dispatch {fmt_us(f['dispatch'])} + "
                  f"{(f['empty'] - f['dispatch']) / f['barrier']:.1f} barrier phases' time")


if __name__ == "__main__":
    main(sys.argv)
