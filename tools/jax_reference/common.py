"""Shared by the golden generators: JAX on 8 CPU devices, and one way to write a golden file.

Every generator writes tests/golden/<name>.json as {"generator", "jax_version", "devices",
"cases": {name: case}}; tests/jax/golden.hpp reads "cases" and fails for a case no C++ check
reads. TESSERA_GOLDEN_OUT redirects the output (tools/jax_reference/regenerate.sh uses it to diff).
"""
import json
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import jax  # noqa: E402

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
