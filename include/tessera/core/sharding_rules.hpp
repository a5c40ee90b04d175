#pragma once
// Sharding propagation at compile time (JAX's explicit-sharding rules), as
// constexpr functions over plain arrays of dim_spec: the result spec of an
// element-wise operation, a reduction and a transpose, and what went wrong
// when there is none. Expression types call these and turn a failure into a
// diagnostic (core/diagnostics.hpp) on Explicit axes, or a reshard on Auto ones.

#include <array>
#include <cstddef>

#include "tessera/core/axis_type.hpp"
#include "tessera/core/mesh.hpp"
#include "tessera/core/partition_spec.hpp"

namespace tessera::detail {

/// What an element-wise combination of two operands found.
enum class combine_error {
  none,
  conflict,       // one dimension sharded on different axes in the two operands
  repeated_axis,  // the merged spec would use one mesh axis in two dimensions
};

/// The result spec of `a op b` (NumPy broadcasting: dimensions aligned from the right), and
/// on Auto axes which operand is resharded to which spec.
template <std::size_t R>
struct combine_result {
  std::array<dim_spec, R> dims{};
  combine_error error = combine_error::none;
  bool explicit_error = false;   // the error involves an Explicit axis: a compile error
  std::size_t dim = 0;           // the result dimension of the (first) error
  dim_spec left{}, right{};      // the two entries that clashed
  bool reshard_left = false;     // Auto: the left operand moves to `left_target`
  bool reshard_right = false;    // Auto: the right operand moves to `right_target`
};

/// Whether any axis of `d` is Explicit in `axes`.
template <std::size_t M>
constexpr bool has_explicit_axis(dim_spec const& d, std::array<mesh_axis, M> const& axes) {
  for (std::size_t i = 0; i < d.count(); ++i)
    for (auto const& a : axes)
      if (a.name == d.axis(i) && a.type == axis_type::explicit_) return true;
  return false;
}

/// Entry of an operand of rank `r` for result dimension `d` of a rank-`R` result (none where
/// the operand has no such dimension: broadcasting adds leading dimensions).
template <std::size_t Rk>
constexpr dim_spec aligned(std::array<dim_spec, Rk> const& s, std::size_t R, std::size_t d) {
  if (d + Rk < R) return dim_spec{};
  return s[d + Rk - R];
}

/// JAX's element-wise rule, per dimension: equal entries keep; None with X gives X; X with Y
/// is a conflict; a merged spec that uses one axis twice is a conflict. `left_wins` picks the
/// operand whose sharding an Auto conflict keeps (the other is resharded).
template <std::size_t RA, std::size_t RB, std::size_t M>
constexpr auto combine_elementwise(std::array<dim_spec, RA> const& a, std::array<dim_spec, RB> const& b,
                                   std::array<mesh_axis, M> const& axes, bool left_wins) {
  constexpr std::size_t R = RA > RB ? RA : RB;
  combine_result<R> r;
  for (std::size_t d = 0; d < R; ++d) {
    dim_spec const x = aligned(a, R, d), y = aligned(b, R, d);
    if (x == y || y.is_none()) {
      r.dims[d] = x;
    } else if (x.is_none()) {
      r.dims[d] = y;
    } else {
      if (r.error == combine_error::none) {
        r.error = combine_error::conflict;
        r.dim = d;
        r.left = x;
        r.right = y;
      }
      r.explicit_error = r.explicit_error || has_explicit_axis(x, axes) || has_explicit_axis(y, axes);
      r.dims[d] = left_wins ? x : y;
      (left_wins ? r.reshard_right : r.reshard_left) = true;
    }
  }
  // An axis used in two dimensions (one from each operand): the losing operand's use goes.
  for (std::size_t d = 0; d < R; ++d)
    for (std::size_t e = 0; e < R; ++e) {
      if (d == e) continue;
      for (std::size_t i = 0; i < r.dims[d].count(); ++i)
        if (r.dims[e].uses(r.dims[d].axis(i))) {
          // Which operand brought the entry of dimension e?
          dim_spec const xe = aligned(a, R, e), ye = aligned(b, R, e);
          bool const e_from_loser = left_wins ? !(xe == r.dims[e]) : !(ye == r.dims[e]);
          if (!e_from_loser) continue;
          if (r.error == combine_error::none) {
            r.error = combine_error::repeated_axis;
            r.dim = e;
            r.left = left_wins ? r.dims[d] : r.dims[e];
            r.right = left_wins ? r.dims[e] : r.dims[d];
          }
          r.explicit_error = r.explicit_error || has_explicit_axis(r.dims[e], axes);
          (left_wins ? r.reshard_right : r.reshard_left) = true;
          r.dims[e] = dim_spec{};
        }
    }
  return r;
}

/// The spec an operand moves to when an Auto conflict is resolved against it: the result's
/// entry wherever the operand's dimension is sharded (None dimensions are sliced in place).
template <std::size_t Rk, std::size_t R>
constexpr std::array<dim_spec, Rk> reshard_target(std::array<dim_spec, Rk> const& s,
                                                  std::array<dim_spec, R> const& result) {
  std::array<dim_spec, Rk> t{};
  for (std::size_t j = 0; j < Rk; ++j) t[j] = s[j].is_none() ? dim_spec{} : result[j + R - Rk];
  return t;
}

/// What a contraction (matmul) of two operands found.
enum class contract_error {
  none,
  batch_conflict,        // a batch dimension sharded on different axes in the two operands
  contracting_conflict,  // the contracting dimension sharded on different axes in the two operands
  repeated_axis,         // the result (or its partial sum) would use one mesh axis twice
};

/// The spec of jnp.matmul(a, b) (ranks RA, RB >= 1): batch dimensions broadcast and combine as
/// element-wise ones; the rows of `a` and the columns of `b` pass through; a contracting
/// dimension sharded on one side (the other side takes the matching slice, free) or on both
/// alike leaves the result partial over its axes (`unreduced`), unless a result dimension uses
/// that axis: then a one-sided contracting dimension is gathered instead (JAX's rule); on
/// different axes it is a conflict. On Auto axes the right operand gives way: `a` and `b` are
/// the specs the operands are resharded to.
template <std::size_t R, std::size_t RA, std::size_t RB>
struct contract_result {
  std::array<dim_spec, R> dims{};  // the result's spec once summed over `unreduced`
  dim_spec unreduced{};            // the mesh axes the local products are partial over
  std::array<dim_spec, RA> a{};    // the spec each operand must have
  std::array<dim_spec, RB> b{};
  contract_error error = contract_error::none;
  bool explicit_error = false;
  std::size_t dim = 0;           // the result dimension of the (first) error
  dim_spec left{}, right{};      // the entries that clashed
};

/// Batch dimensions of a rank-Rk matmul operand.
constexpr std::size_t batch_rank(std::size_t rk) { return rk >= 2 ? rk - 2 : 0; }
/// Rank of matmul's result.
constexpr std::size_t matmul_rank(std::size_t ra, std::size_t rb) {
  std::size_t const nb = batch_rank(ra) > batch_rank(rb) ? batch_rank(ra) : batch_rank(rb);
  return nb + (ra >= 2 ? 1 : 0) + (rb >= 2 ? 1 : 0);
}
/// The contracting dimension of the right operand.
constexpr std::size_t rhs_contracting(std::size_t rb) { return rb >= 2 ? rb - 2 : 0; }

template <std::size_t RA, std::size_t RB, std::size_t M>
constexpr auto contract_rule(std::array<dim_spec, RA> const& a, std::array<dim_spec, RB> const& b,
                             std::array<mesh_axis, M> const& axes) {
  constexpr std::size_t BA = batch_rank(RA), BB = batch_rank(RB), NB = BA > BB ? BA : BB;
  constexpr std::size_t R = matmul_rank(RA, RB);
  contract_result<R, RA, RB> r;
  r.a = a;
  r.b = b;
  auto note = [&](contract_error e, std::size_t d, dim_spec const& x, dim_spec const& y) {
    if (r.error == contract_error::none) {
      r.error = e;
      r.dim = d;
      r.left = x;
      r.right = y;
    }
    r.explicit_error = r.explicit_error || has_explicit_axis(x, axes) || has_explicit_axis(y, axes);
  };
  // Each pass settles one clash by replicating one entry of b; at most RB + 1 passes.
  for (std::size_t pass = 0; pass <= RB + 1; ++pass) {
    std::array<dim_spec, R> dims{};
    std::array<bool, R> from_b{};  // the entry came from b (so b gives way)
    std::array<std::size_t, R> b_dim{};
    bool changed = false;
    for (std::size_t d = 0; d < NB && !changed; ++d) {
      dim_spec const x = d + BA >= NB ? r.a[d + BA - NB] : dim_spec{};
      dim_spec const y = d + BB >= NB ? r.b[d + BB - NB] : dim_spec{};
      b_dim[d] = d + BB - NB;
      if (x == y || y.is_none()) {
        dims[d] = x;
      } else if (x.is_none()) {
        dims[d] = y;
        from_b[d] = true;
      } else {
        note(contract_error::batch_conflict, d, x, y);
        r.b[d + BB - NB] = dim_spec{};
        changed = true;
      }
    }
    if (changed) continue;
    std::size_t d = NB;
    if constexpr (RA >= 2) dims[d++] = r.a[RA - 2];
    if constexpr (RB >= 2) {
      dims[d] = r.b[RB - 1];
      from_b[d] = true;
      b_dim[d] = RB - 1;
    }
    dim_spec const ka = r.a[RA - 1], kb = r.b[rhs_contracting(RB)];
    dim_spec u = ka;
    if (ka == kb || kb.is_none()) {
      u = ka;
    } else if (ka.is_none()) {
      u = kb;
    } else {
      note(contract_error::contracting_conflict, R, ka, kb);
      r.b[rhs_contracting(RB)] = dim_spec{};
      continue;
    }
    // An axis used twice: by two result dimensions, or by a result dimension and the partial sum.
    for (std::size_t i = 0; i < R && !changed; ++i)
      for (std::size_t j = 0; j < R && !changed; ++j)
        for (std::size_t k = 0; i != j && k < dims[i].count() && !changed; ++k)
          if (dims[j].uses(dims[i].axis(k)) && from_b[j]) {
            note(contract_error::repeated_axis, j, dims[i], dims[j]);
            r.b[b_dim[j]] = dim_spec{};
            changed = true;
          }
    for (std::size_t j = 0; j < R && !changed; ++j)
      for (std::size_t k = 0; k < u.count() && !changed; ++k)
        if (dims[j].uses(u.axis(k))) {
          if (ka.is_none() != kb.is_none()) {
            // Sharded on one side only, the contracting dimension gives way to the result
            // dimension (it is gathered), as in JAX's dot_general rule, which shards the result
            // by the free dimensions alone: P('x', None) @ P('x', None) is P('x', None) and
            // P(None, 'y') @ P(None, 'y') is P(None, 'y'), on Explicit axes too.
            if (ka.is_none()) r.b[rhs_contracting(RB)] = dim_spec{};
            else r.a[RA - 1] = dim_spec{};
          } else {
            note(contract_error::repeated_axis, j, u, dims[j]);
            r.b[b_dim[j]] = dim_spec{};  // sharded alike on both sides: b's clashing dimension gives way
          }
          changed = true;
        }
    if (changed) continue;
    r.dims = dims;
    r.unreduced = u;
    return r;
  }
  return r;
}

/// Whether `dims` lists distinct dimensions below `rank`.
template <std::size_t K>
constexpr bool valid_axes(std::array<std::size_t, K> const& dims, std::size_t rank) {
  for (std::size_t i = 0; i < K; ++i) {
    if (dims[i] >= rank) return false;
    for (std::size_t j = 0; j < i; ++j)
      if (dims[i] == dims[j]) return false;
  }
  return true;
}

/// The spec of a reduction over `dims`: the other dimensions keep their entries.
template <std::size_t R, std::size_t K>
constexpr auto reduce_spec(std::array<dim_spec, R> const& s, std::array<std::size_t, K> const& dims) {
  std::array<dim_spec, R - K> out{};
  std::size_t j = 0;
  for (std::size_t i = 0; i < R; ++i) {
    bool reduced = false;
    for (std::size_t k : dims) reduced = reduced || k == i;
    if (!reduced) out[j++] = s[i];
  }
  return out;
}

/// The spec of a transpose: entry i of the result is entry perm[i] of the operand.
template <std::size_t R>
constexpr std::array<dim_spec, R> permute_spec(std::array<dim_spec, R> const& s, std::array<std::size_t, R> const& perm) {
  std::array<dim_spec, R> out{};
  for (std::size_t i = 0; i < R; ++i) out[i] = s[perm[i]];
  return out;
}

/// A spec padded (with None) or taken to `R` entries.
template <std::size_t R, std::size_t K>
constexpr std::array<dim_spec, R> full_spec(std::array<dim_spec, K> const& s) {
  std::array<dim_spec, R> out{};
  for (std::size_t i = 0; i < R && i < K; ++i) out[i] = s[i];
  return out;
}

}  // namespace tessera::detail
