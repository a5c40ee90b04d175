// tessera's non-template runtime compiled once, for the examples built with
// TESSERA_SEPARATE_COMPILATION (examples/CMakeLists.txt; docs/headers.md).
#include <tessera/src.hpp>
