"""Shared by the golden generators: JAX on 8 CPU devices, one way to write a golden file, and the
helpers several generators use (meshes over the first devices, specs written as short strings and
as JSON, deterministic float32 inputs, values as JSON).

Every generator writes tests/golden/<name>.json as {"generator", "jax_version", "devices",
"cases": {name: case}}; tests/jax/golden.hpp reads "cases" and fails for a case no C++ check
reads. TESSERA_GOLDEN_OUT redirects the output (tools/jax_reference/regenerate.sh uses it to diff).
"""
import json
import os

import numpy as np

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import jax  # noqa: E402

from jax.sharding import PartitionSpec as P  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
assert len(jax.devices()) == 8, "the goldens are written with 8 CPU devices"

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.environ.get("TESSERA_GOLDEN_OUT", os.path.join(ROOT, "tests", "golden"))


class Cases:
    """An ordered set of named cases; a name used twice is a bug in the generator."""

    def __init__(self):
        self.cases = {}

    def add(self, name, **case):
        assert name not in self.cases, f"case {name!r} written twice"
        self.cases[name] = case

    def write(self, filename, generator):
        os.makedirs(OUT_DIR, exist_ok=True)
        path = os.path.join(OUT_DIR, filename)
        doc = {"generator": generator, "jax_version": jax.__version__, "devices": len(jax.devices()),
               "cases": self.cases}
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=False)
            f.write("\n")
        print(f"{path}: {len(self.cases)} cases")


# ---- meshes and specs -----------------------------------------------------------------------------

def make_mesh(shape, names, axis_type):
    """A mesh of the given shape over the first prod(shape) CPU devices, every axis of axis_type."""
    n = int(np.prod(shape))
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(names), devices=jax.devices()[:n])


def parse_spec(s):
    """ "X_" -> P('X', None); "(XY)_" -> P(('X', 'Y'), None); "r" -> P(). One character per dimension,
    "_" for None, "(...)" for a multi-axis entry (axis names of one character)."""
    if s == "r":
        return P()
    entries, i = [], 0
    while i < len(s):
        if s[i] == "_":
            entries.append(None)
        elif s[i] == "(":
            j = s.index(")", i)
            entries.append(tuple(s[i + 1:j]))
            i = j
        else:
            entries.append(s[i])
        i += 1
    return P(*entries)


def spec_json(spec, rank):
    """The spec as a list of rank entries (null, "X" or ["X", "Y"]), trailing nulls dropped."""
    out = []
    for d in range(rank):
        e = spec[d] if d < len(spec) else None
        if isinstance(e, (tuple, list)):
            e = list(e) if len(e) > 1 else (e[0] if e else None)
        out.append(e)
    while out and out[-1] is None:
        out.pop()
    return out


# ---- float32 inputs, exact in float32 -------------------------------------------------------------

def smooth(shape, i):
    """Multiples of 1/8 in [-1.25, 1.25], a different pattern per input i."""
    n = int(np.prod(shape, dtype=np.int64))
    return ((((np.arange(n) * (2 * i + 3) + 7 * i) % 21) - 10) / 8).astype(np.float32).reshape(shape)


def labels(shape, i):
    """0 or 1 (the targets of a logistic regression): 1 at every third element."""
    n = int(np.prod(shape, dtype=np.int64))
    return (np.arange(n) % 3 == 0).astype(np.float32).reshape(shape)


def flat(x):
    """Values, flat and row-major; a value that is not finite is written as the string "nan", "inf" or
    "-inf" (JSON has no such numbers)."""
    return [v if np.isfinite(v) else str(v) for v in np.asarray(x).reshape(-1).astype(float).tolist()]
