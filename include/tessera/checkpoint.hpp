#pragma once
// Checkpoints (orbax.checkpoint for tessera): save and restore arrays and parameter trees in
// HDF5 files, across processes with parallel HDF5 (MPI-IO), into any sharding, atomically, and
// in the background with checkpoint_manager. Not included by tessera/tessera.hpp, since it brings
// <hdf5.h> (and, with a parallel HDF5, <mpi.h>): link tessera::hdf5
// (find_package(tessera COMPONENTS hdf5)). docs/checkpoints.md.

#include "tessera/checkpoint/hdf5_file.hpp"
#include "tessera/checkpoint/load.hpp"
#include "tessera/checkpoint/manager.hpp"
#include "tessera/checkpoint/save.hpp"
#include "tessera/checkpoint/tree_paths.hpp"
