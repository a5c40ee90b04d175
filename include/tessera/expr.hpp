#pragma once
// The array layer and global-view computation: expressions, reductions, matmul and explain
// (everything but jit, shard_map, random, pytrees and grad; docs/headers.md).

#include "tessera/array.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/gemm.hpp"
#include "tessera/runtime/mesh_group.hpp"
#include "tessera/runtime/simd.hpp"
#include "tessera/runtime/team.hpp"
#include "tessera/array/sum_partials.hpp"
#include "tessera/expr/contraction.hpp"
#include "tessera/expr/cursor.hpp"
#include "tessera/expr/evaluate.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/functions.hpp"
#include "tessera/expr/matmul.hpp"
#include "tessera/expr/ops.hpp"
#include "tessera/expr/partial_array.hpp"
#include "tessera/expr/promote.hpp"
#include "tessera/expr/reduction.hpp"
#include "tessera/expr/typeof_expression.hpp"
#include "tessera/debug/explain.hpp"
