#pragma once
// <xtensor/xdynamic_view.hpp> (xtensor 0.24-0.25) or <xtensor/views/xdynamic_view.hpp> (0.26-0.27): xt::xdynamic_view.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/views/xdynamic_view.hpp>)
#include <xtensor/views/xdynamic_view.hpp>
#elif __has_include(<xtensor/xdynamic_view.hpp>)
#include <xtensor/xdynamic_view.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xdynamic_view.hpp> (0.24-0.25) nor <xtensor/views/xdynamic_view.hpp> (0.26-0.27) was found"
#include <xtensor/./xdynamic_view.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
