#pragma once
// The check the multi-process tests share: EXPECT(cond) counts a failure and names the process
// and the line, without stopping (every process must reach the collectives that follow, or the
// others would wait); each test sums `failures` over the processes at its end.

#include <cstdio>

namespace tessera_mpi_test {

/// Failed EXPECTs on this process.
inline int failures = 0;
/// This process's rank, for the messages (-1 until the test sets it).
inline int me = -1;

}  // namespace tessera_mpi_test

#define EXPECT(cond)                                                                                     \
  do {                                                                                                   \
    if (!(cond)) {                                                                                       \
      ++::tessera_mpi_test::failures;                                                                    \
      std::fprintf(stderr, "process %d: %s:%d: failed: %s\n", ::tessera_mpi_test::me, __FILE__, __LINE__, \
                   #cond);                                                                               \
    }                                                                                                    \
  } while (0)
