# tessera's include graph, read from the headers' `#include "tessera/..."` lines at configure
# time (no compiler): tests/CMakeLists.txt uses it to check most headers against a precompiled
# header they include anyway (issue 31: CI in 25 minutes).

# tessera_headers_including(<out-var> <base> <headers>...): the <headers> (paths relative to
# include/, as "tessera/expr/evaluate.hpp") whose unconditional includes reach <base>, directly
# or through other tessera headers; <base> itself is not listed. An include inside #if/#ifdef is
# not followed, so the answer never claims a header includes <base> when a configuration
# compiles it without.
function(tessera_headers_including out base)
  set(root ${PROJECT_SOURCE_DIR}/include)
  file(GLOB_RECURSE all RELATIVE ${root} ${root}/tessera/*.hpp)
  # included_by_<header>: the headers that include it unconditionally.
  foreach(hdr IN LISTS all)
    file(STRINGS ${root}/${hdr} lines REGEX "^[ \t]*#[ \t]*(include[ \t]*[<\"]tessera/|if|endif)")
    set(depth 0)
    foreach(line IN LISTS lines)
      if(line MATCHES "^[ \t]*#[ \t]*if")
        math(EXPR depth "${depth} + 1")
      elseif(line MATCHES "^[ \t]*#[ \t]*endif")
        math(EXPR depth "${depth} - 1")
      elseif(depth EQUAL 0 AND line MATCHES "[<\"](tessera/[^>\"]+)[>\"]")
        list(APPEND included_by_${CMAKE_MATCH_1} ${hdr})
      endif()
    endforeach()
  endforeach()
  # Breadth-first over the reversed edges from <base>.
  set(reached)
  set(frontier ${base})
  while(frontier)
    list(POP_FRONT frontier h)
    foreach(user IN LISTS included_by_${h})
      if(NOT user IN_LIST reached AND NOT user STREQUAL base)
        list(APPEND reached ${user})
        list(APPEND frontier ${user})
      endif()
    endforeach()
  endwhile()
  set(result)
  foreach(hdr IN LISTS ARGN)
    if(hdr IN_LIST reached)
      list(APPEND result ${hdr})
    endif()
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()
