# cmake -P script driving one compile-fail test.
#
# Inputs (-D):
#   COMPILER           C++ compiler
#   COMPILER_ID        CMAKE_CXX_COMPILER_ID (GNU, Clang, ...)
#   CXX_FLAGS          extra flags, '|'-separated (CMAKE_CXX_FLAGS)
#   OWN_INCLUDE_DIR    tessera's include/ dir (passed with -I)
#   INCLUDES           transitive include dirs, '|'-separated (-isystem)
#   DEFINES            transitive compile definitions, '|'-separated
#   IMPLICIT_INCLUDES  compiler's implicit include dirs, '|'-separated (skipped)
#   SOURCE             the test source; contains `// EXPECT: <regex>` line(s)
#   MODE               "fail"  -> must NOT compile; output must match each EXPECT
#                      "fixed" -> compiled with -DTESSERA_FIXED; must compile
#                      "pch"   -> precompiles PCH_HEADER (SOURCE unused) with the same command
#                                 line the tests use, for the ctest fixture compile_fail.pch
#   PCH_HEADER         optional: a header that includes <tessera/tessera.hpp>; a test whose
#                      source includes <tessera/tessera.hpp> is compiled with `-include` of it,
#                      so the compiler reads the precompiled tessera (g++: PCH_HEADER.gch,
#                      clang: PCH_HEADER.pch) instead of parsing it again (3.7 s of 4 per test)
cmake_minimum_required(VERSION 3.21)

foreach(var COMPILER MODE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "CompileFail.cmake: ${var} not set")
  endif()
endforeach()

macro(_split var)
  if(DEFINED ${var})
    string(REPLACE "|" ";" ${var} "${${var}}")
  endif()
endmacro()
_split(CXX_FLAGS)
_split(INCLUDES)
_split(DEFINES)
_split(IMPLICIT_INCLUDES)

# --- expectations ----------------------------------------------------------
if(NOT MODE STREQUAL "pch" AND (NOT DEFINED SOURCE OR SOURCE STREQUAL ""))
  message(FATAL_ERROR "CompileFail.cmake: SOURCE not set")
endif()
if(MODE STREQUAL "pch")
  set(_expect_lines)
else()
  file(STRINGS "${SOURCE}" _expect_lines REGEX "^[ \t]*//[ \t]*EXPECT:")
endif()
set(_expects)
foreach(line IN LISTS _expect_lines)
  string(REGEX REPLACE "^[ \t]*//[ \t]*EXPECT:[ \t]*" "" re "${line}")
  string(REGEX REPLACE "[ \t\r]+$" "" re "${re}")
  if(NOT re STREQUAL "")
    list(APPEND _expects "${re}")
  endif()
endforeach()
if(MODE STREQUAL "fail" AND NOT _expects)
  message(FATAL_ERROR "${SOURCE}: no `// EXPECT: <regex>` line found")
endif()

# --- command line ----------------------------------------------------------
set(cmd "${COMPILER}" -std=c++20 -pthread)
if(COMPILER_ID MATCHES "GNU|Clang")
  list(APPEND cmd -fdiagnostics-color=never)
endif()
foreach(f IN LISTS CXX_FLAGS)
  if(NOT f STREQUAL "")
    list(APPEND cmd "${f}")
  endif()
endforeach()
if(OWN_INCLUDE_DIR)
  list(APPEND cmd "-I${OWN_INCLUDE_DIR}")
endif()
list(REMOVE_DUPLICATES INCLUDES)
foreach(dir IN LISTS INCLUDES)
  if(dir STREQUAL "" OR dir STREQUAL OWN_INCLUDE_DIR)
    continue()
  endif()
  # Never pass the compiler's own system dirs (-I/usr/include breaks
  # libstdc++'s #include_next).
  list(FIND IMPLICIT_INCLUDES "${dir}" _idx)
  if(_idx GREATER -1)
    continue()
  endif()
  list(APPEND cmd -isystem "${dir}")
endforeach()
foreach(def IN LISTS DEFINES)
  if(NOT def STREQUAL "")
    list(APPEND cmd "-D${def}")
  endif()
