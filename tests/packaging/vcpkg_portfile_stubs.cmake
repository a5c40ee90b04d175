# Stand-ins for the vcpkg helper functions ports/tessera/portfile.cmake calls, so that
# cmake/InstallTest.cmake (MODE=vcpkg_port) can run the portfile without vcpkg, which
# cannot be installed where tessera is developed. They do the part of the work that
# decides what the port installs (configure, install, copyright) and check what vcpkg
# would insist on; they do not resolve dependencies, fetch anything, or emulate vcpkg's
# post-build checks beyond those below.
#
# The including script (cmake/InstallTest.cmake) provides run(<command>...), which
# stops on failure and leaves the output in run_output, and sets PORT, VERSION, FEATURES,
# CURRENT_PACKAGES_DIR, CURRENT_BUILDTREES_DIR, TARGET_TRIPLET, and for the build:
# CMAKE_GENERATOR_NAME, CXX_COMPILER, optional CCACHE and PKG_CONFIG.

set(z_stub_build_dir "${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel")

# As vcpkg's: -D<option>=ON for each FEATURES <feature> <option> pair whose feature is in
# FEATURES (the features being installed), =OFF otherwise; INVERTED_FEATURES the reverse.
function(vcpkg_check_features)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "OUT_FEATURE_OPTIONS;PREFIX" "FEATURES;INVERTED_FEATURES")
  if(NOT arg_OUT_FEATURE_OPTIONS)
    message(FATAL_ERROR "[vcpkg stand-in] vcpkg_check_features needs OUT_FEATURE_OPTIONS")
  endif()
  set(options "")
  foreach(kind IN ITEMS FEATURES INVERTED_FEATURES)
    list(LENGTH arg_${kind} n)
    math(EXPR odd "${n} % 2")
    if(odd)
      message(FATAL_ERROR "[vcpkg stand-in] vcpkg_check_features ${kind}: expected <feature> <option> pairs, got '${arg_${kind}}'")
    endif()
    while(arg_${kind})
      list(POP_FRONT arg_${kind} feature option)
      if(feature IN_LIST FEATURES)
        set(on ON)
        set(off OFF)
      else()
        set(on OFF)
        set(off ON)
      endif()
      if(kind STREQUAL "FEATURES")
        list(APPEND options "-D${option}=${on}")
      else()
        list(APPEND options "-D${option}=${off}")
      endif()
    endwhile()
  endforeach()
  set(${arg_OUT_FEATURE_OPTIONS} "${options}" PARENT_SCOPE)
endfunction()

function(vcpkg_cmake_configure)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "SOURCE_PATH" "OPTIONS;OPTIONS_RELEASE;OPTIONS_DEBUG")
  if(NOT VCPKG_BUILD_TYPE STREQUAL "release")
    message(FATAL_ERROR "[vcpkg stand-in] a header-only port should set VCPKG_BUILD_TYPE release "
      "before vcpkg_cmake_configure (it is '${VCPKG_BUILD_TYPE}')")
  endif()
  if(NOT EXISTS "${arg_SOURCE_PATH}/CMakeLists.txt")
    message(FATAL_ERROR "[vcpkg stand-in] SOURCE_PATH '${arg_SOURCE_PATH}' has no CMakeLists.txt")
  endif()
  set(args -G "${CMAKE_GENERATOR_NAME}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_INSTALL_PREFIX=${CURRENT_PACKAGES_DIR}")
  if(CCACHE)
    list(APPEND args "-DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE}")
  endif()
  file(REMOVE_RECURSE "${z_stub_build_dir}")
  run("${CMAKE_COMMAND}" -S "${arg_SOURCE_PATH}" -B "${z_stub_build_dir}" ${args}
    ${arg_OPTIONS} ${arg_OPTIONS_RELEASE})
endfunction()

function(vcpkg_cmake_install)
  run("${CMAKE_COMMAND}" --build "${z_stub_build_dir}" --config Release)
  run("${CMAKE_COMMAND}" --install "${z_stub_build_dir}" --config Release)
