#pragma once
// Expressions plus the parallel layer: jit, shard_map and the collectives called inside it
// (psum, all_gather, psum_scatter, all_to_all, ppermute...); no random, pytrees or grad
// (docs/headers.md).

#include "tessera/expr.hpp"
#include "tessera/parallel/across_processes.hpp"
#include "tessera/parallel/async_collectives.hpp"
#include "tessera/parallel/collective_matmul.hpp"
#include "tessera/parallel/block_einsum.hpp"
#include "tessera/parallel/block_functions.hpp"
#include "tessera/parallel/block_join_cut.hpp"
#include "tessera/parallel/block_shape_ops.hpp"
#include "tessera/parallel/block_math.hpp"
#include "tessera/parallel/block_scan.hpp"
#include "tessera/parallel/block_special.hpp"
#include "tessera/parallel/block_indexing.hpp"
#include "tessera/parallel/collectives.hpp"
#include "tessera/parallel/jit.hpp"
#include "tessera/parallel/local_block.hpp"
#include "tessera/parallel/shard_map.hpp"
#include "tessera/parallel/spmd_context.hpp"
#include "tessera/parallel/typeof_local.hpp"
#include "tessera/parallel/vma_of.hpp"
