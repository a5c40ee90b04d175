# vcpkg port of tessera (header-only), meant to be used as an overlay port from a
# tessera checkout:
#
#   vcpkg install tessera --overlay-ports=<tessera>/ports
#
# or, in a manifest project, "dependencies": ["tessera"] plus
# "vcpkg-configuration": {"overlay-ports": ["<tessera>/ports"]}.
#
# The sources are the checkout this port sits in (two folders up), not a download:
# tessera has no published release archive yet. When it has one, replace the next
# lines by vcpkg_from_github(OUT_SOURCE_PATH SOURCE_PATH REPO ... REF ... SHA512 ...).
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(NOT EXISTS "${SOURCE_PATH}/include/tessera/tessera.hpp" OR NOT EXISTS "${SOURCE_PATH}/CMakeLists.txt")
  message(FATAL_ERROR
    "tessera port: no tessera checkout at '${SOURCE_PATH}'. Use this port as an overlay "
    "port from inside a tessera checkout (--overlay-ports=<tessera>/ports).")
endif()

# Header-only: one (release) configuration is enough.
set(VCPKG_BUILD_TYPE release)

# Feature "blas": tessera's CMake looks for OpenBLAS (TESSERA_USE_BLAS=ON) and, finding it,
# makes the installed tessera::tessera define TESSERA_HAS_CBLAS and link BLAS::BLAS. Without
# the feature TESSERA_USE_BLAS is OFF, so a BLAS that happens to be on the machine but is not
# in the port's dependencies never ends up in the installed package.
# Feature "hdf5": tessera::hdf5 (tessera/checkpoint.hpp) where HDF5 is found; without it
# TESSERA_HDF5 is OFF, so an HDF5 on the machine but not in the port's dependencies is not used.
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    blas TESSERA_USE_BLAS
    hdf5 TESSERA_HDF5
)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DTESSERA_BUILD_TESTS=OFF
    -DTESSERA_BUILD_EXAMPLES=OFF
    -DTESSERA_BUILD_BENCH=OFF
    -DTESSERA_USE_CCACHE=OFF
    # Install the CMake package where vcpkg expects it (share/<port>).
    -DTESSERA_INSTALL_CMAKEDIR=share/${PORT}
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup()   # CONFIG_PATH share/tessera, PACKAGE_NAME tessera
vcpkg_fixup_pkgconfig()      # share/pkgconfig/tessera.pc

# tessera's CMake falls back to its own kernel, with only a status message, when it finds no
# usable BLAS. With the feature on, that would be a package quietly without what was asked for.
if("blas" IN_LIST FEATURES)
  file(READ "${CURRENT_PACKAGES_DIR}/share/${PORT}/tesseraConfig.cmake" _tessera_config)
  if(NOT _tessera_config MATCHES "set\\(_tessera_uses_blas ON\\)")
    message(FATAL_ERROR
      "tessera port, feature blas: tessera's CMake found no BLAS exporting cblas_sgemm and "
      "cblas_dgemm with 32-bit integers, so the package would use tessera's own kernel. "
      "The configure log (${CURRENT_BUILDTREES_DIR}/config-${TARGET_TRIPLET}-rel-out.log) "
      "has the line 'tessera: matmul uses ...' saying why.")
  endif()
endif()

# Nothing is compiled: drop the empty library folders.
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/lib" "${CURRENT_PACKAGES_DIR}/debug")

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")

# vcpkg requires share/<port>/copyright: tessera's BSD 3-Clause license.
if(NOT EXISTS "${SOURCE_PATH}/LICENSE")
  message(FATAL_ERROR "tessera port: '${SOURCE_PATH}/LICENSE' is missing; the port installs it "
    "as share/${PORT}/copyright, which vcpkg requires.")
endif()
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
