// A runtime larger than the process may start: under an address-space limit the system
// refuses device threads (each needs a stack), and tessera::runtime must throw
// std::system_error naming how many it started, with the started ones joined: no
// std::terminate, and the process goes on to make a runtime that fits.
// Run by ctest without sanitizers (their shadow memory does not fit under such a limit).
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <system_error>

#include <tessera/tessera.hpp>

namespace {
/// Bytes of address space the process maps now (VmSize).
long long mapped_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long long kb = 0;
  while (status >> key)
    if (key == "VmSize:" && status >> kb) return kb * 1024;
  return 0;
}
}  // namespace

int main() {
  { tessera::runtime warm{2}; }  // allocator arenas and the like, mapped before the limit
  long long const limit = mapped_bytes() + (256LL << 20);
  rlimit const cap{static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
  rlimit old{};
  getrlimit(RLIMIT_AS, &old);
  if (setrlimit(RLIMIT_AS, &cap) != 0) {
    std::puts("setrlimit(RLIMIT_AS) refused; nothing to check");
    return 0;
  }
  try {
    tessera::runtime rt{4096};  // 4096 stacks of 8 MiB: far past 256 MiB
    std::puts("FAIL: 4096 device threads started under a 256 MiB address-space limit");
    return 1;
  } catch (std::system_error const& e) {
    std::string const what = e.what();
    std::printf("refused as expected: %s\n", what.c_str());
    if (what.find("of 4096 device threads") == std::string::npos) {
      std::puts("FAIL: the message does not say how many device threads were started");
      return 1;
    }
  }
  setrlimit(RLIMIT_AS, &old);
  tessera::runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});
  auto const a = tessera::device_put(xt::xtensor<int, 1>{1, 2, 3, 4}, tessera::named_sharding(m, tessera::P<"X">{}));
  int const total = tessera::to_host(tessera::eval(tessera::sum(a)))();
  std::printf("after the refusal, a runtime of 4 devices sums to %d\n", total);
  return total == 10 ? 0 : 1;
}
