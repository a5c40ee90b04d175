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

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
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

# Nothing is compiled: drop the empty library folders.
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/lib" "${CURRENT_PACKAGES_DIR}/debug")

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")

# tessera's checkout has no license file yet; vcpkg requires share/<port>/copyright.
file(GLOB _tessera_license_files "${SOURCE_PATH}/LICENSE*" "${SOURCE_PATH}/COPYING*")
if(_tessera_license_files)
  vcpkg_install_copyright(FILE_LIST ${_tessera_license_files})
else()
  file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright"
    "tessera ${VERSION}: the source tree this port was built from has no license file.\n")
endif()
