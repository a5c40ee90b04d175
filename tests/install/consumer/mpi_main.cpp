// Uses an installed tessera::mpi: compiles and links against tessera/distributed.hpp and MPI.
#include <cstdio>

#include <tessera/distributed.hpp>

int main(int argc, char** argv) {
  tessera::distributed::runtime rt{argc, argv, 2};
  std::printf("process %d of %d, %d devices in all\n", rt.process_index(), rt.process_count(), rt.device_count());
  return 0;
}
