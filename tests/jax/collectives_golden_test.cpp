// Every shard_map collective checked against JAX's own answers (tests/golden/jax_collectives.json,
// written by tools/jax_reference/gen_collectives.py): psum, pmean, pmax, pmin, all_gather,
// psum_scatter, all_to_all, ppermute and axis_index on 1-, 2- and 3-D meshes of 8 devices, and
// the text of jax.typeof inside a body.
//
// A collective case names its mesh, the collective's axes and the rank of each device's block; a
// runner compiled for that (collective, mesh, axes, rank) runs the case's collective in a
// tessera::shard_map over the same input, sharded the same way, and compares the global output
// with JAX's values and shape. The runners are listed below (the axes must be known when the
// program compiles); a golden case without a runner fails, and so does a runner no case uses.

#include <array>
#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "golden.hpp"

using tessera::axes;
using tessera::axis_name;
using tessera::none;
using tessera::P;
using tessera_jax::json;

namespace {

char const* const file = "jax_collectives.json";

// ---------------------------------------------------------------------------
// One case: its parameters, its input, and each device's result as a flat row
// ---------------------------------------------------------------------------

/// The collective's arguments other than the value, as the generator wrote them.
struct params {
  std::string op;
  bool tiled = false;
  std::size_t axis = 0, dim = 0, split = 0, concat = 0;
  std::vector<std::pair<int, int>> perm;
};

params params_of(json const& c) {
  params p;
  p.op = c.at("op").get<std::string>();
  p.tiled = c.value("tiled", false);
  p.axis = c.value("axis", std::size_t{0});
  p.dim = c.value("dim", std::size_t{0});
  p.split = c.value("split_axis", std::size_t{0});
  p.concat = c.value("concat_axis", std::size_t{0});
  if (c.contains("perm"))
    for (auto const& pair : c.at("perm")) p.perm.emplace_back(pair.at(0).get<int>(), pair.at(1).get<int>());
  return p;
}

/// The global input gen_collectives.py's input_values makes: i, or (7 i + 3) mod 17 - 8.
template <std::size_t N>
xt::xtensor<float, N> input_of(json const& c) {
  std::array<std::size_t, N> shape{};
  auto const s = tessera_jax::vec<std::size_t>(c.at("in_shape"));
  REQUIRE(s.size() == N);
  std::copy(s.begin(), s.end(), shape.begin());
  auto x = xt::xtensor<float, N>::from_shape(shape);
  bool const mixed = c.at("input").get<std::string>() == "mixed";
  long i = 0;
  for (auto& v : x) {
    v = static_cast<float>(mixed ? (i * 7 + 3) % 17 - 8 : i);
    ++i;
  }
  return x;
}

/// A device's result as one row (shard_map lays the rows out in mesh order, as JAX concatenates the
/// results along dimension 0), and its shape.
struct flat_result {
  xt::xtensor<float, 2> row;
  std::vector<std::size_t> shape;
};

template <class R>
flat_result flat(R const& r) {
  flat_result f;
  if constexpr (tessera::detail::is_scalar_value<R>) {
    f.row = xt::xtensor<float, 2>{{static_cast<float>(r)}};
  } else {
    f.shape.assign(r.shape().begin(), r.shape().end());
    f.row = xt::xtensor<float, 2>::from_shape({1, r.size()});
    std::copy(r.begin(), r.end(), f.row.begin());
  }
  return f;
}

// The collectives, one family per runner; the case's parameters pick the call at run time.
struct reduction {
  static constexpr char const* family = "reduction";
  template <axis_name... A, class B>
  static flat_result apply(B const& b, params const& p) {
    if (p.op == "psum") return flat(tessera::psum<A...>(b));
    if (p.op == "pmean") return flat(tessera::pmean<A...>(b));
    if (p.op == "pmax") return flat(tessera::pmax<A...>(b));
    if (p.op == "pmin") return flat(tessera::pmin<A...>(b));
    throw std::invalid_argument("no reduction " + p.op);
  }
};
struct all_gather {
  static constexpr char const* family = "all_gather";
  template <axis_name... A, class B>
  static flat_result apply(B const& b, params const& p) {
    return p.tiled ? flat(tessera::all_gather<A...>(b, p.axis, tessera::tiled)) : flat(tessera::all_gather<A...>(b, p.axis));
  }
};
struct psum_scatter {
  static constexpr char const* family = "psum_scatter";
  template <axis_name... A, class B>
  static flat_result apply(B const& b, params const& p) {
    return p.tiled ? flat(tessera::psum_scatter<A...>(b, p.dim, tessera::tiled)) : flat(tessera::psum_scatter<A...>(b, p.dim));
  }
};
struct all_to_all {
  static constexpr char const* family = "all_to_all";
  template <axis_name... A, class B>
  static flat_result apply(B const& b, params const& p) {
    return p.tiled ? flat(tessera::all_to_all<A...>(b, p.split, p.concat, tessera::tiled))
                   : flat(tessera::all_to_all<A...>(b, p.split, p.concat));
  }
};
struct ppermute {
  static constexpr char const* family = "ppermute";
  template <axis_name... A, class B>
  static flat_result apply(B const& b, params const& p) {
    return flat(tessera::ppermute<A...>(b, p.perm));
  }
};
struct axis_index {
  static constexpr char const* family = "axis_index";
  template <axis_name... A, class B>
  static flat_result apply(B const&, params const&) {
    return flat(tessera::axis_index<A...>());
  }
};

/// Each collective over 'y' of a block the devices along 'y' share (the input is sharded over 'x'
/// only): JAX counts such a value as invariant along 'y', and psum multiplies it by the axis size.
struct on_invariant {
  static constexpr char const* family = "on_invariant";
  static constexpr tessera::dim_spec in_axes{"x"};
  template <axis_name... A, class B>
  static flat_result apply(B const& b, params const& p) {
    if (p.op == "psum" || p.op == "pmean" || p.op == "pmax" || p.op == "pmin") return reduction::apply<A...>(b, p);
    if (p.op == "all_gather") return all_gather::apply<A...>(b, p);
    if (p.op == "psum_scatter") return psum_scatter::apply<A...>(b, p);
    if (p.op == "ppermute") return ppermute::apply<A...>(b, p);
    if (p.op == "all_to_all") return all_to_all::apply<A...>(b, p);
    throw std::invalid_argument("no collective " + p.op);
  }
};

/// P over every mesh axis on dimension 0: each device has its own block, and each result shows.
template <class Mesh>
constexpr tessera::dim_spec every_axis() {
  tessera::dim_spec d;
  for (auto const& a : Mesh::axes) d.push(a.name);
  return d;
}

/// The input's spec: every axis, or the family's own in_axes.
template <class Op, class Mesh>
constexpr tessera::dim_spec in_axes_of() {
  if constexpr (requires { Op::in_axes; }) return Op::in_axes;
  else return every_axis<Mesh>();
}

/// Runs case c (a collective of family Op over A... on rank-N blocks) and compares it with JAX's answer.
template <class Op, std::size_t N, axis_name... A, class Mesh>
void run_case(Mesh const& m, json const& c) {
  params const p = params_of(c);
  auto const x = input_of<N>(c);
  std::vector<std::vector<std::size_t>> shapes(m.num_devices());
  auto f = tessera::shard_map(
      [&p, &shapes](auto blk) {
        flat_result r = Op::template apply<A...>(blk, p);
        shapes[tessera::detail::current_frame->pos] = std::move(r.shape);
        return std::move(r.row);
      },
      m, tessera::in_specs(P<in_axes_of<Op, Mesh>()>{}), tessera::out_specs(P<every_axis<Mesh>()>{}));
  if (c.contains("error")) {
    INFO("JAX refuses it: " << c.at("error").get<std::string>());
    CHECK_THROWS_AS(f(x), tessera::device_error);
    return;
  }
  auto const got = tessera::to_host(f(x));
  // JAX's global shape is every device's result concatenated along dimension 0 (rank 0 as (1,)).
  std::vector<std::size_t> local = shapes[0].empty() ? std::vector<std::size_t>{1} : shapes[0];
  for (auto const& s : shapes) CHECK(s == shapes[0]);
  local[0] *= m.num_devices();
  CHECK(local == tessera_jax::vec<std::size_t>(c.at("shape")));
  // pmean divides by the group size: exact here (sums of small integers over 2, 4 or 8), but not promised.
  tessera_jax::check_values(got, c.at("values"), p.op == "pmean" ? 1e-6 : 0.0);
}

/// The runners, by "family|mesh|axes|rank".
struct registry {
  std::map<std::string, std::function<void(json const&)>> runners;

