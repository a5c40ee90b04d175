#pragma once
// <xtensor/xgenerator.hpp> (xtensor 0.24-0.25) or <xtensor/generators/xgenerator.hpp> (0.26-0.27): xt::xgenerator.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/generators/xgenerator.hpp>)
#include <xtensor/generators/xgenerator.hpp>
#elif __has_include(<xtensor/xgenerator.hpp>)
#include <xtensor/xgenerator.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xgenerator.hpp> (0.24-0.25) nor <xtensor/generators/xgenerator.hpp> (0.26-0.27) was found"
#include <xtensor/./xgenerator.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
