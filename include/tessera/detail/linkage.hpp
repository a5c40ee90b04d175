#pragma once
// Where tessera's non-template runtime code is compiled. By default (header-only) in every
// translation unit that uses it, as inline functions. With TESSERA_SEPARATE_COMPILATION
// defined for the whole program, once: in the one translation unit that includes
// <tessera/src.hpp>, as Boost.Asio's separate compilation does; the other files then skip its
// code generation (docs/headers.md).

#if defined(TESSERA_SEPARATE_COMPILATION)
/// The linkage of a non-template runtime function: external, defined in <tessera/src.hpp>'s file.
#define TESSERA_LINKAGE
#if defined(TESSERA_SOURCE)
#define TESSERA_DEFINITIONS 1
#else
#define TESSERA_DEFINITIONS 0
#endif
#else
/// The linkage of a non-template runtime function: inline, defined in every file that uses it.
#define TESSERA_LINKAGE inline
/// Whether this file compiles the non-template runtime functions (always, header-only).
#define TESSERA_DEFINITIONS 1
#endif
