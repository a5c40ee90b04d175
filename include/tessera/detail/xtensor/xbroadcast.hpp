#pragma once
// <xtensor/xbroadcast.hpp> (xtensor 0.24-0.25) or <xtensor/views/xbroadcast.hpp> (0.26-0.27): xt::xbroadcast.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/views/xbroadcast.hpp>)
#include <xtensor/views/xbroadcast.hpp>
#elif __has_include(<xtensor/xbroadcast.hpp>)
#include <xtensor/xbroadcast.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xbroadcast.hpp> (0.24-0.25) nor <xtensor/views/xbroadcast.hpp> (0.26-0.27) was found"
#include <xtensor/./xbroadcast.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
