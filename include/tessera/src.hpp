// tessera's non-template runtime functions, compiled once: include this in exactly one source
// file of a program that defines TESSERA_SEPARATE_COMPILATION in every file (CMake:
// target_compile_definitions(app PRIVATE TESSERA_SEPARATE_COMPILATION)), before any other
// tessera header of that file. The other files then declare those functions and skip their
// code generation (docs/headers.md; Boost.Asio's boost/asio/impl/src.hpp does the same).
#pragma once

#if !defined(TESSERA_SEPARATE_COMPILATION)
#error "tessera/src.hpp: define TESSERA_SEPARATE_COMPILATION for the whole program (every file), then include this header in one of them"
#endif
#if defined(TESSERA_DEFINITIONS)
#error "tessera/src.hpp must come before any other tessera header in its file: the ones before it were read without the definitions"
#endif

#define TESSERA_SOURCE
#include "tessera/tessera.hpp"
