// Meshes, PartitionSpecs and NamedShardings against JAX 0.12's own answers
// (tests/golden/jax_sharding.json, written by tools/jax_reference/gen_sharding.py on 8 CPU devices):
// how they print, which block of an array each device holds, shard shapes and replica ids.
// The case names say how each object is built, never what JAX answered; every answer compared
// comes from the golden file.

#include <array>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "golden.hpp"
#include "tessera/core/named_sharding.hpp"
#include "tessera/runtime/make_mesh.hpp"

namespace {

using tessera::axes;
using tessera::axis_type;
using tessera::named_sharding;
using tessera::none;
using tessera::P;
using tessera_jax::json;

constexpr axis_type A = axis_type::auto_;
constexpr axis_type E = axis_type::explicit_;
constexpr axis_type M = axis_type::manual;
template <axis_type... T>
using types = tessera::axis_types<T...>;

char const* const file = "jax_sharding.json";

template <class T>
std::string str(T const& x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

void check_repr(auto const& x, json const& c) { CHECK(str(x) == c.at("repr").get<std::string>()); }

template <std::size_t N>
std::array<std::size_t, N> shape_of(json const& j) {
  auto const v = j.get<std::vector<std::size_t>>();
  REQUIRE(v.size() == N);
  std::array<std::size_t, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = v[i];
  return out;
}

// The mesh's grid against JAX's: device order matters, since the maps are keyed by device id.
void check_mesh(auto const& s, json const& c) {
  auto const& m = s.mesh();
  CHECK(std::vector<int>(m.sizes().begin(), m.sizes().end()) == c.at("mesh_shape").get<std::vector<int>>());
  CHECK(m.device_ids() == c.at("device_ids").get<std::vector<int>>());
}

// Each device's block against JAX's {device id: [[start, stop], ...]}, clipped to `shape` (an
// uneven case compares with JAX's blocks of the padded shape, which may run past the end).
template <std::size_t N>
void check_blocks(auto const& s, std::array<std::size_t, N> const& shape, json const& want) {
  auto const got = s.devices_indices_map(shape);
  CHECK(got.size() == want.size());
  for (auto const& [id, block] : got) {
    INFO("device " << id);
    REQUIRE(want.contains(std::to_string(id)));
    auto const& w = want.at(std::to_string(id));
    REQUIRE(w.size() == N);
    for (std::size_t d = 0; d < N; ++d) {
      INFO("dimension " << d << ": tessera " << block[d] << ", JAX " << w[d].dump());
      CHECK(block[d].start == std::min(w[d][0].template get<std::size_t>(), shape[d]));
      CHECK(block[d].stop == std::min(w[d][1].template get<std::size_t>(), shape[d]));
    }
  }
}

void check_replica_ids(auto const& s, json const& want) {
  CHECK(want.size() == s.num_devices());
  for (auto const& [id, rid] : want.items()) {
    INFO("device " << id);
    auto const pos = s.mesh().position_of(std::stoi(id));
    REQUIRE(pos.has_value());
    CHECK(s.replica_id(*pos) == rid.template get<int>());
  }
}

template <std::size_t N>
void check_layout(auto const& s, json const& c) {
  auto const shape = shape_of<N>(c.at("shape"));
  check_mesh(s, c);
  CHECK(str(s.spec()) == c.at("spec").get<std::string>());
  check_blocks<N>(s, shape, c.at("indices"));
  CHECK(s.shard_shape(shape) == shape_of<N>(c.at("shard_shape")));
  check_replica_ids(s, c.at("replica_ids"));
  CHECK(s.is_fully_replicated() == c.at("is_fully_replicated").get<bool>());
  CHECK(s.num_devices() == c.at("num_devices").get<std::size_t>());
}

// JAX refuses a dimension its mesh axes do not divide; tessera cuts it into blocks of ceil(n/k),
// the last ones smaller or empty (docs/differences-from-jax.md, "Uneven shapes"), which is JAX's
// layout of the shape padded up to a multiple of k, clipped to n.
template <std::size_t N>
void check_uneven(auto const& s, json const& c) {
  REQUIRE(c.at("difference") == "uneven shapes");
  CHECK_FALSE(c.at("jax_error").get<std::string>().empty());
  auto const shape = shape_of<N>(c.at("shape"));
  check_mesh(s, c);
  CHECK(str(s.spec()) == c.at("spec").get<std::string>());
  check_blocks<N>(s, shape, c.at("padded_indices"));
  CHECK(s.shard_shape(shape) == shape_of<N>(c.at("padded_shard_shape")));
  check_replica_ids(s, c.at("padded_replica_ids"));
}

// One layout case per array rank from max(len(spec), 1) to 3, as the generator writes them.
template <class Spec, class Mesh>
void add_layouts(tessera_jax::checks& cs, std::string const& mesh_key, Mesh const& m, std::string const& spec_src) {
  auto add = [&]<std::size_t N>() {
    if constexpr (N >= Spec::size)
      cs["layout " + mesh_key + " " + spec_src + " rank" + std::to_string(N)] = [m](json const& c) {
        check_layout<N>(named_sharding(m, Spec{}), c);
      };
  };
  add.template operator()<1>();
  add.template operator()<2>();
  add.template operator()<3>();
}

#define REPR(name, ...) {name, [=](json const& c) { check_repr(__VA_ARGS__, c); }}

// How specs, meshes and shardings print; the meshes are made when a check runs.
void add_reprs(tessera_jax::checks& cs) {
  using tessera::make_mesh;
  auto const m24 = [](auto t) { return make_mesh<"X", "Y">({2, 4}, t); };
  auto const m222 = [](auto t) { return make_mesh<"X", "Y", "Z">({2, 2, 2}, t); };
  tessera_jax::checks reprs{
      REPR("repr spec P()", P<>{}),
      REPR("repr spec P(None)", P<none>{}),
      REPR("repr spec P(None, None)", P<none, none>{}),
      REPR("repr spec P('X')", P<"X">{}),
      REPR("repr spec P('X', None)", P<"X", none>{}),
      REPR("repr spec P(None, 'X')", P<none, "X">{}),
      REPR("repr spec P('X', 'Y')", P<"X", "Y">{}),
      REPR("repr spec P('Y', 'X')", P<"Y", "X">{}),
      REPR("repr spec P(('X', 'Y'))", P<axes<"X", "Y">>{}),
      REPR("repr spec P(('Y', 'X'))", P<axes<"Y", "X">>{}),
      REPR("repr spec P(('X', 'Y'), None)", P<axes<"X", "Y">, none>{}),
      REPR("repr spec P(None, ('X', 'Y'))", P<none, axes<"X", "Y">>{}),
      REPR("repr spec P(('X', 'Y'), 'Z')", P<axes<"X", "Y">, "Z">{}),
      REPR("repr spec P('X', None, 'Z')", P<"X", none, "Z">{}),
      REPR("repr spec P('X', 'Y', 'Z')", P<"X", "Y", "Z">{}),
      REPR("repr spec P(('X', 'Y', 'Z'))", P<axes<"X", "Y", "Z">>{}),
      REPR("repr spec P(('Z', 'Y', 'X'), None)", P<axes<"Z", "Y", "X">, none>{}),
      REPR("repr spec P(None, None, 'Z')", P<none, none, "Z">{}),
      REPR("repr spec P('X', None, None)", P<"X", none, none>{}),
      REPR("repr spec P('data')", P<"data">{}),
      REPR("repr spec P(('X'))", P<axes<"X">>{}),
      REPR("repr spec P(None, ('Y', 'Z'), 'X')", P<none, axes<"Y", "Z">, "X">{}),
      REPR("repr spec P('batch', 'model')", P<"batch", "model">{}),

      REPR("repr mesh 8 X (Auto)", make_mesh<"X">({8}, types<A>{})),
      REPR("repr mesh 8 X (Explicit)", make_mesh<"X">({8}, types<E>{})),
      REPR("repr mesh 8 X (Manual)", make_mesh<"X">({8}, types<M>{})),
      REPR("repr mesh 2x4 X,Y (Auto, Auto)", m24(types<A, A>{})),
      REPR("repr mesh 2x4 X,Y (Explicit, Explicit)", m24(types<E, E>{})),
      REPR("repr mesh 2x4 X,Y (Manual, Manual)", m24(types<M, M>{})),
      REPR("repr mesh 2x4 X,Y (Explicit, Auto)", m24(types<E, A>{})),
      REPR("repr mesh 2x4 X,Y (Auto, Manual)", m24(types<A, M>{})),
      REPR("repr mesh 2x4 X,Y (Manual, Explicit)", m24(types<M, E>{})),
      REPR("repr mesh 4x2 X,Y (Auto, Auto)", make_mesh<"X", "Y">({4, 2}, types<A, A>{})),
      REPR("repr mesh 1x8 X,Y (Explicit, Explicit)", make_mesh<"X", "Y">({1, 8}, types<E, E>{})),
      REPR("repr mesh 2x2x2 X,Y,Z (Auto, Auto, Auto)", m222(types<A, A, A>{})),
      REPR("repr mesh 2x2x2 X,Y,Z (Explicit, Explicit, Explicit)", m222(types<E, E, E>{})),
      REPR("repr mesh 2x2x2 X,Y,Z (Manual, Manual, Manual)", m222(types<M, M, M>{})),
      REPR("repr mesh 2x2x2 X,Y,Z (Auto, Explicit, Manual)", m222(types<A, E, M>{})),
      REPR("repr mesh 2x2x2 X,Y,Z (Explicit, Explicit, Auto)", m222(types<E, E, A>{})),
      REPR("repr mesh 4 of 4 X (Auto)", make_mesh<"X">({4}, types<A>{})),
      REPR("repr mesh 2 of 2 X (Explicit)", make_mesh<"X">({2}, types<E>{})),
      REPR("repr mesh 2x2 of 4 X,Y (Explicit, Manual)", make_mesh<"X", "Y">({2, 2}, types<E, M>{})),
      REPR("repr mesh 2x4 x,y (Auto, Auto)", make_mesh<"x", "y">({2, 4}, types<A, A>{})),
      REPR("repr mesh 2x4 data,model (Explicit, Explicit)", make_mesh<"data", "model">({2, 4}, types<E, E>{})),
      REPR("repr mesh 8 devices (Auto)", make_mesh<"devices">({8}, types<A>{})),

      REPR("repr sharding 2x4 X,Y (Explicit, Explicit) P('X', None)",
           named_sharding(m24(types<E, E>{}), P<"X", none>{})),
      REPR("repr sharding 2x4 X,Y (Explicit, Explicit) P('X', 'Y')", named_sharding(m24(types<E, E>{}), P<"X", "Y">{})),
      REPR("repr sharding 2x4 X,Y (Explicit, Explicit) P()", named_sharding(m24(types<E, E>{}), P<>{})),
      REPR("repr sharding 2x4 X,Y (Explicit, Explicit) P(('X', 'Y'))",
           named_sharding(m24(types<E, E>{}), P<axes<"X", "Y">>{})),
      REPR("repr sharding 2x4 X,Y (Explicit, Explicit) P('Y')", named_sharding(m24(types<E, E>{}), P<"Y">{})),
      REPR("repr sharding 2x4 X,Y (Auto, Auto) P('X', 'Y')", named_sharding(m24(types<A, A>{}), P<"X", "Y">{})),
      REPR("repr sharding 2x4 X,Y (Auto, Auto) P(None, ('Y', 'X'))",
           named_sharding(m24(types<A, A>{}), P<none, axes<"Y", "X">>{})),
      REPR("repr sharding 2x4 X,Y (Auto, Auto) P(None)", named_sharding(m24(types<A, A>{}), P<none>{})),
      REPR("repr sharding 2x4 X,Y (Explicit, Auto) P('X', None, 'Y')",
           named_sharding(m24(types<E, A>{}), P<"X", none, "Y">{})),
      REPR("repr sharding 2x4 X,Y (Manual, Manual) P('X')", named_sharding(m24(types<M, M>{}), P<"X">{})),
      REPR("repr sharding 2x4 X,Y (Auto, Manual) P(None, 'Y')", named_sharding(m24(types<A, M>{}), P<none, "Y">{})),
      REPR("repr sharding 8 X (Auto) P('X', None)", named_sharding(make_mesh<"X">({8}, types<A>{}), P<"X", none>{})),
      REPR("repr sharding 8 X (Explicit) P(None, 'X')",
           named_sharding(make_mesh<"X">({8}, types<E>{}), P<none, "X">{})),
      REPR("repr sharding 8 X (Manual) P()", named_sharding(make_mesh<"X">({8}, types<M>{}), P<>{})),
      REPR("repr sharding 8 devices (Auto) P('devices', None)",
           named_sharding(make_mesh<"devices">({8}, types<A>{}), P<"devices", none>{})),
      REPR("repr sharding 2x2x2 X,Y,Z (Explicit, Explicit, Explicit) P(('X', 'Y', 'Z'))",
           named_sharding(m222(types<E, E, E>{}), P<axes<"X", "Y", "Z">>{})),
      REPR("repr sharding 2x2x2 X,Y,Z (Auto, Explicit, Manual) P('X', ('Z', 'Y'))",
           named_sharding(m222(types<A, E, M>{}), P<"X", axes<"Z", "Y">>{})),
      REPR("repr sharding 2x2x2 X,Y,Z (Auto, Auto, Auto) P('Z', None, 'X')",
           named_sharding(m222(types<A, A, A>{}), P<"Z", none, "X">{})),
      REPR("repr sharding 2x2x2 X,Y,Z (Explicit, Explicit, Auto) P(None, None)",
           named_sharding(m222(types<E, E, A>{}), P<none, none>{})),
      REPR("repr sharding 4 of 4 X (Auto) P('X')", named_sharding(make_mesh<"X">({4}, types<A>{}), P<"X">{})),
      REPR("repr sharding 2 of 2 X (Explicit) P(None, 'X')",
           named_sharding(make_mesh<"X">({2}, types<E>{}), P<none, "X">{})),
      REPR("repr sharding 2x2 of 4 X,Y (Explicit, Manual) P('Y', 'X')",
           named_sharding(make_mesh<"X", "Y">({2, 2}, types<E, M>{}), P<"Y", "X">{})),
      REPR("repr sharding 1x8 X,Y (Explicit, Explicit) P(('Y', 'X'), None)",
           named_sharding(make_mesh<"X", "Y">({1, 8}, types<E, E>{}), P<axes<"Y", "X">, none>{})),
      REPR("repr sharding 2x4 x,y (Auto, Auto) P('x', 'y')",
           named_sharding(make_mesh<"x", "y">({2, 4}, types<A, A>{}), P<"x", "y">{})),
      REPR("repr sharding 2x4 data,model (Explicit, Explicit) P('data', 'model')",
           named_sharding(make_mesh<"data", "model">({2, 4}, types<E, E>{}), P<"data", "model">{})),
  };
  cs.merge(reprs);

  // JAX 0.12's make_mesh makes Explicit axes when axis_types is left out; tessera's default is
  // Auto (a mesh written without types keeps resharding automatically), so tessera prints what
  // JAX prints with each Explicit read as Auto.
  auto const default_types = [](auto const& m, json const& c) {
    REQUIRE(c.at("difference") == "make_mesh default axis types");
    std::string want = c.at("repr").get<std::string>();
    for (auto p = want.find("Explicit"); p != std::string::npos; p = want.find("Explicit", p))
      want.replace(p, 8, "Auto");
    CHECK(str(m) == want);
    auto const jax_types = c.at("axis_types").get<std::vector<std::string>>();
    for (std::size_t i = 0; i < jax_types.size(); ++i) {
      CHECK(jax_types[i] == "Explicit");
      CHECK(m.type_of(i) == A);
    }
  };
  cs["make_mesh default axis_types 2x4"] = [=](json const& c) { default_types(make_mesh<"X", "Y">({2, 4}), c); };
  cs["make_mesh default axis_types 8"] = [=](json const& c) { default_types(make_mesh<"X">({8}), c); };
  cs["make_mesh default axis_types 2x2x2"] = [=](json const& c) {
    default_types(make_mesh<"X", "Y", "Z">({2, 2, 2}), c);
  };
}

// Which block each device holds; needs a current runtime of 8 devices (the meshes are made here).
void add_layout_checks(tessera_jax::checks& cs) {
  using tessera::explicit_axes;
  using tessera::make_mesh;
  auto const m8 = make_mesh<"X">({8}, explicit_axes);
  auto const m24 = make_mesh<"X", "Y">({2, 4}, explicit_axes);
  auto const m42 = make_mesh<"X", "Y">({4, 2}, explicit_axes);
  auto const m222 = make_mesh<"X", "Y", "Z">({2, 2, 2}, explicit_axes);
  auto const m18 = make_mesh<"X", "Y">({1, 8}, explicit_axes);
  auto const m4 = make_mesh<"X">({4}, explicit_axes);
  auto const m2 = make_mesh<"X">({2}, explicit_axes);
  auto const m22 = make_mesh<"X", "Y">({2, 2}, explicit_axes);
  auto const mperm = make_mesh<"X", "Y">({2, 4}, std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}, explicit_axes);

#define LAYOUTS(mesh, key, src, ...) add_layouts<__VA_ARGS__>(cs, key, mesh, src)
  LAYOUTS(m8, "8", "P()", P<>);
  LAYOUTS(m8, "8", "P('X')", P<"X">);
  LAYOUTS(m8, "8", "P(None, 'X')", P<none, "X">);
  LAYOUTS(m8, "8", "P('X', None)", P<"X", none>);
  LAYOUTS(m8, "8", "P(None, None, 'X')", P<none, none, "X">);

  LAYOUTS(m24, "2x4", "P()", P<>);
  LAYOUTS(m24, "2x4", "P('X')", P<"X">);
  LAYOUTS(m24, "2x4", "P('Y')", P<"Y">);
  LAYOUTS(m24, "2x4", "P('X', 'Y')", P<"X", "Y">);
  LAYOUTS(m24, "2x4", "P('Y', 'X')", P<"Y", "X">);
  LAYOUTS(m24, "2x4", "P(('X', 'Y'))", P<axes<"X", "Y">>);
  LAYOUTS(m24, "2x4", "P(('Y', 'X'))", P<axes<"Y", "X">>);
  LAYOUTS(m24, "2x4", "P(None, ('X', 'Y'))", P<none, axes<"X", "Y">>);
  LAYOUTS(m24, "2x4", "P(None, 'Y')", P<none, "Y">);
  LAYOUTS(m24, "2x4", "P('X', None, 'Y')", P<"X", none, "Y">);
  LAYOUTS(m24, "2x4", "P(None, None, ('Y', 'X'))", P<none, none, axes<"Y", "X">>);

  LAYOUTS(m42, "4x2", "P('X')", P<"X">);
  LAYOUTS(m42, "4x2", "P('Y')", P<"Y">);
  LAYOUTS(m42, "4x2", "P('X', 'Y')", P<"X", "Y">);
  LAYOUTS(m42, "4x2", "P(('X', 'Y'))", P<axes<"X", "Y">>);
  LAYOUTS(m42, "4x2", "P(('Y', 'X'))", P<axes<"Y", "X">>);
  LAYOUTS(m42, "4x2", "P(None, 'X')", P<none, "X">);

  LAYOUTS(m222, "2x2x2", "P()", P<>);
  LAYOUTS(m222, "2x2x2", "P('X')", P<"X">);
  LAYOUTS(m222, "2x2x2", "P('Y')", P<"Y">);
  LAYOUTS(m222, "2x2x2", "P('Z')", P<"Z">);
  LAYOUTS(m222, "2x2x2", "P('X', 'Y', 'Z')", P<"X", "Y", "Z">);
  LAYOUTS(m222, "2x2x2", "P('Z', 'Y', 'X')", P<"Z", "Y", "X">);
  LAYOUTS(m222, "2x2x2", "P(('X', 'Y', 'Z'))", P<axes<"X", "Y", "Z">>);
  LAYOUTS(m222, "2x2x2", "P(('Z', 'Y', 'X'))", P<axes<"Z", "Y", "X">>);
  LAYOUTS(m222, "2x2x2", "P(('X', 'Z'), 'Y')", P<axes<"X", "Z">, "Y">);
  LAYOUTS(m222, "2x2x2", "P(('Z', 'X'), None, 'Y')", P<axes<"Z", "X">, none, "Y">);
  LAYOUTS(m222, "2x2x2", "P(None, ('Y', 'Z'))", P<none, axes<"Y", "Z">>);
  LAYOUTS(m222, "2x2x2", "P('Y', None)", P<"Y", none>);

  LAYOUTS(m18, "1x8", "P('X')", P<"X">);
  LAYOUTS(m18, "1x8", "P('Y')", P<"Y">);
  LAYOUTS(m18, "1x8", "P(('X', 'Y'))", P<axes<"X", "Y">>);
  LAYOUTS(m18, "1x8", "P(('Y', 'X'))", P<axes<"Y", "X">>);
  LAYOUTS(m18, "1x8", "P('X', 'Y')", P<"X", "Y">);

  LAYOUTS(m4, "4 of 8", "P()", P<>);
  LAYOUTS(m4, "4 of 8", "P('X')", P<"X">);
  LAYOUTS(m4, "4 of 8", "P(None, 'X')", P<none, "X">);
  LAYOUTS(m2, "2 of 8", "P('X')", P<"X">);
  LAYOUTS(m2, "2 of 8", "P(None, 'X')", P<none, "X">);
  LAYOUTS(m22, "2x2 of 8", "P('X', 'Y')", P<"X", "Y">);
  LAYOUTS(m22, "2x2 of 8", "P(('Y', 'X'))", P<axes<"Y", "X">>);
  LAYOUTS(m22, "2x2 of 8", "P('Y')", P<"Y">);

  LAYOUTS(mperm, "2x4 ids 0,2,4,6,1,3,5,7", "P('X', 'Y')", P<"X", "Y">);
  LAYOUTS(mperm, "2x4 ids 0,2,4,6,1,3,5,7", "P(('Y', 'X'))", P<axes<"Y", "X">>);
  LAYOUTS(mperm, "2x4 ids 0,2,4,6,1,3,5,7", "P('Y')", P<"Y">);
  LAYOUTS(mperm, "2x4 ids 0,2,4,6,1,3,5,7", "P()", P<>);
#undef LAYOUTS

#define UNEVEN(name, mesh, rank, ...) \
  cs[name] = [=](json const& c) { check_uneven<rank>(named_sharding(mesh, __VA_ARGS__{}), c); }
  UNEVEN("uneven 2x4 P('Y') 6", m24, 1, P<"Y">);
  UNEVEN("uneven 2x4 P('Y') 5x3", m24, 2, P<"Y">);
  UNEVEN("uneven 2x4 P('Y') 3", m24, 1, P<"Y">);
  UNEVEN("uneven 8 P('X') 10", m8, 1, P<"X">);
  UNEVEN("uneven 8 P('X') 7", m8, 1, P<"X">);
  UNEVEN("uneven 2x2x2 P(('X', 'Y', 'Z')) 12x4", m222, 2, P<axes<"X", "Y", "Z">>);
  UNEVEN("uneven 2x4 P('X', 'Y') 3x10", m24, 2, P<"X", "Y">);
  UNEVEN("uneven 4x2 P(None, 'X') 2x7", m42, 2, P<none, "X">);
#undef UNEVEN
}

}  // namespace

TEST_CASE("PartitionSpec, Mesh and NamedSharding: reprs, devices_indices_map, shard_shape, replica ids as JAX's",
          "[jax][sharding]") {
  tessera::runtime rt{8};
  tessera_jax::checks cs;
  add_reprs(cs);
  add_layout_checks(cs);
  CHECK(tessera_jax::check_all(file, cs) == cs.size());
}
