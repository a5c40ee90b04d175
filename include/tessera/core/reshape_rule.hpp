#pragma once
// JAX's sharding rule for reshape (jax/_src/lax/lax.py, _reshape_sharding_rule and its helpers
// _split_on_one_axis, _merge_on_one_axis, split_partitions), ported step for step so that the
// specs it gives, and the reshapes it refuses, are JAX's. It needs the sizes, which tessera
// knows only at run time, so it runs then: reshape uses it to tell a reshape whose blocks stay
// where they are from one that moves data, and tests compare it with jax.typeof.

#include <cstddef>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/core/partition_spec.hpp"

namespace tessera::detail {

/// JAX's reshape error text (raise_reshape_error), with the operand and new sizes described.
inline std::string reshape_refusal(std::string const& operand, std::vector<std::size_t> const& new_sizes) {
  std::ostringstream os;
  os << "This reshape is not supported. Please specify the sharding of the output via the `out_sharding` argument "
        "of jax.lax.reshape. Got operand type: "
     << operand << ", new sizes: (";
  for (std::size_t i = 0; i < new_sizes.size(); ++i) os << (i ? ", " : "") << new_sizes[i];
  os << (new_sizes.size() == 1 ? ",)" : ")");
  return os.str();
}

/// One entry of _split_on_one_axis's answer: a size kept as it is, or the sizes it splits into.
struct split_piece {
  bool split = false;
  std::vector<std::size_t> sizes;  // one size when not split
};

/// _split_on_one_axis(op_shape, new_sizes): `error` for a second split (ReshapeExplicitError),
/// no value when it is not a split of one dimension, else one piece per operand dimension.
struct split_answer {
  bool error = false;
  std::optional<std::vector<split_piece>> pieces;
};

inline std::size_t product(std::vector<std::size_t> const& v) {
  std::size_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

inline split_answer split_on_one_axis(std::vector<std::size_t> op_shape, std::vector<std::size_t> new_sizes) {
  if (new_sizes.size() <= op_shape.size()) return {};
  std::size_t const orig_rank = op_shape.size();
  std::size_t num_1s = 0;
  while (!op_shape.empty() && !new_sizes.empty() && op_shape.back() == 1 && new_sizes.back() == 1) {
    ++num_1s;
    op_shape.pop_back();
    new_sizes.pop_back();
  }
  std::size_t i = 0, j = 0, count = 0;
  std::vector<split_piece> out;
  while (j < new_sizes.size()) {
    if (i >= op_shape.size()) return {};  // Python would raise IndexError: not a split JAX handles
    if (op_shape[i] == new_sizes[j]) {
      out.push_back({false, {op_shape[i]}});
    } else {
      if (++count > 1) return {true, std::nullopt};
      std::vector<std::size_t> temp{new_sizes[j]};
      std::size_t next_j = j + 1, next_i = i + 1;
      while (product(temp) != op_shape[i] || (next_j < new_sizes.size() && new_sizes[next_j] == 1)) {
        if (product(temp) > op_shape[i]) return {};
        if (product(temp) == op_shape[i] && next_i < op_shape.size() && next_j < new_sizes.size() &&
            new_sizes[next_j] == op_shape[next_i])
          break;
        if (++j >= new_sizes.size()) return {};
        temp.push_back(new_sizes[j]);
        ++next_j;
      }
      out.push_back({true, temp});
    }
    ++i;
    ++j;
  }
  for (std::size_t k = 0; k < num_1s; ++k) out.push_back({false, {1}});
  if (out.size() != orig_rank) return {};
  return {false, std::move(out)};
}

/// The answer of the rule: the result's spec, or JAX's refusal.
struct reshape_rule_answer {
  std::optional<std::vector<dim_spec>> spec;
  bool refused() const { return !spec.has_value(); }
};

/// split_partitions: the mesh axes of `axes` dealt major-first over pieces of sizes `out`;
/// false where a piece does not divide (JAX's reshape error) or axes are left over (JAX asserts).
template <class AxisSize>
bool split_partitions(std::vector<axis_name> const& axes, std::vector<std::size_t> const& out, AxisSize const& axis_size,
                      std::vector<dim_spec>& result) {
  std::size_t next = 0;
  for (std::size_t o : out) {
    dim_spec d;
    while (o > 1) {
      if (next >= axes.size()) break;
      std::size_t const n = axis_size(axes[next]);
      if (n == 0 || o % n != 0) return false;
      o /= n;
      d.push(axes[next++]);
    }
    result.push_back(d);
  }
  return next == axes.size();
}

/// _reshape_sharding_rule without out_sharding (dimensions=None): the spec JAX gives a reshape
/// of an operand of shape `in` and spec `spec` to `out`, or its refusal. `axis_size(name)` is a
/// mesh axis's size.
template <class AxisSize>
reshape_rule_answer reshape_rule(std::vector<std::size_t> const& in, std::vector<std::size_t> const& out,
                                 std::vector<dim_spec> const& spec, AxisSize const& axis_size) {
  bool replicated = true;
  for (auto const& s : spec) replicated = replicated && s.is_none();
  if (replicated) return {std::vector<dim_spec>(out.size())};
  auto non_1s = [](std::vector<std::size_t> const& v) {
    std::vector<std::size_t> r;
    for (auto x : v)
      if (x != 1) r.push_back(x);
    return r;
  };
  if (non_1s(in) == non_1s(out)) {  // _split_merge_singleton_dim_sharding_rule
    std::vector<dim_spec> kept, result;
    for (std::size_t i = 0; i < in.size(); ++i)
      if (in[i] != 1) kept.push_back(spec[i]);
    std::size_t k = 0;
    for (auto n : out) result.push_back(n == 1 ? dim_spec{} : kept[k++]);
    return {result};
  }
  auto axes_of = [](dim_spec const& d) {
    std::vector<axis_name> a;
    for (std::size_t i = 0; i < d.count(); ++i) a.push_back(d.axis(i));
    return a;
  };
  auto const split = split_on_one_axis(in, out);
  if (split.error) return {};
  if (split.pieces) {  // _split_an_axis_sharding_rule
    std::vector<dim_spec> result;
    for (std::size_t i = 0; i < split.pieces->size(); ++i) {
      auto const& p = (*split.pieces)[i];
      if (!p.split) {
        result.push_back(spec[i]);
      } else if (spec[i].is_none()) {
        for (std::size_t k = 0; k < p.sizes.size(); ++k) result.emplace_back();
      } else if (!split_partitions(axes_of(spec[i]), p.sizes, axis_size, result)) {
        return {};
      }
    }
    return {result};
  }
  if (out.size() < in.size()) {  // _merge_on_one_axis: the split check run in reverse
    auto const merge = split_on_one_axis(out, in);
    if (merge.error) return {};
    if (merge.pieces) {  // _merge_an_axis_sharding_rule
      std::vector<dim_spec> result;
      std::size_t next = 0;
      for (std::size_t j = 0; j < merge.pieces->size(); ++j) {
        auto const& p = (*merge.pieces)[j];
        if (!p.split) {
          result.push_back(spec[next++]);
          continue;
        }
        // The merged dims' specs flattened, trailing Nones stripped: a None left before a
        // sharded dim (an unsharded major dim above a sharded minor one) is refused.
        std::vector<std::vector<axis_name>> parts;
        for (std::size_t k = 0; k < p.sizes.size(); ++k) parts.push_back(axes_of(spec[next++]));
        while (!parts.empty() && parts.back().empty()) parts.pop_back();
        if (parts.empty()) {
          result.emplace_back();
          continue;
        }
        std::vector<axis_name> flat;
        for (auto const& q : parts) {
          if (q.empty()) return {};
          flat.insert(flat.end(), q.begin(), q.end());
        }
        if (!split_partitions(flat, {out[j]}, axis_size, result)) return {};
      }
      return {result};
    }
  }
  return {};
}

}  // namespace tessera::detail
