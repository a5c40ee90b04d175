# Options applied to tessera's *own* test/example targets only; never to the
# INTERFACE target `tessera`, so consumers do not inherit them.

# tessera_apply_sanitizers(<target>...)
#   Adds -fsanitize=${TESSERA_SANITIZE} -fno-omit-frame-pointer when the TESSERA_SANITIZE cache
#   variable is non-empty, and -g1 (line tables for the reports) unless TESSERA_SANITIZE_LINE_TABLES
#   is OFF (reports then name functions, from the symbol table, but no lines).
#   TESSERA_SANITIZE_SKIP names checks left out (-fno-sanitize=), TESSERA_SANITIZE_ALSO UBSan
#   checks added (fatal) to a ThreadSanitizer build: scripts/test runs the costly UBSan checks
#   (alignment, null, pointer-overflow) with ThreadSanitizer's subset instead of on every file.
#   TESSERA_SANITIZE_OPTIONS: more compile options for the sanitized targets (scripts/test: clang's
#   -fsanitize-address-use-after-return=never, code for a check ASan does not run by default).
function(tessera_apply_sanitizers)
  if(TESSERA_SANITIZE STREQUAL "")
    return()
  endif()
  foreach(tgt IN LISTS ARGN)
    target_compile_options(${tgt} PRIVATE -fsanitize=${TESSERA_SANITIZE} -fno-omit-frame-pointer)
    if(TESSERA_SANITIZE_LINE_TABLES)
      target_compile_options(${tgt} PRIVATE -g1)
    endif()
    if(TESSERA_SANITIZE MATCHES "undefined")
      # Make UBSan findings fatal by default (UBSAN_OPTIONS still applies).
      target_compile_options(${tgt} PRIVATE -fno-sanitize-recover=undefined)
    endif()
    if(NOT TESSERA_SANITIZE_SKIP STREQUAL "")
      target_compile_options(${tgt} PRIVATE -fno-sanitize=${TESSERA_SANITIZE_SKIP})
    endif()
    if(NOT TESSERA_SANITIZE_ALSO STREQUAL "")
      target_compile_options(${tgt} PRIVATE -fsanitize=${TESSERA_SANITIZE_ALSO}
                                            -fno-sanitize-recover=${TESSERA_SANITIZE_ALSO})
      target_link_options(${tgt} PRIVATE -fsanitize=${TESSERA_SANITIZE_ALSO})
    endif()
    if(NOT TESSERA_SANITIZE_OPTIONS STREQUAL "")
      target_compile_options(${tgt} PRIVATE ${TESSERA_SANITIZE_OPTIONS})
    endif()
    target_link_options(${tgt} PRIVATE -fsanitize=${TESSERA_SANITIZE})
  endforeach()
endfunction()

# tessera_apply_warnings(<target>...): warnings, and TESSERA_LINKER (-fuse-ld=<it>) where set.
function(tessera_apply_warnings)
  if(NOT TESSERA_LINKER STREQUAL "")
    foreach(tgt IN LISTS ARGN)
      get_target_property(_type ${tgt} TYPE)
      if(_type STREQUAL "EXECUTABLE")
        target_link_options(${tgt} PRIVATE -fuse-ld=${TESSERA_LINKER})
      endif()
    endforeach()
  endif()
  if(NOT TESSERA_WARNINGS)
    return()
  endif()
  foreach(tgt IN LISTS ARGN)
    if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
      target_compile_options(${tgt} PRIVATE -Wall -Wextra)
      if(TESSERA_WERROR)
        target_compile_options(${tgt} PRIVATE -Werror)
      endif()
    endif()
  endforeach()
endfunction()

# tessera_configure_test_target(<target>...): warnings + sanitizers.
function(tessera_configure_test_target)
  tessera_apply_warnings(${ARGN})
  tessera_apply_sanitizers(${ARGN})
endfunction()

# tessera_apply_strict_warnings(<target>...)
#   On top of tessera_apply_warnings: what a user compiling with strict warnings sees from
#   tessera's headers (issue 18), -Wpedantic -Wconversion -Wsign-conversion, errors when
#   TESSERA_STRICT_WERROR is ON (scripts/test turns it on, so both compilers' stages check the
#   examples and every header with these flags).
function(tessera_apply_strict_warnings)
  if(NOT TESSERA_WARNINGS OR NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    return()
  endif()
  foreach(tgt IN LISTS ARGN)
    target_compile_options(${tgt} PRIVATE -Wpedantic -Wconversion -Wsign-conversion)
    if(TESSERA_STRICT_WERROR)
      target_compile_options(${tgt} PRIVATE -Werror)
    endif()
  endforeach()
endfunction()
