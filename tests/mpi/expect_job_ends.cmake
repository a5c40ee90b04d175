# cmake -P script: runs an MPI job that must fail, and checks it ends (not hangs) with a
# non-zero status within LIMIT seconds, printing EXPECT (a regex) when given.
#   -DMPIEXEC=... -DNP=... -DPROGRAM=... -DARG=... -DLIMIT=... [-DEXPECT=...] [-DPREFLAGS=a|b]
string(REPLACE "|" ";" PREFLAGS "${PREFLAGS}")
string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${MPIEXEC} ${PREFLAGS} -np ${NP} ${PROGRAM} ${ARG}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
  TIMEOUT ${LIMIT})
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
message("${out}${err}")
if(rc MATCHES "timeout" OR rc MATCHES "Process terminated due to timeout")
  message(FATAL_ERROR "the job did not end within ${LIMIT} s: a failed process left the others waiting")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job succeeded, but one of its processes failed")
endif()
if(NOT "${EXPECT}" STREQUAL "" AND NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the job's output does not say: ${EXPECT}")
endif()
message(STATUS "the job ended with status '${rc}' after ${took} s, as it must")
