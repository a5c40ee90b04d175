#!/usr/bin/env bash
# Checkpoint speed against dd (conv=fsync), h5py and Orbax on one file system (issue 34).
#   bench/run_checkpoint.sh BENCH_BINARY [DIR=/tmp/tessera_ckpt_bench] [MIB=1024] [REPEATS=5]
# BENCH_BINARY: bench/checkpoint_bench.cpp built with a parallel HDF5, e.g.
#   g++ -std=c++20 -O2 -march=native -DNDEBUG -Iinclude -I/usr/include/hdf5/openmpi \
#       $(mpicxx --showme:compile) bench/checkpoint_bench.cpp -o checkpoint_bench \
#       -L/usr/lib/x86_64-linux-gnu/hdf5/openmpi/lib -lhdf5 $(mpicxx --showme:link) -lopenblas
# It runs dd itself, alternated with tessera (the ratios of the pairs: on a shared machine a
# separate dd run measures another load). Orbax runs where build/jax-venv has orbax-checkpoint
# (build/jax-venv/bin/pip install orbax-checkpoint).
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"
BIN=${1:?usage: run_checkpoint.sh BENCH_BINARY [DIR] [MIB] [REPEATS]}
DIR=${2:-/tmp/tessera_ckpt_bench}
MIB=${3:-1024}
REPEATS=${4:-5}
mkdir -p "$DIR"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# Processes that wait in MPI yield the cores (as ctest runs the MPI tests): on a machine with fewer
# cores than device threads, spinning waits would slow every step of the other process.
export OMPI_MCA_mpi_yield_when_idle=1
echo "== tessera, 1 process x 8 devices"
"$BIN" "$DIR" "$MIB" "$REPEATS"
# Seed 004's loop saving every step needs a core that the loop's device threads leave free: the
# writing thread and the kernel's I/O run there (on a 2-core VM the 8 device threads take both,
# and any write slows the loop, tessera's or not: bench/RESULTS.md). On a machine with more cores
# than devices the line above shows it; here a loop on 1 device (one core free) shows it.
echo "== tessera, seed 004's loop on 1 device (a core left free for the writing thread)"
LOOP_DEVICES=1 "$BIN" "$DIR" 0 "$REPEATS"
echo "== tessera, 2 processes x 4 devices (parallel HDF5, one file)"
mpirun --oversubscribe --bind-to none -np 2 "$BIN" "$DIR" "$MIB" "$REPEATS"
echo "== h5py: the gathered array written into one dataset (flush + fsync), then read"
PY=/usr/bin/python3
"$PY" - "$DIR" "$MIB" <<'PYEOF'
import os, sys, time, numpy as np, h5py
d, mib = sys.argv[1], int(sys.argv[2])
# Random values, as a trained model's parameters are (the same as Orbax's below).
a = np.random.default_rng(0).standard_normal((mib * 256, 1024), dtype=np.float32)
best_w = best_r = 1e9
for _ in range(3):
    t = time.perf_counter()
    with h5py.File(os.path.join(d, "h5py.h5"), "w") as f:
        f["x"] = a
    fd = os.open(os.path.join(d, "h5py.h5"), os.O_RDONLY); os.fsync(fd); os.close(fd)
    best_w = min(best_w, time.perf_counter() - t)
    t = time.perf_counter()
    with h5py.File(os.path.join(d, "h5py.h5")) as f:
        b = f["x"][...]
    best_r = min(best_r, time.perf_counter() - t)
os.remove(os.path.join(d, "h5py.h5"))
print(f"h5py {mib} MiB: write {best_w:.3f} s ({a.nbytes / best_w / 1e6:.0f} MB/s), read {best_r:.3f} s ({a.nbytes / best_r / 1e6:.0f} MB/s)")
PYEOF
VENV=$(dirname "$0")/../build/jax-venv/bin/python
if [ -x "$VENV" ] && "$VENV" -c "import orbax.checkpoint" 2>/dev/null; then
  echo "== Orbax: the same array sharded over 8 CPU devices, P('x', None)"
  XLA_FLAGS=--xla_force_host_platform_device_count=8 "$VENV" - "$DIR" "$MIB" <<'PYEOF'
import os, sys, time, shutil, numpy as np, jax, jax.numpy as jnp
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P
d, mib = sys.argv[1], int(sys.argv[2])
mesh = jax.make_mesh((8,), ("x",))
s = NamedSharding(mesh, P("x", None))
# Random values, as a trained model's parameters are: Orbax compresses what it writes (zstd in
# its zarr3 arrays), so an array of ones (1 GiB) goes to disk as 84 KiB and measures no writing.
x = jax.device_put(np.random.default_rng(0).standard_normal((mib * 256, 1024), dtype=np.float32), s)
ckptr = ocp.StandardCheckpointer()
def fsync_tree(p):  # what tessera's save does before it returns: the bytes on disk
    for root, dirs, files in os.walk(p):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY); os.fsync(fd); os.close(fd)
        fd = os.open(root, os.O_RDONLY); os.fsync(fd); os.close(fd)
best_w = best_ws = best_r = 1e9
for i in range(3):
    for durable in (False, True):
        p = os.path.join(d, f"orbax_{i}")
        shutil.rmtree(p, ignore_errors=True)
        t = time.perf_counter(); ckptr.save(p, {"x": x}); ckptr.wait_until_finished()
        if durable:
            fsync_tree(p); best_ws = min(best_ws, time.perf_counter() - t)
        else:
            best_w = min(best_w, time.perf_counter() - t)
        if i == 0 and not durable:
            print("orbax checkpoint on disk:", sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(p) for f in fs) // 2**20, "MiB")
        t = time.perf_counter(); y = ckptr.restore(p, {"x": jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)}); jax.block_until_ready(y); best_r = min(best_r, time.perf_counter() - t)
        shutil.rmtree(p, ignore_errors=True)
print(f"orbax {ocp.__version__ if hasattr(ocp, '__version__') else ''} {mib} MiB: save {best_w:.3f} s ({x.nbytes / best_w / 1e6:.0f} MB/s), "
      f"save then fsync of its files {best_ws:.3f} s ({x.nbytes / best_ws / 1e6:.0f} MB/s), restore {best_r:.3f} s ({x.nbytes / best_r / 1e6:.0f} MB/s)")
PYEOF
else
  echo "== Orbax: not installed in build/jax-venv (build/jax-venv/bin/pip install orbax-checkpoint)"
fi
