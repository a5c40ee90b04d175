# cmake -P script: check that tessera can be consumed by other projects.
#
# Inputs (-D):
#   MODE                config    : cmake --install, then find_package(tessera CONFIG)
#                       subdir    : add_subdirectory(<tessera source dir>)
#                       pkgconfig : cmake --install, then $(pkg-config --cflags tessera)
#                       conan_test_package : cmake --install, then build and run the CMake
#                                   project of conan/test_package against that tree
#                       vcpkg_port : run ports/tessera/portfile.cmake with stand-ins for
#                                   vcpkg's helpers (tests/packaging/vcpkg_portfile_stubs.cmake),
#                                   then find_package(tessera CONFIG) from what it installed
#   TESSERA_SOURCE_DIR  tessera source tree
#   TESSERA_BINARY_DIR  configured tessera build tree (for cmake --install)
#   TESSERA_VERSION     expected version
#   CXX_COMPILER        compiler to build the consumer with
#   CMAKE_GENERATOR_NAME generator for the consumer project
#   CONFIG              build configuration (may be empty)
#   CCACHE              optional ccache executable (compiler launcher)
#   PKG_CONFIG          pkg-config executable (MODE=pkgconfig)
#   VCPKG_FEATURES      MODE=vcpkg_port: features of the port to install besides core
#                       ('|'-separated, e.g. blas)
#   EXPECT_MATMUL_BACKEND  optional: blas or kernel, passed to the consumer, which then fails
#                       unless its float matrix product ran on OpenBLAS / tessera's kernel
#   EXPECT_MPI          optional: ON when the tessera under test provides tessera::mpi; the
#                       consumer then fails unless find_package(tessera COMPONENTS mpi) finds it
#   WORK_DIR            scratch directory (wiped at start)
cmake_minimum_required(VERSION 3.21)

foreach(var MODE TESSERA_SOURCE_DIR TESSERA_BINARY_DIR CXX_COMPILER WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "InstallTest.cmake: ${var} not set")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Debug)
endif()

