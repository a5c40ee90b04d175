#pragma once
// <xtensor/xscalar.hpp> (xtensor 0.24-0.25) or <xtensor/containers/xscalar.hpp> (0.26-0.27): xt::xscalar.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/containers/xscalar.hpp>)
#include <xtensor/containers/xscalar.hpp>
#elif __has_include(<xtensor/xscalar.hpp>)
#include <xtensor/xscalar.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xscalar.hpp> (0.24-0.25) nor <xtensor/containers/xscalar.hpp> (0.26-0.27) was found"
#include <xtensor/./xscalar.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
