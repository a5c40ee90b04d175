#pragma once
// <xtensor/xbuffer_adaptor.hpp> (xtensor 0.24-0.25) or <xtensor/containers/xbuffer_adaptor.hpp> (0.26-0.27): xt::xbuffer_adaptor.
// See tessera/detail/xtensor/config.hpp.

#include "tessera/detail/xtensor/config.hpp"

#if __has_include(<xtensor/containers/xbuffer_adaptor.hpp>)
#include <xtensor/containers/xbuffer_adaptor.hpp>
#elif __has_include(<xtensor/xbuffer_adaptor.hpp>)
#include <xtensor/xbuffer_adaptor.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xbuffer_adaptor.hpp> (0.24-0.25) nor <xtensor/containers/xbuffer_adaptor.hpp> (0.26-0.27) was found"
#include <xtensor/./xbuffer_adaptor.hpp>  // stops the compilation (see config.hpp for the "./")
#endif