endfunction()

# The real function moves config files from CONFIG_PATH to share/<PACKAGE_NAME> and
# rewrites their prefix computation; this one only accepts files already in place.
function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(PARSE_ARGV 0 arg "DO_NOT_DELETE_PARENT_CONFIG_PATH;NO_PREFIX_CORRECTION"
    "PACKAGE_NAME;CONFIG_PATH" "")
  if(NOT arg_PACKAGE_NAME)
    set(arg_PACKAGE_NAME "${PORT}")
  endif()
  if(NOT arg_CONFIG_PATH)
    set(arg_CONFIG_PATH "share/${arg_PACKAGE_NAME}")
  endif()
  if(NOT arg_CONFIG_PATH STREQUAL "share/${arg_PACKAGE_NAME}")
    message(FATAL_ERROR "[vcpkg stand-in] CONFIG_PATH '${arg_CONFIG_PATH}': this stand-in only "
      "handles config files installed directly in share/${arg_PACKAGE_NAME}")
  endif()
  set(dir "${CURRENT_PACKAGES_DIR}/${arg_CONFIG_PATH}")
  if(NOT EXISTS "${dir}/${arg_PACKAGE_NAME}Config.cmake" AND NOT EXISTS "${dir}/${arg_PACKAGE_NAME}-config.cmake")
    message(FATAL_ERROR "[vcpkg stand-in] vcpkg_cmake_config_fixup: no ${arg_PACKAGE_NAME}Config.cmake in ${dir}")
  endif()
  # vcpkg rejects absolute paths into the packages directory.
  file(GLOB cmake_files "${dir}/*.cmake")
  foreach(f IN LISTS cmake_files)
    file(READ "${f}" text)
    string(FIND "${text}" "${CURRENT_PACKAGES_DIR}" pos)
    if(NOT pos EQUAL -1)
      message(FATAL_ERROR "[vcpkg stand-in] ${f} contains the absolute path ${CURRENT_PACKAGES_DIR}")
    endif()
  endforeach()
endfunction()

# The real function rewrites prefixes and checks libraries; this one checks that each
# .pc file is relocatable (points into the packages directory through ${pcfiledir}).
function(vcpkg_fixup_pkgconfig)
  file(GLOB_RECURSE pcs "${CURRENT_PACKAGES_DIR}/*.pc")
  list(FILTER pcs EXCLUDE REGEX "^${CURRENT_PACKAGES_DIR}/debug/")
  foreach(pc IN LISTS pcs)
    file(READ "${pc}" text)
    if(NOT text MATCHES "(^|\n)prefix=\\\${pcfiledir}")
      message(FATAL_ERROR "[vcpkg stand-in] ${pc}: prefix is not relative to \${pcfiledir}")
    endif()
    if(PKG_CONFIG)
      get_filename_component(pcdir "${pc}" DIRECTORY)
      get_filename_component(name "${pc}" NAME_WE)
      set(ENV{PKG_CONFIG_PATH} "${pcdir}")
      run("${PKG_CONFIG}" --cflags "${name}")
      file(REAL_PATH "${CURRENT_PACKAGES_DIR}/include" inc)
      string(FIND "${run_output}" "${inc}" pos)
      if(pos EQUAL -1)
        # pkg-config may print the path unresolved; compare after resolving -I.
        string(REGEX MATCH "-I([^ \n]+)" _ "${run_output}")
        file(REAL_PATH "${CMAKE_MATCH_1}" got)
        if(NOT got STREQUAL inc)
          message(FATAL_ERROR "[vcpkg stand-in] pkg-config --cflags ${name}: '${run_output}' "
            "does not point at ${inc}")
        endif()
      endif()
    endif()
  endforeach()
endfunction()

function(vcpkg_install_copyright)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "COMMENT" "FILE_LIST")
  set(text "")
  foreach(f IN LISTS arg_FILE_LIST)
    file(READ "${f}" part)
    string(APPEND text "${part}")
  endforeach()
  file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright" "${text}")
endfunction()
