# cmake -P script (ctest: packaging.versions): tessera's version is written in five
# places, which must agree:
#   CMakeLists.txt             project(tessera VERSION ...)        (passed as TESSERA_VERSION)
#   include/tessera/version.hpp TESSERA_VERSION_MAJOR/MINOR/PATCH and TESSERA_VERSION_STRING
#   conan/conanfile.py         version = "..."
#   ports/tessera/vcpkg.json   "version"
#   vcpkg.json                 "version"
# It also checks that both vcpkg manifests and the Conan recipe name the same libraries,
# xtensor and xsimd, and that the port and the recipe no longer ask for Boost: no tessera
# header includes it (only bench/compile_times.sh's reference file does).
#
# Inputs (-D): TESSERA_SOURCE_DIR, TESSERA_VERSION.
cmake_minimum_required(VERSION 3.21)

foreach(var TESSERA_SOURCE_DIR TESSERA_VERSION)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_versions.cmake: ${var} not set")
  endif()
endforeach()

set(problems "")
macro(problem text)
  string(APPEND problems "  - ${text}\n")
endmacro()

# extract(<var> <file> <regex> <what>): <var> = the regex's first group in the file's
# text, or "?" and a problem naming <what> when the file does not match.
macro(extract var file regex what)
  file(READ "${TESSERA_SOURCE_DIR}/${file}" _text)
  if(_text MATCHES "${regex}")
    set(${var} "${CMAKE_MATCH_1}")
  else()
    problem("${file}: no ${what}")
    set(${var} "?")
  endif()
endmacro()

set(hpp include/tessera/version.hpp)
foreach(part MAJOR MINOR PATCH)
  extract(hpp_${part} ${hpp} "#define TESSERA_VERSION_${part} ([0-9]+)"
    "'#define TESSERA_VERSION_${part} <number>'")
endforeach()
extract(hpp_string ${hpp} "#define TESSERA_VERSION_STRING \"([^\"]*)\""
  "'#define TESSERA_VERSION_STRING \"...\"'")
set(hpp_numbers "${hpp_MAJOR}.${hpp_MINOR}.${hpp_PATCH}")

# conan/conanfile.py: the class attribute `version = "..."`.
extract(conan_version conan/conanfile.py "\n    version = \"([^\"]*)\""
  "class attribute 'version = \"...\"'")

# The two vcpkg manifests (string(JSON) also fails on invalid JSON).
foreach(manifest IN ITEMS ports/tessera/vcpkg.json vcpkg.json)
  string(MAKE_C_IDENTIFIER "${manifest}" id)
  file(READ "${TESSERA_SOURCE_DIR}/${manifest}" json)
  string(JSON ${id}_version ERROR_VARIABLE err GET "${json}" version)
  if(err)
    problem("${manifest}: no \"version\" (${err})")
    set(${id}_version "?")
  endif()
  string(JSON ${id}_name ERROR_VARIABLE err GET "${json}" name)
  if(err OR NOT ${id}_name STREQUAL "tessera")
    problem("${manifest}: \"name\" is '${${id}_name}', expected 'tessera'")
  endif()
  # Names of the (non-host) dependencies.
  set(${id}_deps "")
  string(JSON n ERROR_VARIABLE err LENGTH "${json}" dependencies)
  if(err)
    problem("${manifest}: no \"dependencies\" array")
    set(n 0)
  endif()
  if(n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON type TYPE "${json}" dependencies ${i})
      if(type STREQUAL "STRING")
        string(JSON dep GET "${json}" dependencies ${i})
      else()
        string(JSON dep GET "${json}" dependencies ${i} name)
        string(JSON host ERROR_VARIABLE err GET "${json}" dependencies ${i} host)
        if(NOT err AND host)
          continue()
        endif()
      endif()
      list(APPEND ${id}_deps "${dep}")
    endforeach()
  endif()
  list(SORT ${id}_deps)
  if(NOT "${${id}_deps}" STREQUAL "xsimd;xtensor")
    problem("${manifest}: dependencies are '${${id}_deps}', expected xsimd;xtensor")
  endif()
endforeach()

file(READ "${TESSERA_SOURCE_DIR}/conan/conanfile.py" conan_text)
foreach(dep IN ITEMS xtensor xsimd)
  if(NOT conan_text MATCHES "self\\.requires\\(\"${dep}/(\\[[^]\"]+\\]|[0-9][^\"]*)\"")
    problem("conan/conanfile.py: does not require ${dep}/<version> or ${dep}/[<range>]")
  endif()
endforeach()
if(conan_text MATCHES "self\\.requires\\(\"boost/")
  problem("conan/conanfile.py: requires boost, which no tessera header includes")
endif()

set(places
  "include/tessera/version.hpp (MAJOR.MINOR.PATCH)" hpp_numbers
  "include/tessera/version.hpp (TESSERA_VERSION_STRING)" hpp_string
  "conan/conanfile.py" conan_version
  "ports/tessera/vcpkg.json" ports_tessera_vcpkg_json_version
  "vcpkg.json" vcpkg_json_version)
set(table "  ${TESSERA_VERSION}  CMakeLists.txt (project VERSION)\n")
list(LENGTH places n)
math(EXPR last "${n} - 1")
foreach(i RANGE 0 ${last} 2)
  math(EXPR j "${i} + 1")
  list(GET places ${i} where)
  list(GET places ${j} var)
  string(APPEND table "  ${${var}}  ${where}\n")
  if(NOT "${${var}}" STREQUAL "${TESSERA_VERSION}")
    problem("${where} says '${${var}}', CMakeLists.txt says '${TESSERA_VERSION}'")
  endif()
endforeach()
message(STATUS "tessera versions:\n${table}")

if(problems)
  message(FATAL_ERROR "tessera's version and dependency declarations disagree:\n${problems}"
    "Change the version in all five places together.")
endif()
message(STATUS "OK: every file says tessera ${TESSERA_VERSION}")