endforeach()
if(COMPILER_ID MATCHES "Clang")
  set(_pch_file "${PCH_HEADER}.pch")
else()
  set(_pch_file "${PCH_HEADER}.gch")
endif()
if(MODE STREQUAL "pch")
  if(NOT PCH_HEADER)
    message(FATAL_ERROR "CompileFail.cmake: MODE pch needs PCH_HEADER")
  endif()
  file(REMOVE "${_pch_file}")
  list(APPEND cmd -x c++-header "${PCH_HEADER}" -o "${_pch_file}")
  set(ENV{LC_ALL} C)
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    list(JOIN cmd " " cmd_str)
    message(FATAL_ERROR "compile_fail.pch: precompiling ${PCH_HEADER} failed (rc=${rc}):\n${out}\nCommand: ${cmd_str}")
  endif()
  message(STATUS "OK: ${_pch_file}")
  return()
endif()
list(APPEND cmd -fsyntax-only)
if(PCH_HEADER AND EXISTS "${_pch_file}")
  file(STRINGS "${SOURCE}" _umbrella REGEX "^[ \t]*#[ \t]*include[ \t]*<tessera/tessera\\.hpp>")
  if(_umbrella)
    list(APPEND cmd -include "${PCH_HEADER}")
    if(COMPILER_ID STREQUAL "GNU")
      list(APPEND cmd -Winvalid-pch)  # g++ would otherwise parse the header silently instead
    endif()
    set(_with_pch " (tessera precompiled)")
  endif()
endif()
if(MODE STREQUAL "fixed")
  list(APPEND cmd -DTESSERA_FIXED)
endif()
list(APPEND cmd "${SOURCE}")

# Plain ASCII diagnostics (no UTF-8 quotes) so EXPECT regexes stay simple.
set(ENV{LC_ALL} C)
set(ENV{LANG} C)
execute_process(COMMAND ${cmd}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)

list(JOIN cmd " " cmd_str)

if(MODE STREQUAL "fixed")
  if(NOT rc EQUAL 0)
    message("---- compiler output ----\n${out}\n-------------------------")
    message(FATAL_ERROR
      "compile_fail ${SOURCE} with -DTESSERA_FIXED did NOT compile (rc=${rc}).\n"
      "Command: ${cmd_str}")
  endif()
  message(STATUS "OK: ${SOURCE} compiles with -DTESSERA_FIXED${_with_pch}")
  return()
endif()

if(rc EQUAL 0)
  message("---- compiler output ----\n${out}\n-------------------------")
  message(FATAL_ERROR
    "compile_fail ${SOURCE} COMPILED but was expected to fail.\nCommand: ${cmd_str}")
endif()

set(_missing)
foreach(re IN LISTS _expects)
  if(NOT out MATCHES "${re}")
    list(APPEND _missing "${re}")
  endif()
endforeach()
if(_missing)
  message("---- compiler output ----\n${out}\n-------------------------")
  list(JOIN _missing "\n  " _missing_str)
  message(FATAL_ERROR
    "compile_fail ${SOURCE} failed to compile as expected, but the diagnostics "
    "do not match these EXPECT regex(es):\n  ${_missing_str}\nCommand: ${cmd_str}")
endif()
# Issue 14: a mistake is reported in at most 60 lines, so that our message is not lost in notes.
string(REGEX MATCHALL "\n" _newlines "${out}")
list(LENGTH _newlines _lines)
if(NOT DEFINED MAX_LINES)
  set(MAX_LINES 60)
endif()
if(_lines GREATER MAX_LINES)
  message("---- compiler output ----\n${out}\n-------------------------")
  message(FATAL_ERROR
    "compile_fail ${SOURCE} fails as expected but prints ${_lines} lines of diagnostics, more than ${MAX_LINES}; "
    "stop the errors that follow ours (see detail::failed_expression)")
endif()
list(JOIN _expects "\n  " _expects_str)
message(STATUS "OK: ${SOURCE} fails to compile${_with_pch} with diagnostics matching:\n  ${_expects_str}")
