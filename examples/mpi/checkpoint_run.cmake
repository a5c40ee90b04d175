# cmake -P script (ctest example.mpi.checkpoint): examples/mpi/checkpoint.cpp as a job that stops and
# is restarted with other numbers of processes, process 0's output compared with
# examples/mpi/checkpoint.expected byte for byte.
#   -DMPIEXEC=... -DEXE=... -DDIR=... -DEXPECTED=... -DACTUAL=... [-DPREFLAGS=a|b]
# 1. 2 processes x 4 devices train 3 steps, checkpointing each, and stop;
# 2. 1 process x 8 devices restores the latest checkpoint and trains 3 more steps;
# 3. 4 processes x 2 devices do the same from the same checkpoint.
string(REPLACE "|" ";" PREFLAGS "${PREFLAGS}")
file(REMOVE_RECURSE "${DIR}")
set(all "")
foreach(run "2;4;train" "1;8;resume" "4;2;resume")
  list(GET run 0 np)
  list(GET run 1 k)
  list(GET run 2 phase)
  execute_process(
    COMMAND ${MPIEXEC} ${PREFLAGS} -np ${np} ${EXE} ${k} ${phase} ${DIR}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  string(APPEND all "${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${np} x ${k} ${phase}: exit status ${rc}\n---- stdout ----\n${out}---- stderr ----\n${err}")
  endif()
endforeach()
file(REMOVE_RECURSE "${DIR}")
file(WRITE "${ACTUAL}" "${all}")
file(READ "${EXPECTED}" want)
if(NOT all STREQUAL want)
  message(FATAL_ERROR "the output differs from ${EXPECTED}:\n${all}")
endif()
