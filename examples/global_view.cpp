// The seeds' global view on 8 CPU devices: whole-array code over sharded arrays, the sharding of
// every result worked out at compile time (jax.jit's "computation follows data" and explicit
// sharding's typeof), each result computed in one pass per device.
//   - seed 002 "Automatic parallelism in JIT": f_elementwise keeps its input's sharding, f_contract
//     (a sum over axis 0) is partially replicated;
//   - seed 001/002 "Explicit sharding": typeof, the broadcasting add int32[4@X,1] + int32[1,8@Y];
//   - seed 002's 2 * sin(x) + 1 over jnp.arange(32) on 8 devices, its printed values, and the
//     total 496, here with jit over a sharded x instead of shard_map;
//   - a reduction to a scalar and a transpose, with their types.
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/parallel.hpp>

#include "numpy_print.hpp"

using examples::print;
using tessera::none;
using tessera::P;

namespace {

/// NumPy's str of a float32 vector, as the seed prints it: each value with the fewest digits that
/// read back as the same float32 (at most 8 decimals, np's default precision), every entry padded
/// to one width, lines wrapped at 75 columns.
std::string numpy_str_float32(xt::xtensor<float, 1> const& v) {
  std::vector<std::string> items;
  for (float f : v) {
    char buf[64];
    auto const res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::fixed);
    std::string s(buf, res.ptr);
    std::size_t const dot = s.find('.');
    if (dot == std::string::npos) {
      s += '.';
    } else if (s.size() - dot - 1 > 8) {
      std::snprintf(buf, sizeof buf, "%.8f", static_cast<double>(f));
      s = buf;
      while (s.back() == '0') s.pop_back();
    }
    items.push_back(s);
  }
  std::size_t left = 0, right = 0;
  for (auto const& s : items) {
    left = std::max(left, s.find('.'));
    right = std::max(right, s.size() - s.find('.'));
  }
  for (auto& s : items) {
    std::size_t const dot = s.find('.');
    s = std::string(left - dot, ' ') + s + std::string(right - (s.size() - dot), ' ');
  }
  // np.core.arrayprint._formatArray: a word goes on the next line when it would pass column 74.
  std::string out, line = " ";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (line.size() + items[i].size() > 74 && line.size() > 1) {
      while (line.back() == ' ') line.pop_back();
      out += line + "\n";
      line = " ";
    }
    line += items[i];
    if (i + 1 < items.size()) line += ' ';
  }
  out += line;
  return "[" + out.substr(1) + "]";
}

bool all_ok = true;
void check(bool ok) { all_ok = all_ok && ok; }

}  // namespace

