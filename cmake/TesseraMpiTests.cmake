# How ctest starts jobs under mpirun (tests/ and examples/): TESSERA_MPIEXEC_FLAGS, the flags
# after the process count, and TESSERA_MPI_TEST_ENV, the environment of each test.
set(TESSERA_MPIEXEC_FLAGS ${MPIEXEC_PREFLAGS})
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _tessera_mpiexec_version ERROR_QUIET)
if(_tessera_mpiexec_version MATCHES "Open MPI|OpenRTE")
  # More processes than cores, and no pinning: CI machines have 2 cores.
  list(APPEND TESSERA_MPIEXEC_FLAGS --oversubscribe --bind-to none)
endif()
# Root is refused without these (CI runs as root); no single-copy transport in containers;
# waiting processes yield the core to the others.
set(TESSERA_MPI_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;OMPI_MCA_mpi_yield_when_idle=1")
if(TESSERA_SANITIZE MATCHES "address")
  # OpenMPI keeps allocations until exit that LeakSanitizer would report as tessera's leaks.
  list(APPEND TESSERA_MPI_TEST_ENV "ASAN_OPTIONS=detect_leaks=0")
elseif(TESSERA_SANITIZE STREQUAL "thread")
  # OpenMPI takes two of its own locks in both orders inside MPI_Init (a lock-order report in
  # its code, not tessera's); races are still reported and fatal.
  list(APPEND TESSERA_MPI_TEST_ENV "TSAN_OPTIONS=halt_on_error=1:detect_deadlocks=0")
endif()