  template <class Op, std::size_t N, axis_name... A, class Mesh>
  void add(std::string const& mesh_key, Mesh const& m) {
    std::string axes_text;
    ((axes_text += (axes_text.empty() ? "" : ",") + std::string(A.view())), ...);
    runners[std::string(Op::family) + "|" + mesh_key + "|" + axes_text + "|" + std::to_string(N)] = [m](json const& c) {
      run_case<Op, N, A...>(m, c);
    };
  }
};

std::string key_of(json const& c) {
  std::string family = c.value("family", c.at("op").get<std::string>());
  if (family == "psum" || family == "pmean" || family == "pmax" || family == "pmin") family = "reduction";
  std::string axes_text;
  for (auto const& a : c.at("axes")) axes_text += (axes_text.empty() ? "" : ",") + a.get<std::string>();
  return family + "|" + c.at("mesh").get<std::string>() + "|" + axes_text + "|" +
         std::to_string(c.at("block_shape").size());
}

// ---------------------------------------------------------------------------
// jax.typeof inside a body
// ---------------------------------------------------------------------------

/// What type_of prints for each value of gen_collectives.py's body24, on the (2, 4) mesh.
std::map<std::string, std::string> typeof_m24() {
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  std::map<std::string, std::string> seen;
  auto f = tessera::shard_map(
      [&seen](auto a, auto b) {
        using tessera::type_of;
        auto const s = tessera::psum<"x">(a);
        std::map<std::string, std::string> t{
            {"a", type_of(a)},
            {"b", type_of(b)},
            {"a_plus_b", type_of(a + b)},
            {"literal_times_a", type_of(2.0f * a + 1.0f)},
            {"psum_x_a", type_of(s)},
            {"psum_y_a", type_of(tessera::psum<"y">(a))},
            {"psum_xy_a_plus_b", type_of(tessera::psum<"x", "y">(a + b))},
            {"pmean_xy_a_plus_b", type_of(tessera::pmean<"x", "y">(a + b))},
            {"pmax_x_a", type_of(tessera::pmax<"x">(a))},
            {"pmin_y_b", type_of(tessera::pmin<"y">(b))},
            {"psum_x_b", type_of(tessera::psum<"x">(b))},
            {"psum_scatter_y_a", type_of(tessera::psum_scatter<"y">(a, 1, tessera::tiled))},
            {"all_to_all_x_psum", type_of(tessera::all_to_all<"x">(s, 0, 1, tessera::tiled))},
            {"ppermute_y_psum", type_of(tessera::ppermute<"y">(s, {{0, 1}, {1, 0}}))},
            {"axis_index_y", type_of(tessera::axis_index<"y">())},
            {"axis_index_yx", type_of(tessera::axis_index<"y", "x">())},
            {"zeros", type_of(xt::zeros<float>({3}))},
            {"transpose_a", type_of(xt::transpose(a))},
            {"row_of_a", type_of(xt::view(a, 0, xt::all()))},
            {"b_plus_psum", type_of(b + s)},
            {"psum_times_axis_index", type_of(s * tessera::axis_index<"x">())},
            {"all_gather_x_a", type_of(tessera::all_gather<"x">(a, 0, tessera::tiled))},
            {"all_gather_invarying_x_a", type_of(tessera::all_gather<"x">(a, 0, tessera::tiled))},
        };
        if (tessera::detail::current_frame->pos == 0) seen = std::move(t);
        return a;
      },
      m, tessera::in_specs(P<"x">{}, P<"y">{}), tessera::out_specs(P<"x">{}));
  (void)f(xt::xtensor<float, 2>(xt::reshape_view(xt::arange<float>(32.0f), {4, 8})),
          xt::xtensor<float, 1>(xt::arange<float>(32.0f)));
  return seen;
}

/// The same for body222, on the (2, 2, 2) mesh.
std::map<std::string, std::string> typeof_m222() {
  auto const m = tessera::make_mesh<"x", "y", "z">({2, 2, 2});
  std::map<std::string, std::string> seen;
  auto f = tessera::shard_map(
      [&seen](auto a, auto b) {
        using tessera::type_of;
        auto const s = tessera::psum<"x", "y", "z">(a + b);
        std::map<std::string, std::string> t{
            {"a", type_of(a)},
            {"b", type_of(b)},
            {"a_plus_b", type_of(a + b)},
            {"psum_z_a", type_of(tessera::psum<"z">(a))},
            {"pmax_zx_a", type_of(tessera::pmax<"z", "x">(a))},
            {"psum_xyz", type_of(s)},
            {"axis_index_zx", type_of(tessera::axis_index<"z", "x">())},
            {"axis_index_zyx", type_of(tessera::axis_index<"z", "y", "x">())},
            {"ppermute_xy_psum", type_of(tessera::ppermute<"x", "y">(s, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}))},
            {"psum_scatter_z_b", type_of(tessera::psum_scatter<"z">(b, 1, tessera::tiled))},
        };
        if (tessera::detail::current_frame->pos == 0) seen = std::move(t);
        return a;
      },
      m, tessera::in_specs(P<axes<"z", "x">>{}, P<none, "y">{}), tessera::out_specs(P<axes<"z", "x">>{}));
  (void)f(xt::xtensor<float, 2>(xt::reshape_view(xt::arange<float>(16.0f), {4, 4})),
          xt::xtensor<float, 2>(xt::reshape_view(xt::arange<float>(8.0f), {1, 8})));
  return seen;
}

