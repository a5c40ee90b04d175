// jax.random.normal(key, shape, jnp.int32) raises "dtype argument to `normal` must be a float or
// complex dtype"; tessera refuses an integer dtype at compile time and names the ones it takes.
// EXPECT: tessera::random::normal: the dtype must be float or double
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::random::normal: the dtype must be float or double
#include <cmath>

#include <tessera/tessera.hpp>

using tessera::P;

int main() {
  tessera::runtime rt{4};
  auto mesh = tessera::make_mesh<"X">({4});
  auto const key = tessera::random::key(1701);
#ifdef TESSERA_FIXED
  auto x = tessera::random::normal<float>(key, {8, 3}, tessera::named_sharding(mesh, P<"X">{}));
#else
  auto x = tessera::random::normal<int>(key, {8, 3}, tessera::named_sharding(mesh, P<"X">{}));
#endif
  auto const h = tessera::to_host(x);
  auto const want = tessera::random::normal<float>(key, {8, 3});
  for (std::size_t i = 0; i < h.size(); ++i)
    if (h.data()[i] != want.data()[i] || !std::isfinite(h.data()[i])) return 1;
  return 0;
}
