# cmake -P script (ctest mpi.checkpoint): checkpoints across processes, in the order a job lives.
#   -DMPIEXEC=... -DPROGRAM=... -DDIR=... [-DPREFLAGS=a|b]
# 1. 2 processes x 2 devices save tree A collectively into one file (parallel HDF5) and read it back;
# 2. 1 process x 4 devices and 3 processes x 2 devices restore it into other shardings;
# 3. 2 processes start saving tree B over it and process 1 is killed (SIGKILL) in the middle: the
#    job must end, not hang, and the file must be A's, byte for byte;
# 4. 3 processes x 1 device restore A from it and check every element bit for bit.
string(REPLACE "|" ";" PREFLAGS "${PREFLAGS}")
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")

function(run np k mode must_pass)
  execute_process(
    COMMAND ${MPIEXEC} ${PREFLAGS} -np ${np} ${PROGRAM} ${k} ${mode} ${DIR}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  message("[${np} x ${k}: ${mode}] status ${rc}\n${out}${err}")
  if(rc MATCHES "timeout|terminated")
    message(FATAL_ERROR "${np} x ${k} ${mode}: the job did not end within 120 s")
  endif()
  if(must_pass AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${np} x ${k} ${mode}: failed")
  endif()
  if(NOT must_pass AND rc EQUAL 0)
    message(FATAL_ERROR "${np} x ${k} ${mode}: the job succeeded, but process 1 was killed in it")
  endif()
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()

run(2 2 save TRUE)
run(1 4 load TRUE)
run(3 2 load TRUE)
file(SHA256 "${DIR}/ckpt.h5" before)
run(2 2 kill FALSE)
if(NOT last_output MATCHES "process 1 kills itself in the middle of the save")
  message(FATAL_ERROR "the kill did not happen where it should")
endif()
file(SHA256 "${DIR}/ckpt.h5" after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "the killed save changed the previous checkpoint")
endif()
run(3 1 load TRUE)
if(NOT last_output MATCHES "temporary file of the killed save present")
  message(FATAL_ERROR "the killed save left no temporary file: was it killed before it began?")
endif()
file(REMOVE_RECURSE "${DIR}")
message(STATUS "the previous checkpoint survived the killed save, bit for bit")
