#pragma once
// grad, value_and_grad and vjp through shard_map (JAX differentiates shard_map by transposing
// the body, collectives included). A shard_map called with tracers runs its body on every
// device with local tracers (autodiff/local_tracer.hpp): each device records its own program.
// Its results are recorded on the grad tape as one step whose backward pass is a second
// shard_map: the output cotangents go in laid out by out_specs, every device runs its tape in
// reverse (the collectives' transposes are collectives of that second shard_map), and the
// arguments' cotangents come out laid out by in_specs, then join their tracers' cotangents.
//
// Axes: an argument's block varies over the mesh axes its in_spec names. A result invariant
// along an axis its out_spec names is implicitly broadcast there, so its cotangent is summed
// over that axis; an argument's cotangent is summed over the axes its contributions vary over
// and its in_spec does not name (the gradient of a replicated parameter: one all-reduce).

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/autodiff/local_tracer.hpp"
#include "tessera/autodiff/tracer.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/runtime/collective_counter.hpp"
#include "tessera/core/named_sharding.hpp"
#include "tessera/parallel/shard_map.hpp"

namespace tessera {
namespace detail {

template <class A>
struct traced_argument<tracer<A>> : std::true_type {};

namespace ad {

/// The bits of the mesh axes that Spec names (in Mesh's axis order).
template <class Mesh, class Spec>
constexpr axis_mask spec_mask() {
  axis_mask m = 0;
  for (auto const& d : Spec::dims)
    for (std::size_t a = 0; a < d.count(); ++a)
      for (std::size_t i = 0; i < Mesh::rank; ++i)
        if (Mesh::axes[i].name.view() == d.axis(a).view()) m |= axis_mask{1} << i;
  return m;
}

/// One device's recorded program: its tape, and the nodes of its arguments and results
/// (local_node<T, N> of each one's type).
struct device_program {
  local_tape tape;
  std::vector<std::shared_ptr<void>> inputs;
  std::vector<std::shared_ptr<void>> outputs;
};

/// Sets the calling thread's local tape for the lifetime of the guard.
class local_tape_guard {
 public:
  explicit local_tape_guard(local_tape* t) : previous_(current_local_tape) { current_local_tape = t; }
  ~local_tape_guard() { current_local_tape = previous_; }
  local_tape_guard(local_tape_guard const&) = delete;
  local_tape_guard& operator=(local_tape_guard const&) = delete;

 private:
  local_tape* previous_;
};

/// The array an argument passes to the shard_map: a tracer's primal, an array itself.
template <class X>
decltype(auto) primal_argument(X const& x) {
  if constexpr (traced_value<X>) return x.primal();
  else return (x);
}
template <class X>
using primal_argument_t = std::remove_cvref_t<decltype(primal_argument(std::declval<X const&>()))>;

/// A device's value as a shard_map result: a number for rank 0, else a block that owns it.
template <class T, std::size_t N>
auto as_shard_result(local_value<T, N> v) {
  if constexpr (N == 0) return v.v.empty() ? T(0) : v.v[0];
  else return own_as_block<untracked_vma>(std::move(v));
}

/// A block (or number) a shard_map body received, as a local value.
template <class T, std::size_t N, class B>
local_value<T, N> copy_block(B const& b) {
  if constexpr (N == 0) {
    if constexpr (std::is_arithmetic_v<B>) return local_value<T, 0>{std::vector<T>(1, static_cast<T>(b)), {}};
    else return local_value<T, 0>{std::vector<T>(1, static_cast<T>(b.data()[0])), {}};
  } else {
    shape_t<N> s{};
    for (std::size_t i = 0; i < N; ++i) s[i] = static_cast<std::size_t>(b.shape()[i]);
    return local_value<T, N>{std::vector<T>(b.data(), b.data() + element_count(s)), s};
  }
}

template <class Spec>
std::string spec_string() {
  std::ostringstream os;
  os << Spec{};
  return os.str();
}

}  // namespace ad

template <class... Args>
struct traced_shard_map {
  static_assert(((traced_value<Args> || is_array<Args>::value) && ...),
                "tessera::shard_map under grad: every argument must be a tessera array or a traced value; put host "
                "data on the devices first (tessera::device_put)");

