// A process that fails while the others wait in a collective must end the job, not hang it
// (run by tests/mpi/expect_job_ends.cmake under mpirun, which checks the job ends in seconds).
//
//   failing_process throw   process 1 leaves its distributed runtime by an exception: the
//                           runtime calls MPI_Abort, naming the process
//   failing_process kill    process 1 is killed (SIGKILL) in the middle of a long gather (many
//                           small rounds): mpirun ends the job
//   failing_process device  a device of process 1 throws in a shard_map body while every other
//                           device waits in a psum across processes, unchecked (no signature
//                           exchange to meet): process 1's runtime calls MPI_Abort, naming it
//   failing_process single  the same with one device per process, whose tasks run on the main
//                           thread and whose collectives are MPI's blocking calls
//   failing_process async   the same with psum_async: the others' requests are in flight, and
//                           process 1's other device waits for its peer's start (the gathered
//                           path, parallel/async_gathered.hpp)
//   failing_process memory  process 1 runs out of memory (its address space capped) in a sum
//                           over the processes, whose exchange the others are waiting in; the
//                           program catches the exception and waits in a barrier: process 1's
//                           runtime must have ended the job, naming the failure
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <xtensor/xbuilder.hpp>

#include <tessera/distributed.hpp>
#include <tessera/tessera.hpp>

namespace {
int body(int argc, char** argv) {
  bool const kill = argc > 1 && std::strcmp(argv[1], "kill") == 0;
  bool const single = argc > 1 && std::strcmp(argv[1], "single") == 0;
  int const k = single ? 1 : 2;  // devices per process
  tessera::distributed::runtime rt{argc, argv, k};
  if (argc > 1 && std::strcmp(argv[1], "memory") == 0) {
    auto const mesh = tessera::make_mesh<"d">({rt.device_count()});
    std::size_t const cols = std::size_t{1} << 22;  // 16 MiB of floats per device
    auto const x = tessera::make_array_from_process_local_data(
        tessera::named_sharding(mesh, tessera::P<"d", tessera::none>{}),
        xt::xtensor<float, 2>(xt::ones<float>({static_cast<std::size_t>(k), cols})),
        {static_cast<std::size_t>(rt.device_count()), cols});
    if (rt.process_index() == 1) {
      // Cap this process's address space a little above what it maps now: the sum's 16 MiB
      // blocks cannot be allocated.
      std::ifstream statm("/proc/self/statm");
      unsigned long pages = 0;
      statm >> pages;
      rlimit lim{};
      getrlimit(RLIMIT_AS, &lim);
      lim.rlim_cur = pages * 4096ul + (std::size_t{4} << 20);
      setrlimit(RLIMIT_AS, &lim);
    }
    try {
      auto s = tessera::eval(tessera::sum<0>(x));  // the others wait in its exchange for process 1
      (void)s;
    } catch (std::exception const& e) {
      std::printf("process %d caught: %s\n", rt.process_index(), e.what());
    }
    MPI_Barrier(rt.communicator());  // where process 1 would go on, were the job not ended
    std::printf("process %d: passed the barrier, which it cannot while the others wait in the sum\n", rt.process_index());
    return 0;
  }
  bool const async = argc > 1 && std::strcmp(argv[1], "async") == 0;
  if (argc > 1 && (single || async || std::strcmp(argv[1], "device") == 0)) {
    rt.set_checked_collectives(false);
    auto const mesh = tessera::make_mesh<"d">({rt.device_count()});
    auto const x = tessera::device_put(xt::xtensor<float, 1>(xt::arange<float>(float(4 * rt.device_count()))),
                                       tessera::named_sharding(mesh, tessera::P<"d">{}));
    bool const fails = rt.process_index() == 1;
    auto const sm = tessera::shard_map(
        [fails, k, async](auto const& v) {
          // process 1's first device (global id k)
          if (fails && tessera::axis_index<"d">() == k) throw std::runtime_error("process 1's device fails before the psum");
          if (async) {
            auto fut = tessera::psum_async<"d">(v);
            return fut.wait();
          }
          return tessera::psum<"d">(v);
        },
        mesh, tessera::in_specs(tessera::P<"d">{}), tessera::out_specs(tessera::P<>{}));
    (void)sm(x);  // the other devices wait in the psum for that device, which never comes
    std::printf("process %d: the psum returned, which it cannot without process 1's device\n", rt.process_index());
    return 0;
  }
  xt::xarray<float> x = xt::arange<float>(kill ? float(1 << 20) : 16.0f);
  std::thread killer;
  if (kill) {
    tessera::detail::mpi_max_bytes_per_call = 96;  // 4 MiB in 32-byte shares: seconds of rounds
    if (rt.process_index() == 1)
      killer = std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::raise(SIGKILL);
      });
  } else if (rt.process_index() == 1) {
    throw std::runtime_error("process 1 fails before the gather");
  }
  // The other processes wait here for process 1, which never comes.
  (void)tessera::process_allgather(x);
  if (killer.joinable()) killer.join();
  std::printf("process %d: the gather returned, which it cannot without process 1\n", rt.process_index());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (std::exception const& e) {  // reached only if the runtime did not end the job
    std::printf("the exception reached main: %s\n", e.what());
    return 3;
  }
}
