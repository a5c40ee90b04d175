#pragma once
// What moving an array from one layout to another costs, in collectives: the
// vocabulary shared by the plan that explain() prints before anything runs and
// by the counter of the collectives that actually ran. Derived from specs, mesh
// axis sizes and the global shape only, so the plan is known before evaluation.

#include <algorithm>
#include <cstddef>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/fixed_string.hpp"
#include "tessera/core/partition_spec.hpp"

namespace tessera {

/// One collective of a plan or of a run: its kind, its mesh axes, and the bytes each device
/// holds of it (the larger of its input and output block). Kinds use XLA's names:
/// "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute".
struct collective_event {
  /// XLA's name of the collective.
  std::string kind;
  /// The mesh axes it runs over, in mesh order.
  std::vector<std::string> axes;
  /// max(input, output) bytes per device.
  std::size_t bytes_per_device = 0;

  friend bool operator==(collective_event const&, collective_event const&) = default;
  /// `all-gather over ('x',): 4096 bytes per device`
  friend std::ostream& operator<<(std::ostream& os, collective_event const& e) {
    os << e.kind << " over (";
    for (std::size_t i = 0; i < e.axes.size(); ++i) os << (i ? ", " : "") << '\'' << e.axes[i] << '\'';
    if (e.axes.size() == 1) os << ',';
    return os << "): " << e.bytes_per_device << " bytes per device";
  }
};

namespace detail {

/// The mesh as the plan needs it: axis names and sizes, in mesh order.
struct plan_mesh {
  std::vector<std::string> names;
  std::vector<std::size_t> sizes;

  std::size_t index_of(axis_name const& n) const {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == n.view()) return i;
    return names.size();
  }
};

template <class Mesh>
plan_mesh plan_mesh_of(Mesh const& m) {
  plan_mesh p;
  for (std::size_t i = 0; i < Mesh::rank; ++i) {
    p.names.emplace_back(Mesh::axes[i].name.view());
    p.sizes.push_back(static_cast<std::size_t>(m.size(i)));
  }
  return p;
}

/// Elements of the largest block of `shape` laid out by `spec` (ceil division, as JAX's blocks).
inline std::size_t largest_block(std::span<std::size_t const> shape, std::span<dim_spec const> spec,
                                 plan_mesh const& m) {
  std::size_t n = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    std::size_t parts = 1;
    if (d < spec.size())
      for (std::size_t a = 0; a < spec[d].count(); ++a) {
        std::size_t const i = m.index_of(spec[d].axis(a));
        parts *= i < m.sizes.size() ? m.sizes[i] : 1;
      }
    n *= (shape[d] + parts - 1) / parts;
  }
  return n;
}

/// Whether entry `d` uses the axis named `axis`.
inline bool entry_uses(dim_spec const& d, std::string const& axis) {
  for (std::size_t a = 0; a < d.count(); ++a)
    if (d.axis(a).view() == axis) return true;
  return false;
}

/// Where mesh axis `axis` shards a spec: the dimension and the position in its entry, or none.
struct axis_place {
  bool found = false;
  std::size_t dim = 0, at = 0;
};
inline axis_place place_of(std::span<dim_spec const> spec, std::string const& axis) {
  for (std::size_t d = 0; d < spec.size(); ++d)
    for (std::size_t a = 0; a < spec[d].count(); ++a)
      if (spec[d].axis(a).view() == axis) return {true, d, a};
  return {};
}

/// Whether axis `axis` keeps its blocks: same dimension, and the same axes before it in the entry.
inline bool axis_stays(std::span<dim_spec const> from, std::span<dim_spec const> to, std::string const& axis) {
  axis_place const f = place_of(from, axis), t = place_of(to, axis);
  if (!f.found || !t.found || f.dim != t.dim || f.at != t.at) return false;
  for (std::size_t a = 0; a < f.at; ++a)
    if (!(from[f.dim].axis(a) == to[t.dim].axis(a))) return false;
  return true;
}

/// The collectives that take an array of `shape` from layout `from` (summed over the mesh axes
/// `unreduced` where that is not empty: a partial result) to layout `to`, cheapest first:
/// an axis that only appears in `to` is a local slice (free); one that only leaves is an
/// all-gather; one that moves to another dimension an all-to-all; a partial axis that shards
/// the destination a reduce-scatter, one that does not an all-reduce.
inline std::vector<collective_event> reshard_plan(std::span<std::size_t const> shape, std::span<dim_spec const> from,
                                                  dim_spec const& unreduced, std::span<dim_spec const> to,
                                                  plan_mesh const& m, std::size_t elem_bytes) {
  std::size_t const bytes =
      elem_bytes * std::max(largest_block(shape, from, m), largest_block(shape, to, m));
  collective_event reduce_scatter{"reduce-scatter", {}, bytes}, all_reduce{"all-reduce", {}, bytes},
      all_gather{"all-gather", {}, bytes}, all_to_all{"all-to-all", {}, bytes};
  for (std::size_t i = 0; i < m.names.size(); ++i) {
    std::string const& axis = m.names[i];
    axis_place const f = place_of(from, axis), t = place_of(to, axis);
    if (entry_uses(unreduced, axis)) {
      (t.found ? reduce_scatter : all_reduce).axes.push_back(axis);
    } else if (f.found && !t.found) {
      all_gather.axes.push_back(axis);
    } else if (f.found && !axis_stays(from, to, axis)) {
      all_to_all.axes.push_back(axis);
    }
  }
  std::vector<collective_event> out;
  for (auto* e : {&reduce_scatter, &all_reduce, &all_to_all, &all_gather})
    if (!e->axes.empty()) out.push_back(std::move(*e));
  return out;
}

}  // namespace detail
}  // namespace tessera
