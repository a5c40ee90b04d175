#pragma once
// The module header of tessera's optimizers (optax's names, docs/optimizers.md): gradient
// transformations over trees of sharded arrays, learning-rate schedules, and Flax's TrainState.

#include "tessera/array.hpp"
#include "tessera/expr.hpp"
#include "tessera/optim/transform.hpp"
#include "tessera/optim/schedules.hpp"
#include "tessera/optim/sgd.hpp"
#include "tessera/optim/adam.hpp"
#include "tessera/optim/lion.hpp"
#include "tessera/optim/clip.hpp"
#include "tessera/optim/train_state.hpp"
