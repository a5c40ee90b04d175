"""Writes tests/golden/jax_reshape.json: the sharding JAX 0.12 gives jax.lax.reshape on Explicit
meshes (jax.typeof of the result), or its refusal, for tests/jax/reshape_golden_test.cpp.

    build/jax-venv/bin/python tools/jax_reference/gen_reshape.py

The sweep covers every split of one dimension into two or three pieces and every merge of two or
three neighbouring dimensions, of operands of rank 1 to 3 whose sizes are 1, 2, 3, 4, 6 or 8, under
every spec the operand admits on 1-, 2- and 3-axis meshes, plus size-1 insertions and removals and
regroupings JAX refuses. Each case records the operand's shape and spec, the new sizes, and either
JAX's result spec or the first line of JAX's error.
"""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding

from common import Cases, make_mesh, spec_json

MESHES = {
    "x2": ((2,), ("x",)),
    "x4": ((4,), ("x",)),
    "x2y2": ((2, 2), ("x", "y")),
    "x2y4": ((2, 4), ("x", "y")),
    "x2y2z2": ((2, 2, 2), ("x", "y", "z")),
}


def entries(names, sizes, n):
    """Every spec entry that shards a dimension of size n: None, one axis, or an ordered tuple of axes."""
    out = [None]
    for k in range(1, len(names) + 1):
        for combo in itertools.permutations(range(len(names)), k):
            if n % int(np.prod([sizes[c] for c in combo])) == 0:
                out.append(tuple(names[c] for c in combo))
    return out


def specs(names, sizes, shape):
    for combo in itertools.product(*[entries(names, sizes, n) for n in shape]):
        used = [a for e in combo if e for a in e]
        if len(used) == len(set(used)):
            yield combo


def factorings(n):
    """Ways to write n as a product of 2 or 3 factors > 1, in order."""
    out = []
    for a in range(2, n):
        if n % a == 0:
            out.append((a, n // a))
            for b in range(2, n // a):
                if (n // a) % b == 0 and n // a // b > 1:
                    out.append((a, b, n // a // b))
    return out


def new_shapes(shape):
    """Splits of one dim, merges of neighbouring dims, size-1 insertions/removals, one regrouping."""
    out = set()
    for i, n in enumerate(shape):
        for f in factorings(n):
            out.add(shape[:i] + f + shape[i + 1:])
    for i in range(len(shape)):
        for j in range(i + 2, min(len(shape), i + 3) + 1):
            out.add(shape[:i] + (int(np.prod(shape[i:j])),) + shape[j:])
    out.add(shape + (1,))
    out.add((1,) + shape)
    if 1 in shape:
        out.add(tuple(s for s in shape if s != 1))
    if len(shape) == 2 and shape[0] != shape[1]:
        out.add((shape[1], shape[0]))  # a regrouping (not a split nor a merge)
    return sorted(out)


SHAPES = [(8,), (4,), (6,), (12,), (8, 4), (4, 8), (2, 6), (6, 4), (8, 1), (4, 2, 2), (2, 4, 2), (8, 2, 3), (2, 2, 8)]


def main():
    c = Cases()
    for mname, (sizes, names) in MESHES.items():
        mesh = make_mesh(sizes, names, AxisType.Explicit)
        for shape in SHAPES:
            for sp in specs(names, sizes, shape):
                if all(e is None for e in sp):
                    continue  # replicated operands give replicated results; a few are enough
                for ns in new_shapes(shape):
                    x = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, jax.P(*sp)))
                    name = f"{mname}:{shape}:{spec_json(jax.P(*sp), len(shape))}->{ns}"
                    rec = {"mesh": list(sizes), "names": list(names), "shape": list(shape),
                           "spec": spec_json(jax.P(*sp), len(shape)), "new_sizes": list(ns)}
                    try:
                        with jax.set_mesh(mesh):
                            r = jax.lax.reshape(x, ns)
                        rec["result"] = spec_json(jax.typeof(r).sharding.spec, len(ns))
                        rec["typeof"] = str(jax.typeof(r))
                    except Exception as e:  # noqa: BLE001 - JAX's refusals are the data
                        rec["error"] = type(e).__name__ + ": " + str(e).splitlines()[0]
                    c.add(name, **rec)
        for shape in [(8, 4), (2, 2, 2)]:
            x = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, jax.P()))
            for ns in new_shapes(shape):
                with jax.set_mesh(mesh):
                    r = jax.lax.reshape(x, ns)
                c.add(f"{mname}:{shape}:[]->{ns}", mesh=list(sizes), names=list(names), shape=list(shape), spec=[],
                      new_sizes=list(ns), result=spec_json(jax.typeof(r).sharding.spec, len(ns)), typeof=str(jax.typeof(r)))
    c.write("jax_reshape.json", "tools/jax_reference/gen_reshape.py")


if __name__ == "__main__":
    main()
