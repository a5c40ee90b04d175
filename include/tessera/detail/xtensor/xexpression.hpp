#pragma once
// <xtensor/xexpression.hpp> (xtensor 0.24-0.25) or <xtensor/core/xexpression.hpp> (0.26-0.27): xt::is_xexpression, xt::has_data_interface.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/core/xexpression.hpp>)
#include <xtensor/core/xexpression.hpp>
#elif __has_include(<xtensor/xexpression.hpp>)
#include <xtensor/xexpression.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xexpression.hpp> (0.24-0.25) nor <xtensor/core/xexpression.hpp> (0.26-0.27) was found"
#include <xtensor/./xexpression.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
