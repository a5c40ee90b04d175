#pragma once
// <xtensor/xtensor.hpp> (xtensor 0.24-0.25) or <xtensor/containers/xtensor.hpp> (0.26-0.27): xt::xtensor, xt::xtensor_adaptor.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/containers/xtensor.hpp>)
#include <xtensor/containers/xtensor.hpp>
#elif __has_include(<xtensor/xtensor.hpp>)
#include <xtensor/xtensor.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xtensor.hpp> (0.24-0.25) nor <xtensor/containers/xtensor.hpp> (0.26-0.27) was found"
#include <xtensor/./xtensor.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