  template <class F, class Mesh, class... In, class... Out, bool CheckVma>
  static auto run(shard_map_fn<F, Mesh, in_specs_t<In...>, out_specs_t<Out...>, CheckVma> const& sm, Args const&... args) {
    if (ad::planning != nullptr) return plan(sm, args...);
    return traced(sm, args...);
  }

  /// The forward pass on every device, recorded, and the backward step on the tape.
  template <class F, class Mesh, class... In, class... Out, bool CheckVma>
  static auto traced(shard_map_fn<F, Mesh, in_specs_t<In...>, out_specs_t<Out...>, CheckVma> const& sm, Args const&... args) {
    using namespace ad;
    std::shared_ptr<tape> const t = tape_of(args...);
    Mesh const& mesh = sm.mesh();
    auto programs = std::make_shared<std::vector<device_program>>(mesh.num_devices());
    static constexpr std::array<axis_mask, sizeof...(In)> in_masks{spec_mask<Mesh, In>()...};
    static constexpr std::array<axis_mask, sizeof...(Out)> out_masks{spec_mask<Mesh, Out>()...};
    using in_types = std::tuple<primal_argument_t<Args>...>;
    constexpr std::size_t n_in = sizeof...(In);
    constexpr std::size_t n_out = sizeof...(Out);

    // Forward: every device records its program on its own tape.
    F const& body = sm.body();
    auto forward = [programs, &body](auto const&... blocks) {
      device_program& p = (*programs)[frame_for("shard_map").pos];
      local_tape_guard guard(&p.tape);
      p.inputs.assign(n_in, nullptr);
      p.outputs.assign(n_out, nullptr);
      auto bt = std::forward_as_tuple(blocks...);
      auto leaves = [&]<std::size_t... K>(std::index_sequence<K...>) {
        return std::make_tuple([&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
          using A = std::tuple_element_t<I, in_types>;
          using T = typename A::value_type;
          auto n = local_leaf(copy_block<T, A::rank>(std::get<I>(bt)), in_masks[I]);
          p.inputs[I] = n;
          return local_tracer<T, A::rank>(std::move(n));
        }(std::integral_constant<std::size_t, K>{})...);
      }(std::make_index_sequence<n_in>{});
      auto r = results_as_tuple(tessera::detail::apply(body, leaves));
      return [&]<std::size_t... J>(std::index_sequence<J...>) {
        return std::make_tuple([&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
          using R = std::remove_cvref_t<std::tuple_element_t<I, decltype(r)>>;
          static_assert(local_traced<R>,
                        "tessera::shard_map under grad: a result of the body must be computed from its arguments "
                        "with tessera's operations (a local tracer); return the value, not a copy into an xtensor");
          auto const& node = std::get<I>(r).node();
          if (CheckVma && (node->vma & ~out_masks[I]) != 0)
            throw std::invalid_argument(
                "tessera::shard_map under grad: result " + std::to_string(I) + " varies over mesh axes that out_specs[" +
                std::to_string(I) + "] = " + spec_string<std::tuple_element_t<I, std::tuple<Out...>>>() +
                " does not name; reduce it over them (psum) or name them in the out_spec");
          p.outputs[I] = node;
          return as_shard_result(node->value);
        }(std::integral_constant<std::size_t, J>{})...);
      }(std::make_index_sequence<n_out>{});
    };
    auto outs = [&] {
      auto o = shard_map_fn<decltype(forward), Mesh, in_specs_t<In...>, out_specs_t<Out...>, false>(forward, mesh)(
          primal_argument(args)...);
      if constexpr (n_out == 1) return std::make_tuple(std::move(o));
      else return o;
    }();
    using out_types = decltype(outs);

    // The results' nodes on the grad tape.
    auto nodes = [&]<std::size_t... J>(std::index_sequence<J...>) {
      return std::make_tuple([&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
        using A = std::tuple_element_t<I, out_types>;
        auto const& o = std::get<I>(outs);
        auto n = std::make_shared<node<A>>(t, o.sharding(), o.shape());
        n->value.emplace(o);
        t->on_reset([w = std::weak_ptr<node<A>>(n)] {
          if (auto q = w.lock()) q->ct.clear();
        });
        return n;
      }(std::integral_constant<std::size_t, J>{})...);
    }(std::make_index_sequence<n_out>{});
    t->on_reset([programs] {
      for (auto& p : *programs) p.tape.reset();
    });

    // Backward: the output cotangents through every device's tape, in a second shard_map.
    t->record([programs, nodes, mesh, args...] {
      auto cts = [&]<std::size_t... J>(std::index_sequence<J...>) {
        return std::make_tuple(std::get<J>(nodes)->ct.take()...);
      }(std::make_index_sequence<n_out>{});
      bool const any = tessera::detail::apply([](auto const&... c) { return (c.has_value() || ...); }, cts);
      if (!any) return;  // nothing depends on the results
      auto backward = [programs](auto const&... blocks) {
        device_program& p = (*programs)[frame_for("shard_map").pos];
        local_tape_guard guard(&p.tape);
        auto bt = std::forward_as_tuple(blocks...);
        [&]<std::size_t... J>(std::index_sequence<J...>) {
          ([&] {
            using A = std::tuple_element_t<J, out_types>;
            using T = typename A::value_type;
            auto n = std::static_pointer_cast<local_node<T, A::rank>>(p.outputs[J]);
            n->add(out_masks[J], copy_block<T, A::rank>(std::get<J>(bt)));
          }(), ...);
        }(std::make_index_sequence<n_out>{});
        p.tape.run();
        return [&]<std::size_t... K>(std::index_sequence<K...>) {
          return std::make_tuple([&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
            using A = std::tuple_element_t<I, in_types>;
            using T = typename A::value_type;
            auto n = std::static_pointer_cast<local_node<T, A::rank>>(p.inputs[I]);
            local_value<T, A::rank> g = n->has_cotangent() ? n->take() : make_value<T>(n->value.shape);
            return as_shard_result(std::move(g));
          }(std::integral_constant<std::size_t, K>{})...);
        }(std::make_index_sequence<n_in>{});
      };
      auto ct_arrays = [&]<std::size_t... J>(std::index_sequence<J...>) {
        return std::make_tuple([&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
          using A = std::tuple_element_t<I, out_types>;
          auto& c = std::get<I>(cts);
          if (c) return std::move(*c);
          auto const& n = *std::get<I>(nodes);
          return as_array<A>(layout_only<A>(n.ct.sharding(), n.ct.shape()));
        }(std::integral_constant<std::size_t, J>{})...);
      }(std::make_index_sequence<n_out>{});
      auto grads = [&] {
        auto g = tessera::detail::apply(
            [&](auto const&... c) {
              return shard_map_fn<decltype(backward), Mesh, in_specs_t<Out...>, out_specs_t<In...>, false>(backward,
                                                                                                             mesh)(c...);
            },
            ct_arrays);
        if constexpr (n_in == 1) return std::make_tuple(std::move(g));
        else return g;
      }();
      auto arg_tuple = std::forward_as_tuple(args...);
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        (contribute(std::get<K>(arg_tuple), [&] { return std::get<K>(grads); }), ...);
      }(std::make_index_sequence<n_in>{});
    });

