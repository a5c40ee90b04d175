#pragma once
// <xtensor/xadapt.hpp> (xtensor 0.24-0.25) or <xtensor/containers/xadapt.hpp> (0.26-0.27): xt::adapt, xt::no_ownership.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/containers/xadapt.hpp>)
#include <xtensor/containers/xadapt.hpp>
#elif __has_include(<xtensor/xadapt.hpp>)
#include <xtensor/xadapt.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xadapt.hpp> (0.24-0.25) nor <xtensor/containers/xadapt.hpp> (0.26-0.27) was found"
#include <xtensor/./xadapt.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
