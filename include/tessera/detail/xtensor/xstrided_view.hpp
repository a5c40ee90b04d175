#pragma once
// <xtensor/xstrided_view.hpp> (xtensor 0.24-0.25) or <xtensor/views/xstrided_view.hpp> (0.26-0.27): xt::xstrided_view.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/views/xstrided_view.hpp>)
#include <xtensor/views/xstrided_view.hpp>
#elif __has_include(<xtensor/xstrided_view.hpp>)
#include <xtensor/xstrided_view.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xstrided_view.hpp> (0.24-0.25) nor <xtensor/views/xstrided_view.hpp> (0.26-0.27) was found"
#include <xtensor/./xstrided_view.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
