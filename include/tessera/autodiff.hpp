#pragma once
// Everything grad needs: the parallel layer, pytrees and jax.grad / value_and_grad through
// expressions and shard_map (docs/headers.md).

#include "tessera/parallel.hpp"
#include "tessera/tree/tree_util.hpp"
#include "tessera/autodiff/grad.hpp"
#include "tessera/autodiff/reduction_rules.hpp"
#include "tessera/autodiff/local_special.hpp"
#include "tessera/autodiff/special_rules.hpp"
#include "tessera/autodiff/shape_rules.hpp"
#include "tessera/autodiff/join_cut_rules.hpp"
#include "tessera/autodiff/indexing_rules.hpp"
#include "tessera/autodiff/local_shape_ops.hpp"
#include "tessera/autodiff/scan_rules.hpp"
#include "tessera/autodiff/local_einsum.hpp"
#include "tessera/autodiff/local_indexing.hpp"
#include "tessera/autodiff/local_join_cut.hpp"