int main() {
  tessera::runtime rt{8};  // jax.config.update("jax_num_cpu_devices", 8)

  // --- Automatic parallelism in JIT (seed 002) ------------------------------------------------
  // mesh = jax.make_mesh((2, 4), ("x", "y")); a_sharded = device_put(arange(32.0).reshape(4, 8), P("x", "y"))
  auto const mesh_xy = tessera::make_mesh<"x", "y">({2, 4});
  xt::xtensor<float, 2> const a = xt::reshape_view(xt::arange<float>(32.0f), {4, 8});
  auto const a_sharded = tessera::device_put(a, tessera::named_sharding(mesh_xy, P<"x", "y">{}));

  // @jax.jit def f_elementwise(x): return 2 * jnp.sin(x) + 1
  auto const f_elementwise = tessera::jit([](auto x) { return 2 * tessera::sin(x) + 1; });
  auto const result = f_elementwise(a_sharded);
  std::printf("Shardings match: %s\n", a_sharded.sharding() == result.sharding() ? "True" : "False");
  check(xt::allclose(tessera::to_host(result), 2.0f * xt::sin(a) + 1.0f));

  // @jax.jit def f_contract(x): return jnp.sum(x, axis=0)
  // Dimension 0 is sharded over "x", so the sum all-reduces over "x": each device of a column of the
  // mesh holds the same two elements (devices 0 and 4 the first two, 1 and 5 the next two, ...).
  auto const f_contract = tessera::jit([](auto x) { return tessera::sum<0>(x); });
  auto const contracted = f_contract(a_sharded);
  tessera::visualize_array_sharding(contracted);
  print(tessera::to_host(contracted));
  check(tessera::to_host(contracted) == xt::xtensor<float, 1>(xt::sum(a, {0})));

  // --- Explicit sharding (seeds 001 and 002) --------------------------------------------------
  // a = jnp.arange(8); jax.typeof(a), also inside jit, where f returns 2 * a. A host value has no
  // sharding; jit's in_shardings put it on the devices (replicated here, P()).
  xt::xtensor<int, 1> const a8 = xt::arange<int>(8);
  std::cout << "JAX-level type: " << tessera::typeof(a8) << "\n";
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto const replicated = tessera::named_sharding(mesh, P<>{});
  auto const f = tessera::jit(
      [](auto x) {
        std::cout << "JAX-level type: " << tessera::typeof(x) << "\n";  // known before anything runs
        return 2 * x;
      },
      tessera::in_shardings(replicated), tessera::out_shardings(replicated));
  auto const doubled = tessera::to_host(f(a8));
  print(doubled);
  check(doubled == xt::xtensor<int, 1>(2 * a8));

  // mesh = jax.make_mesh((2, 4), ("X", "Y"), axis_types=(AxisType.Explicit, AxisType.Explicit))
  std::cout << mesh << "\n";
  xt::xtensor<int, 2> const a42 = xt::reshape_view(xt::arange<int>(8), {4, 2});
  auto const a42_sharded = tessera::device_put(a42, tessera::named_sharding(mesh, P<"X", none>{}));
  std::cout << "a type: " << tessera::typeof(a42) << "\n";
  std::cout << "a_sharded type: " << tessera::typeof(a42_sharded) << "\n";

  // The broadcasting add: int32[4@X,1] + int32[1,8@Y] -> int32[4@X,8@Y].
  xt::xtensor<int, 2> const h0 = xt::reshape_view(xt::arange<int>(4), {4, 1});
  xt::xtensor<int, 2> const h1 = xt::reshape_view(xt::arange<int>(8), {1, 8});
  auto const a0 = tessera::device_put(h0, tessera::named_sharding(mesh, P<"X", none>{}));
  auto const a1 = tessera::device_put(h1, tessera::named_sharding(mesh, P<none, "Y">{}));
  auto const add = tessera::jit([](auto const& x, auto const& y) {
    auto ans = x + y;  // an expression: its type is known, nothing has run yet
    std::cout << "a sharding: " << tessera::typeof(x) << "\n";
    std::cout << "b sharding: " << tessera::typeof(y) << "\n";
    std::cout << "ans sharding: " << tessera::typeof(ans) << "\n";
    return ans;
  });
  auto const ans = add(a0, a1);
  print(tessera::to_host(ans));
  check(tessera::to_host(ans) == xt::xtensor<int, 2>(h0 + h1));

  // f_contract on Explicit axes: the reduced dimension's axis X leaves the type; the sum over it
  // is an all-reduce, so the result is replicated over X.
  auto const column_sums = f_contract(ans);
  std::cout << "f_contract(ans) type: " << tessera::typeof(column_sums) << "\n";
  tessera::visualize_array_sharding(column_sums);
  print(tessera::to_host(column_sums));
  check(tessera::to_host(column_sums) == xt::xtensor<int, 1>(xt::sum(h0 + h1, {0})));

  // jnp.transpose permutes the spec with the dimensions: int32[4@X,2] -> int32[2,4@X].
  tessera::array const t = tessera::transpose(a42_sharded);
  std::cout << "transpose(a_sharded) type: " << tessera::typeof(t) << "\n";
  print(tessera::to_host(t));
  check(tessera::to_host(t) == xt::xtensor<int, 2>(xt::transpose(a42)));

  // --- 2 * sin(x) + 1 on 8 devices (seed 002) ------------------------------------------------
  // x = jnp.arange(32) sharded P("X") over explicit_mesh = jax.make_mesh((8,), ("X",), Explicit).
  auto const mesh_8 = tessera::make_mesh<"X">({8}, tessera::explicit_axes);
  xt::xtensor<int, 1> const x_host = xt::arange<int>(32);
  auto const x = tessera::device_put(x_host, tessera::named_sharding(mesh_8, P<"X">{}));
  auto const y = f_elementwise(x);
  std::cout << "x type: " << tessera::typeof(x) << "\n";
  std::cout << "f_elementwise(x) type: " << tessera::typeof(y) << "\n";
  std::printf("Shardings match: %s\n", x.sharding() == y.sharding() ? "True" : "False");
  std::string const printed = numpy_str_float32(tessera::to_host(y));
  std::printf("%s\n", printed.c_str());
  // What the seed prints for shard_map(f_elementwise, mesh, P("X"), P("X"))(jnp.arange(32)).
  std::string const seed_002 =
      "[ 1.          2.682942    2.818595    1.28224    -0.513605   -0.9178486\n"
      "  0.44116902  2.3139732   2.9787164   1.824237   -0.08804226 -0.99998045\n"
      " -0.07314587  1.840334    2.9812148   2.3005757   0.42419338 -0.92279494\n"
      " -0.50197446  1.2997544   2.8258905   2.6733112   0.98229736 -0.69244087\n"
      " -0.81115675  0.7352965   2.525117    2.912752    1.5418116  -0.32726777\n"
      " -0.97606325  0.19192469]";
  std::printf("matches seed 002: %s\n", printed == seed_002 ? "true" : "false");
  check(xt::allclose(tessera::to_host(y), 2.0f * xt::sin(xt::xtensor<float, 1>(x_host)) + 1.0f));

  // A reduction to a scalar: jnp.sum(x), the seed's psum of the per-device sums, 496.
  auto const total = tessera::jit([](auto v) { return tessera::sum(v); })(x);
  std::cout << "sum(x) type: " << tessera::typeof(total) << "\n";
  std::printf("%d\n", tessera::to_host(total)());
  check(tessera::to_host(total)() == 496);

  std::printf("all results match xtensor on the host: %s\n", all_ok ? "true" : "false");
  return all_ok ? 0 : 1;
}
