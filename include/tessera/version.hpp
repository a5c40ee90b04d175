#pragma once
// The library version; CMakeLists.txt, conan/ and ports/ carry the same number.

/// Major version.
#define TESSERA_VERSION_MAJOR 0
/// Minor version.
#define TESSERA_VERSION_MINOR 1
/// Patch version.
#define TESSERA_VERSION_PATCH 0
/// "major.minor.patch"
#define TESSERA_VERSION_STRING "0.1.0"