/// JAX's type text without its `{V:...}`: the type of a value that is the same on every device.
std::string without_vma(std::string t) {
  auto const at = t.find("{V:");
  return at == std::string::npos ? t : t.substr(0, at);
}

}  // namespace

TEST_CASE("shard_map collectives and typeof give JAX's answers", "[jax][collectives]") {
  tessera::runtime rt{8};
  auto const m8 = tessera::make_mesh<"x">({8});
  auto const m24 = tessera::make_mesh<"x", "y">({2, 4});
  auto const m42 = tessera::make_mesh<"x", "y">({4, 2});
  auto const m222 = tessera::make_mesh<"x", "y", "z">({2, 2, 2});

  registry reg;
  // psum, pmean, pmax, pmin
  reg.add<reduction, 2, "x">("m8", m8);
  reg.add<reduction, 2, "x">("m24", m24);
  reg.add<reduction, 2, "y">("m24", m24);
  reg.add<reduction, 2, "x", "y">("m24", m24);
  reg.add<reduction, 2, "y", "x">("m24", m24);
  reg.add<reduction, 1, "y">("m24", m24);
  reg.add<reduction, 2, "x">("m42", m42);
  reg.add<reduction, 2, "y">("m42", m42);
  reg.add<reduction, 2, "x", "y">("m42", m42);
  reg.add<reduction, 2, "x">("m222", m222);
  reg.add<reduction, 2, "y">("m222", m222);
  reg.add<reduction, 2, "z">("m222", m222);
  reg.add<reduction, 2, "x", "y">("m222", m222);
  reg.add<reduction, 2, "x", "z">("m222", m222);
  reg.add<reduction, 2, "y", "z">("m222", m222);
  reg.add<reduction, 2, "x", "y", "z">("m222", m222);
  reg.add<reduction, 3, "x", "z">("m222", m222);
  // all_gather
  reg.add<all_gather, 1, "x">("m8", m8);
  reg.add<all_gather, 2, "x">("m8", m8);
  reg.add<all_gather, 3, "x">("m8", m8);
  reg.add<all_gather, 1, "y">("m24", m24);
  reg.add<all_gather, 2, "y">("m24", m24);
  reg.add<all_gather, 3, "y">("m24", m24);
  reg.add<all_gather, 2, "x">("m24", m24);
  reg.add<all_gather, 2, "x", "y">("m24", m24);
  reg.add<all_gather, 2, "x">("m42", m42);
  reg.add<all_gather, 2, "y">("m42", m42);
  reg.add<all_gather, 2, "x">("m222", m222);
  reg.add<all_gather, 3, "y">("m222", m222);
  reg.add<all_gather, 2, "z">("m222", m222);
  reg.add<all_gather, 2, "x", "z">("m222", m222);
  // psum_scatter
  reg.add<psum_scatter, 1, "x">("m8", m8);
  reg.add<psum_scatter, 2, "x">("m8", m8);
  reg.add<psum_scatter, 3, "x">("m8", m8);
  reg.add<psum_scatter, 1, "y">("m24", m24);
  reg.add<psum_scatter, 2, "y">("m24", m24);
  reg.add<psum_scatter, 3, "y">("m24", m24);
  reg.add<psum_scatter, 2, "x", "y">("m42", m42);
  reg.add<psum_scatter, 2, "z">("m222", m222);
  reg.add<psum_scatter, 3, "y", "x">("m222", m222);
  // all_to_all
  reg.add<all_to_all, 2, "x">("m8", m8);
  reg.add<all_to_all, 3, "x">("m8", m8);
  reg.add<all_to_all, 2, "y">("m24", m24);
  reg.add<all_to_all, 2, "x">("m42", m42);
  reg.add<all_to_all, 3, "x", "z">("m222", m222);
  // ppermute
  reg.add<ppermute, 2, "x">("m8", m8);
  reg.add<ppermute, 2, "x">("m24", m24);
  reg.add<ppermute, 2, "y">("m24", m24);
  reg.add<ppermute, 2, "x">("m42", m42);
  reg.add<ppermute, 2, "z">("m222", m222);
  reg.add<ppermute, 2, "x", "z">("m222", m222);
  reg.add<ppermute, 2, "z", "x">("m222", m222);
  reg.add<ppermute, 2, "x", "y", "z">("m222", m222);
  // every collective over an axis the input does not vary over
  reg.add<on_invariant, 2, "y">("m24", m24);
  // axis_index
  reg.add<axis_index, 1, "x">("m8", m8);
  reg.add<axis_index, 1, "x">("m24", m24);
  reg.add<axis_index, 1, "y">("m24", m24);
  reg.add<axis_index, 1, "x", "y">("m24", m24);
  reg.add<axis_index, 1, "y", "x">("m24", m24);
  reg.add<axis_index, 1, "x">("m42", m42);
  reg.add<axis_index, 1, "y">("m42", m42);
  reg.add<axis_index, 1, "x", "y">("m42", m42);
  reg.add<axis_index, 1, "x">("m222", m222);
  reg.add<axis_index, 1, "y">("m222", m222);
  reg.add<axis_index, 1, "z">("m222", m222);
  reg.add<axis_index, 1, "x", "y">("m222", m222);
  reg.add<axis_index, 1, "y", "z">("m222", m222);
  reg.add<axis_index, 1, "z", "x">("m222", m222);
  reg.add<axis_index, 1, "x", "y", "z">("m222", m222);
  reg.add<axis_index, 1, "z", "y", "x">("m222", m222);

  tessera_jax::checks checks;
  std::set<std::string> used;
  for (auto const& [name, c] : tessera_jax::golden(file).at("cases").items()) {
    if (c.at("op") == "typeof") continue;
    std::string const key = key_of(c);
    used.insert(key);
    checks[name] = [&reg, key, name = name](json const& want) {
      auto it = reg.runners.find(key);
      if (it == reg.runners.end()) {
        FAIL_CHECK("no runner '" << key << "' for this case: add one to the list in collectives_golden_test.cpp");
        return;
      }
      if (want.contains("difference")) {
        // ppermute_axis_order: JAX refuses axes out of mesh order (its error is recorded); tessera
        // numbers the devices in the order the axes are named, as JAX does with that check off.
        CHECK(want.at("difference") == "ppermute_axis_order");
        CHECK(want.contains("jax_error"));
      }
      try {
        it->second(want);
      } catch (std::exception const& e) {  // reported, so that the other cases still run
        FAIL_CHECK("tessera threw: " << e.what());
      }
    };
  }
  for (auto const& [key, run] : reg.runners) {
    INFO("the runner '" << key << "' has no golden case");
    CHECK(used.count(key) == 1);
  }

  for (auto const& [mesh_key, seen] : {std::pair{"m24", typeof_m24()}, std::pair{"m222", typeof_m222()}}) {
    for (auto const& [value, text] : seen) {
      checks[std::string("typeof/") + mesh_key + "/" + value] = [text = text](json const& want) {
        std::string const jax = want.at("type").get<std::string>();
        INFO("JAX: " << jax << ", tessera: " << text);
        if (want.contains("difference")) {
          // all_gather_invariant: tessera's all_gather is the same on every device along its axes
          // (JAX's all_gather(..., to='invarying')); JAX's all_gather types it as varying.
          CHECK(want.at("difference") == "all_gather_invariant");
          CHECK(text == without_vma(jax));
        } else {
          CHECK(text == jax);
        }
      };
    }
  }

  std::size_t const n = tessera_jax::check_all(file, checks);
  CHECK(n >= 180);
}
