// jit with two in_shardings for a function of one argument: JAX raises "jit in_shardings
// ... should be a tuple of length 1"; tessera says so at compile time.
// EXPECT: tessera::jit: the number of in_shardings \(or out_shardings\) differs from the number of arguments
// EXPECT: give one sharding for each
// EXPECT: jit_shardings_must_match_in_number<2, 1, false>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::jit: the number of in_shardings
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto rows = tessera::named_sharding(mesh, P<"X", none>{});
  auto both = tessera::named_sharding(mesh, P<"X", "Y">{});
  auto f = [](auto x) { return 2 * x + 1; };
#ifdef TESSERA_FIXED
  auto g = tessera::jit(f, tessera::in_shardings(both), tessera::out_shardings(rows));
#else
  auto g = tessera::jit(f, tessera::in_shardings(both, both), tessera::out_shardings(rows));
#endif
  xt::xtensor<int, 2> const host = xt::reshape_view(xt::arange<int>(32), {4, 8});
  auto y = g(host);  // host input put in P("X", "Y"), result in P("X", None)
  return tessera::to_host(y) == xt::xtensor<int, 2>(2 * host + 1) ? 0 : 1;
}
