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
cmake_minimum_required(VERSION 3.21)

foreach(var COMPILER SOURCE MODE)
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
file(STRINGS "${SOURCE}" _expect_lines REGEX "^[ \t]*//[ \t]*EXPECT:")
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
set(cmd "${COMPILER}" -std=c++20 -fsyntax-only -pthread)
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
  message(STATUS "OK: ${SOURCE} compiles with -DTESSERA_FIXED")
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
message(STATUS "OK: ${SOURCE} fails to compile with diagnostics matching:\n  ${_expects_str}")
