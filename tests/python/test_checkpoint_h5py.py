#!/usr/bin/env python3
"""Checkpoints between tessera and h5py (issue 34): h5py reads a checkpoint tessera wrote and
compares it with the values tessera printed; tessera loads a file h5py wrote, into shardings of
its own, and prints what it read. Run by ctest (checkpoint_h5py) with the checkpoint test binary:

    python3 tests/python/test_checkpoint_h5py.py build/tests/tessera_checkpoint_tests

Exits 77 (ctest: skipped) where h5py cannot be imported (Debian: python3-h5py).
"""
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"skipped: {e} (Debian: apt-get install python3-h5py)")
    sys.exit(77)


def main(binary):
    with tempfile.TemporaryDirectory(prefix="tessera_h5py_") as d:
        rng = np.random.default_rng(34)
        written = {
            "0": rng.standard_normal((4, 6)).astype(np.float32),
            "1/0": rng.integers(-1000, 1000, size=5).astype(np.int32),
            "1/1": np.array([True, False, True]),
        }
        with h5py.File(os.path.join(d, "h5py.h5"), "w") as f:
            for k, v in written.items():
                f[k] = v
        out = subprocess.run([binary, "[.interop]"], env={**os.environ, "TESSERA_H5PY_DIR": d},
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stdout, out.stderr)
            sys.exit(1)
        printed = {}
        for line in out.stdout.splitlines():
            parts = line.split()
            if parts and parts[0] in ("saved", "loaded", "loaded-one"):
                printed[(parts[0], parts[1])] = np.array([float(x) for x in parts[2:]])

        failures = []
        # h5py reads the global arrays tessera wrote, with their attributes.
        with h5py.File(os.path.join(d, "tessera.h5")) as f:
            names = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            if sorted(names) != ["0/0", "0/1", "1/0", "1/1"]:
                failures.append(f"datasets {sorted(names)}")
            expect_dtype = {"0/0": np.float32, "0/1": np.float32, "1/0": np.int64, "1/1": np.float32}
            for leaf, dtype in expect_dtype.items():
                a = f[leaf][...]
                if a.dtype != dtype:
                    failures.append(f"{leaf}: dtype {a.dtype}, not {np.dtype(dtype)}")
                if not np.array_equal(a.ravel().astype(np.float64), printed[("saved", leaf)]):
                    failures.append(f"{leaf}: h5py read {a.ravel()}, tessera printed {printed[('saved', leaf)]}")
            if f["0/0"].shape != (6, 10):
                failures.append(f"0/0: shape {f['0/0'].shape}")
            if "P('x', 'y')" not in f["0/0"].attrs["sharding"]:
                failures.append(f"0/0: sharding attribute {f['0/0'].attrs['sharding']!r}")
            if not f.attrs["tessera_version"]:
                failures.append("no tessera_version attribute")
        # tessera read what h5py wrote.
        for leaf, v in written.items():
            got = printed.get(("loaded", leaf))
            if got is None or not np.array_equal(v.ravel().astype(np.float64), got):
                failures.append(f"tessera loaded {leaf} as {got}, h5py wrote {v.ravel()}")
        if not np.array_equal(written["0"].ravel().astype(np.float64), printed.get(("loaded-one", "0"))):
            failures.append("load<float, 2>(path, '0', ...) differs")
        for f_ in failures:
            print("FAIL:", f_)
        print(f"h5py {h5py.__version__}: {'ok' if not failures else 'failed'}")
        sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main(sys.argv[1])
