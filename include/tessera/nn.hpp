#pragma once
// tessera::nn, flax.linen and jax.nn.initializers for sharded arrays: initializers (and the
// layers, partitioning and optimizers of issue 32 as they land).

#include "tessera/nn/initializers.hpp"
