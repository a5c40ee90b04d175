#pragma once
// xtensor's configuration header, whichever header layout the xtensor found has,
// and the check that its version is one tessera supports (0.24 to 0.27).
//
// xtensor 0.26 moved its headers into folders: <xtensor/xtensor.hpp> became
// <xtensor/containers/xtensor.hpp>, <xtensor/xexpression.hpp>
// <xtensor/core/xexpression.hpp>, and so on; 0.26 and 0.27 keep no forwarding
// headers at the old paths. tessera's headers include xtensor only through the
// headers of this folder (tessera/detail/xtensor/<old name>), each of which picks
// the path that exists, the new layout first: a program that sees an xtensor 0.27
// ahead of a system's 0.24 (-isystem before /usr/include) gets 0.27's headers,
// all of them. docs/dependencies.md says which versions were built and run.

#if __has_include(<xtensor/core/xtensor_config.hpp>)
#include <xtensor/core/xtensor_config.hpp>
#elif __has_include(<xtensor/xtensor_config.hpp>)
#include <xtensor/xtensor_config.hpp>
#else
#error "tessera: needs xtensor 0.24 to 0.27: neither <xtensor/xtensor_config.hpp> (0.24-0.25) nor <xtensor/core/xtensor_config.hpp> (0.26-0.27) was found (is xtensor installed, and on the include path?)"
// Not found: stop here, before tessera's headers add errors of their own. The path is
// spelled with "./" because g++ (12 at least; GCC bug 80753) silently skips an #include of a
// path that __has_include has already looked for and not found.
#include <xtensor/./xtensor_config.hpp>
#endif

#if !defined(XTENSOR_VERSION_MAJOR) || !defined(XTENSOR_VERSION_MINOR)
#error "tessera: needs xtensor 0.24 to 0.27: xtensor's configuration header defines no XTENSOR_VERSION_MAJOR/XTENSOR_VERSION_MINOR"
#elif XTENSOR_VERSION_MAJOR == 0 && XTENSOR_VERSION_MINOR < 24
#error "tessera: needs xtensor 0.24 to 0.27: the xtensor found is older than 0.24"
#endif
// Newer releases than 0.27 are not refused: they have not been tried
// (tools/check_dependency_versions.sh tries the newest release it has).
