#pragma once
// <xtensor/xnoalias.hpp> (xtensor 0.24-0.25) or <xtensor/core/xnoalias.hpp> (0.26-0.27): xt::noalias.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/core/xnoalias.hpp>)
#include <xtensor/core/xnoalias.hpp>
#elif __has_include(<xtensor/xnoalias.hpp>)
#include <xtensor/xnoalias.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xnoalias.hpp> (0.24-0.25) nor <xtensor/core/xnoalias.hpp> (0.26-0.27) was found"
#include <xtensor/./xnoalias.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
