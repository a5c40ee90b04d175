#pragma once
// tessera::random, jax.random for sharded arrays: threefry keys (key, split, fold_in) and the
// samplers bits, uniform, normal, truncated_normal, bernoulli and randint, bit-identical to JAX
// (jax_threefry_partitionable, its default) under every sharding. Included by tessera.hpp.

#include "tessera/random/block_fill.hpp"
#include "tessera/random/distributions.hpp"
#include "tessera/random/erf_inv.hpp"
#include "tessera/random/key.hpp"
#include "tessera/random/samplers.hpp"
#include "tessera/random/threefry.hpp"
