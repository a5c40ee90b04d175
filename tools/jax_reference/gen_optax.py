"""Writes tests/golden/jax_optax.json: optax's optimizers run for several steps on a small fixed
params tree, for tests/jax/optax_golden_test.cpp.

Run with the JAX venv and optax (tools/jax_reference/setup_venv.sh, then
`build/jax-venv/bin/pip install optax`):
    build/jax-venv/bin/python tools/jax_reference/gen_optax.py

The params are a tuple (w: float32[4, 8], b: float32[8], v: float32[5]) (jax.tree.leaves order);
the gradients of step t are fixed too (GRAD_SCALES[t] times a pattern with exact zeros, so that
clip_by_global_norm clips at some steps and not at others, and lion's sign meets zeros). Each step
runs, under one jax.jit as a training step does,
    updates, state = tx.update(grads, state, params); params = optax.apply_updates(params, updates)

Cases:
  "params", "grads": the inputs (leaves flattened, row-major; grads one entry per step).
  "opt/<name>": for the optimizer OPTIMIZERS[name], per step: "updates" and "params" (leaves) and
      the state's fields ("count", "mu", "nu", "trace", "schedule_count", whichever it has, from
      ScaleByAdamState, ScaleByLionState, TraceState and ScaleByScheduleState in chain order).
  "schedule/<name>": a schedule's values at counts 0 .. 11 (float32).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices, before anything else touches jax)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

SHAPES = [(4, 8), (8,), (5,)]
STEPS = 5
GRAD_SCALES = [0.1, 3.0, 0.02, 1.0, 0.15]


def pattern(shape, i, scale):
    n = int(np.prod(shape))
    x = np.sin(np.arange(n, dtype=np.float64) * (0.7 + 0.3 * i) + i) * scale
    x[::7] = 0.0  # exact zeros
    return x.astype(np.float32).reshape(shape)


PARAMS = tuple(jnp.asarray(pattern(s, k, 1.0)) for k, s in enumerate(SHAPES))
GRADS = [tuple(jnp.asarray(pattern(s, 10 + 3 * t + k, GRAD_SCALES[t])) for k, s in enumerate(SHAPES))
         for t in range(STEPS)]

SCHEDULES = {
    "constant": optax.constant_schedule(0.25),
    "cosine": optax.cosine_decay_schedule(0.1, 7),
    "cosine_alpha_exp": optax.cosine_decay_schedule(0.1, 9, alpha=0.2, exponent=2.0),
    "warmup_cosine": optax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 10, end_value=1e-3),
    "warmup_cosine_from": optax.warmup_cosine_decay_schedule(1e-3, 0.5, 2, 8),
    "linear": optax.linear_schedule(0.5, 0.1, 6, 2),
}

OPTIMIZERS = {
    "sgd": optax.sgd(0.1),
    "sgd_momentum": optax.sgd(0.1, momentum=0.9),
    "sgd_nesterov": optax.sgd(0.1, momentum=0.9, nesterov=True),
    "adam": optax.adam(1e-2),
    "adam_eps_root": optax.adam(1e-2, b1=0.8, b2=0.99, eps=1e-6, eps_root=1e-8),
    "adam_cosine": optax.adam(optax.cosine_decay_schedule(1e-2, 4, alpha=0.1)),
    "adamw": optax.adamw(1e-2, weight_decay=0.1),
    "adamw_mask": optax.adamw(1e-2, weight_decay=0.1, mask=(True, False, True)),
    "lion": optax.lion(1e-3, weight_decay=0.01),
    "clip": optax.clip_by_global_norm(1.0),
    "clip_adamw_warmup_cosine": optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 5, end_value=1e-3), weight_decay=1e-2)),
}


def leaves(tree):
    return [common.flat(x) for x in jax.tree.leaves(tree)]


def state_fields(state):
    """The fields of the states in a (nested) chain state, in order."""
    out = {}

    def walk(s):
        if isinstance(s, optax.ScaleByAdamState):
            out.update(count=int(s.count), mu=leaves(s.mu), nu=leaves(s.nu))
        elif isinstance(s, optax.ScaleByLionState):
            out.update(count=int(s.count), mu=leaves(s.mu))
        elif isinstance(s, optax.TraceState):
            out.update(trace=leaves(s.trace))
        elif isinstance(s, optax.ScaleByScheduleState):
            out.update(schedule_count=int(s.count))
        elif isinstance(s, tuple):
            for c in s:
                walk(c)

    walk(state)
    return out


def main():
    cases = common.Cases()
    cases.add("params", shapes=[list(s) for s in SHAPES], leaves=leaves(PARAMS))
    cases.add("grads", steps=[leaves(g) for g in GRADS])
    for name, tx in OPTIMIZERS.items():
        @jax.jit
        def step(grads, state, params, tx=tx):
            updates, state = tx.update(grads, state, params)
            return updates, state, optax.apply_updates(params, updates)

        params, state, steps = PARAMS, tx.init(PARAMS), []
        for t in range(STEPS):
            updates, state, params = step(GRADS[t], state, params)
            steps.append(dict(updates=leaves(updates), params=leaves(params), **state_fields(state)))
        cases.add(f"opt/{name}", steps=steps)
    for name, s in SCHEDULES.items():
        counts = jnp.arange(12, dtype=jnp.int32)
        cases.add(f"schedule/{name}", values=common.flat(jax.jit(jax.vmap(s))(counts)))
    cases.write("jax_optax.json", "tools/jax_reference/gen_optax.py")


if __name__ == "__main__":
    main()