set(consumer_src "${TESSERA_SOURCE_DIR}/tests/install/consumer")
set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run)
  list(JOIN ARGN " " _str)
  message(STATUS "+ ${_str}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message("${out}")
    message(FATAL_ERROR "command failed (rc=${rc}): ${_str}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

function(install_tessera)
  run("${CMAKE_COMMAND}" --install "${TESSERA_BINARY_DIR}" --prefix "${prefix}" --config "${CONFIG}")
  if(NOT EXISTS "${prefix}/include/tessera/tessera.hpp")
    message(FATAL_ERROR "install did not produce ${prefix}/include/tessera/tessera.hpp")
  endif()
endfunction()

set(cmake_args -G "${CMAKE_GENERATOR_NAME}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_BUILD_TYPE=${CONFIG}")
if(CCACHE)
  list(APPEND cmake_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE}")
endif()
if(EXPECT_MPI AND MODE STREQUAL "config")
  list(APPEND cmake_args "-DTESSERA_CONSUMER_EXPECT_MPI=ON")
endif()

# Runs ports/tessera/portfile.cmake as vcpkg would, into ${prefix} (vcpkg's
# CURRENT_PACKAGES_DIR), then checks the layout vcpkg expects of a header-only port.
function(run_vcpkg_portfile)
  set(PORT tessera)
  file(READ "${TESSERA_SOURCE_DIR}/ports/tessera/vcpkg.json" _manifest)
  string(JSON VERSION GET "${_manifest}" version)
  string(REPLACE "|" ";" _extra_features "${VCPKG_FEATURES}")
  foreach(_feature IN LISTS _extra_features)
    string(JSON _ignored ERROR_VARIABLE _err GET "${_manifest}" features ${_feature})
    if(_err)
      message(FATAL_ERROR "ports/tessera/vcpkg.json declares no feature '${_feature}'")
    endif()
  endforeach()
  set(FEATURES core ${_extra_features})
  set(CURRENT_PACKAGES_DIR "${prefix}")
  set(CURRENT_BUILDTREES_DIR "${WORK_DIR}/buildtrees")
  set(TARGET_TRIPLET x64-linux)
  include("${TESSERA_SOURCE_DIR}/tests/packaging/vcpkg_portfile_stubs.cmake")
  include("${TESSERA_SOURCE_DIR}/ports/tessera/portfile.cmake")
  foreach(f include/tessera/tessera.hpp include/tessera/version.hpp
            share/tessera/tesseraConfig.cmake share/tessera/tesseraConfigVersion.cmake
            share/tessera/tessera-targets.cmake share/tessera/usage share/tessera/copyright
            share/pkgconfig/tessera.pc)
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "the port did not install ${f}")
    endif()
  endforeach()
  foreach(d lib debug share/cmake)
    if(EXISTS "${prefix}/${d}")
      message(FATAL_ERROR "the port left ${d}/ in the package (header-only, release-only)")
    endif()
  endforeach()
  file(READ "${prefix}/share/tessera/copyright" _copyright)
  file(READ "${TESSERA_SOURCE_DIR}/LICENSE" _license)
  if(NOT _copyright STREQUAL _license)
    message(FATAL_ERROR "share/tessera/copyright is not tessera's LICENSE")
  endif()
  # The feature blas, and only it, gives an installed config that finds BLAS.
  file(READ "${prefix}/share/tessera/tesseraConfig.cmake" _config)
  if("blas" IN_LIST FEATURES)
    set(_want ON)
  else()
    set(_want OFF)
  endif()
  if(NOT _config MATCHES "set\\(_tessera_uses_blas ${_want}\\)")
    message(FATAL_ERROR "features '${FEATURES}': the installed tesseraConfig.cmake should have "
      "set(_tessera_uses_blas ${_want})")
  endif()
  message(STATUS "port layout OK")
endfunction()

if(MODE MATCHES "^(config|subdir|conan_test_package|vcpkg_port)$")
  if(MODE STREQUAL "subdir")
    set(src "${TESSERA_SOURCE_DIR}/tests/install/subdir_consumer")
    list(APPEND cmake_args "-DTESSERA_SOURCE_DIR=${TESSERA_SOURCE_DIR}")
  else()
    if(MODE STREQUAL "vcpkg_port")
      run_vcpkg_portfile()
    else()
      install_tessera()
    endif()
    if(MODE STREQUAL "conan_test_package")
      set(src "${TESSERA_SOURCE_DIR}/conan/test_package")
      # ConanCenter's xtensor package defines XTENSOR_USE_XSIMD (its option xsimd=True).
      list(APPEND cmake_args "-DCMAKE_CXX_FLAGS=-DXTENSOR_USE_XSIMD")
    else()
      set(src "${consumer_src}")
    endif()
    list(APPEND cmake_args "-DCMAKE_PREFIX_PATH=${prefix}"
      # Make sure we find *this* install, never a system-wide one.
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
      -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
  endif()
  run("${CMAKE_COMMAND}" -S "${src}" -B "${build}" ${cmake_args})
  if(NOT MODE STREQUAL "subdir")
    file(STRINGS "${build}/CMakeCache.txt" _dir REGEX "^tessera_DIR:")
    string(REGEX REPLACE "^[^=]*=" "" _dir "${_dir}")
    file(REAL_PATH "${_dir}" _dir)
    file(REAL_PATH "${prefix}" _prefix_real)
    string(FIND "${_dir}" "${_prefix_real}/" _pos)
    if(NOT _pos EQUAL 0)
      message(FATAL_ERROR "consumer found tessera in '${_dir}', not in '${prefix}'")
    endif()
    message(STATUS "tessera_DIR=${_dir}")
  endif()
  run("${CMAKE_COMMAND}" --build "${build}" --config "${CONFIG}")
  if(MODE STREQUAL "conan_test_package")
    set(exe "${build}/test_package")
    if(NOT EXISTS "${exe}" AND EXISTS "${build}/${CONFIG}/test_package")
      set(exe "${build}/${CONFIG}/test_package")  # multi-config generator
    endif()
  else()
    set(exe "${build}/bin/tessera_consumer")
  endif()
elseif(MODE STREQUAL "pkgconfig")
  if(NOT PKG_CONFIG)
    message(FATAL_ERROR "PKG_CONFIG not set")
  endif()
  install_tessera()
  set(ENV{PKG_CONFIG_PATH} "${prefix}/share/pkgconfig")
  run("${PKG_CONFIG}" --modversion tessera)
  string(STRIP "${run_output}" _ver)
  if(TESSERA_VERSION AND NOT _ver STREQUAL TESSERA_VERSION)
    message(FATAL_ERROR "pkg-config --modversion tessera: '${_ver}', expected '${TESSERA_VERSION}'")
  endif()
  run("${PKG_CONFIG}" --cflags tessera)
  string(STRIP "${run_output}" _cflags)
  message(STATUS "pkg-config --cflags tessera: ${_cflags}")
  separate_arguments(_cflags UNIX_COMMAND "${_cflags}")
  run("${PKG_CONFIG}" --libs tessera)
  string(STRIP "${run_output}" _libs)
  separate_arguments(_libs UNIX_COMMAND "${_libs}")
  set(exe "${WORK_DIR}/tessera_consumer")
  set(_launcher)
  if(CCACHE)
    set(_launcher "${CCACHE}")
  endif()
  run(${_launcher} "${CXX_COMPILER}" -std=c++20 ${_cflags}
    "${consumer_src}/main.cpp" -o "${exe}" -pthread ${_libs})
else()
  message(FATAL_ERROR "InstallTest.cmake: unknown MODE '${MODE}'")
endif()

run("${exe}" ${EXPECT_MATMUL_BACKEND})
message("${run_output}")
if(MODE STREQUAL "conan_test_package" AND TESSERA_VERSION)
  string(FIND "${run_output}" "tessera ${TESSERA_VERSION}: " _pos)
  if(_pos EQUAL -1)
    message(FATAL_ERROR "test_package did not print 'tessera ${TESSERA_VERSION}: ...' "
      "(TESSERA_VERSION_STRING of the installed version.hpp)")
  endif()
endif()
message(STATUS "OK: tessera consumed via ${MODE}")
