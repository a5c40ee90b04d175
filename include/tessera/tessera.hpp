#pragma once
// The one umbrella include: everything a user of tessera needs. The module headers it is made
// of (tessera/array.hpp, expr.hpp, parallel.hpp, autodiff.hpp, random.hpp) compile faster for
// a program that needs less (docs/headers.md).

#include "tessera/array.hpp"
#include "tessera/expr.hpp"
#include "tessera/parallel.hpp"
#include "tessera/autodiff.hpp"
#include "tessera/random.hpp"
#include "tessera/optim.hpp"
