#pragma once
// tessera::nn, flax.linen and jax.nn.initializers for sharded arrays: initializers (and the
// layers, partitioning and optimizers of issue 32 as they land).

#include "tessera/nn/initializers.hpp"
#include "tessera/nn/partitioning.hpp"
#include "tessera/nn/scope.hpp"
#include "tessera/nn/dense.hpp"
#include "tessera/nn/embed.hpp"
#include "tessera/nn/norm.hpp"
#include "tessera/nn/dropout.hpp"
#include "tessera/nn/attention.hpp"
#include "tessera/nn/sequential.hpp"
