#pragma once
// <xtensor/xarray.hpp> (xtensor 0.24-0.25) or <xtensor/containers/xarray.hpp> (0.26-0.27): xt::xarray.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/containers/xarray.hpp>)
#include <xtensor/containers/xarray.hpp>
#elif __has_include(<xtensor/xarray.hpp>)
#include <xtensor/xarray.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xarray.hpp> (0.24-0.25) nor <xtensor/containers/xarray.hpp> (0.26-0.27) was found"
#include <xtensor/./xarray.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