    auto tracers = [&]<std::size_t... J>(std::index_sequence<J...>) {
      return std::make_tuple(tracer<std::tuple_element_t<J, out_types>>(std::get<J>(nodes))...);
    }(std::make_index_sequence<n_out>{});
    if constexpr (n_out == 1) return std::get<0>(std::move(tracers));
    else return tracers;
  }

  /// explain() of a gradient through shard_map: a body's collectives are known only when it runs
  /// (tessera does not trace C++), so the same program runs on zeros of the arguments' shapes and
  /// layouts, forward and backward, and the collectives it made go into the plan, the forward
  /// ones now and the backward ones when the planned backward pass reaches this step.
  template <class F, class Mesh, class... In, class... Out, bool CheckVma>
  static auto plan(shard_map_fn<F, Mesh, in_specs_t<In...>, out_specs_t<Out...>, CheckVma> const& sm, Args const&... args) {
    using namespace ad;
    std::vector<collective_event>* const sink = planning;
    std::shared_ptr<tape> const outer = tape_of(args...);
    struct restore {
      std::vector<collective_event>* sink;
      ~restore() { planning = sink; }
    } const guard{sink};
    planning = nullptr;  // the run below is real
    auto const stand_in = [](auto const& a) {
      using X = std::remove_cvref_t<decltype(a)>;
      if constexpr (traced_value<X>) return filled<typename X::array_type>(a.sharding(), a.shape(), 0);
      else return a;
    };
    auto inner = std::make_shared<tape>();
    auto const traced_args = std::make_tuple([&](auto const& a) {
      using X = std::remove_cvref_t<decltype(a)>;
      if constexpr (traced_value<X>) return leaf(inner, stand_in(a));
      else return a;
    }(args)...);
    std::vector<collective_event> forward, backward;
    auto outs = [&] {
      collective_counter counter;
      auto o = tessera::detail::apply(
          [&](auto const&... v) { return traced_shard_map<std::remove_cvref_t<decltype(v)>...>::traced(sm, v...); }, traced_args);
      forward = counter.events();
      return o;
    }();
    auto outs_tuple = [&] {
      if constexpr (sizeof...(Out) == 1) return std::make_tuple(outs);
      else return outs;
    }();
    {
      collective_counter counter;
      tessera::detail::apply([](auto const&... o) { (o.node()->ct.add(filled<typename std::remove_cvref_t<decltype(o)>::array_type>(o.sharding(), o.shape(), 0)), ...); },
                 outs_tuple);
      inner->run();
      backward = counter.events();
    }
    sink->insert(sink->end(), forward.begin(), forward.end());
    // The outer program: results holding no blocks, and a backward step that plans the above.
    auto nodes = tessera::detail::apply(
        [&](auto const&... o) {
          return std::make_tuple([&] {
            using A = typename std::remove_cvref_t<decltype(o)>::array_type;
            auto n = std::make_shared<node<A>>(outer, o.sharding(), o.shape());
            n->value.emplace(placeholder<A>(o.sharding(), o.shape()));
            return n;
          }()...);
        },
        outs_tuple);
    outer->record([nodes, backward, args...] {
      bool const any = tessera::detail::apply([](auto const&... n) { return (n->ct.take().has_value() || ...); }, nodes);
      if (!any || planning == nullptr) return;
      planning->insert(planning->end(), backward.begin(), backward.end());
      auto const planned_cotangent = [](auto const& a) {
        using X = std::remove_cvref_t<decltype(a)>;
        if constexpr (traced_value<X>)
          contribute(a, [&] { return placeholder<typename X::array_type>(a.sharding(), a.shape()); });
      };
      (planned_cotangent(args), ...);
    });
    auto tracers = tessera::detail::apply(
        [](auto const&... n) { return std::make_tuple(tracer_of(n)...); },
        nodes);
    if constexpr (sizeof...(Out) == 1) return std::get<0>(std::move(tracers));
    else return tracers;
  }
};

}  // namespace detail
}  // namespace tessera
