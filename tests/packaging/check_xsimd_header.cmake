# cmake -P script (ctest: packaging.xsimd_one_header): xsimd stays behind one header,
# include/tessera/runtime/simd.hpp, so that keeping to the part of xsimd's API that is
# the same from 8.x to 13.x (batch<T, Arch>, load_unaligned, store_unaligned, select,
# the math functions) is a matter of one file's includes. Headers that need batches
# include tessera/runtime/simd.hpp, never <xsimd/...> themselves.
#
# Inputs (-D): TESSERA_SOURCE_DIR.
cmake_minimum_required(VERSION 3.21)

set(allowed "tessera/runtime/simd.hpp")
file(GLOB_RECURSE headers RELATIVE "${TESSERA_SOURCE_DIR}/include"
  "${TESSERA_SOURCE_DIR}/include/*.hpp" "${TESSERA_SOURCE_DIR}/include/*.h")
set(offenders "")
set(found_allowed FALSE)
foreach(h IN LISTS headers)
  file(STRINGS "${TESSERA_SOURCE_DIR}/include/${h}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]xsimd/")
  if(NOT lines)
    continue()
  endif()
  if(h STREQUAL allowed)
    set(found_allowed TRUE)
  else()
    string(APPEND offenders "  include/${h}: ${lines}\n")
  endif()
endforeach()
if(offenders)
  message(FATAL_ERROR "xsimd is included outside include/${allowed}:\n${offenders}"
    "Include \"tessera/runtime/simd.hpp\" instead.")
endif()
if(NOT found_allowed)
  message(STATUS "note: no header includes xsimd (include/${allowed} does not either)")
endif()
message(STATUS "OK: xsimd is included only by include/${allowed}")
