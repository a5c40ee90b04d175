#pragma once
// jnp.einsum for one and two operands, its subscripts parsed at compile time:
// `tessera::einsum<"bqhd,bkhd->bhqk">(q, k)`. It is lowered as jnp.einsum lowers it: each
// operand's indices that appear nowhere else are summed first (tessera::sum), then one
// dot_general contracts the rest (batch dimensions: indices in both operands and the output;
// contracting: in both, not in the output), its result laid out in the output's order; a single
// operand is summed and transposed. The product's sharding is JAX's dot_general rule
// (jax/_src/lax/lax.py, _dot_general_sharding_rule), decided here at compile time.
//
// Repeated indices within one operand (a diagonal, "ii->i") and ellipses are not provided: both
// are compile errors in our words.

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/queued_build.hpp"
#include "tessera/autodiff/tracer.hpp"
#include "tessera/core/diagnostics.hpp"
#include "tessera/core/sharding_rules.hpp"
#include "tessera/expr/computed.hpp"
#include "tessera/expr/contraction.hpp"
#include "tessera/expr/functions.hpp"
#include "tessera/expr/matmul.hpp"
#include "tessera/expr/partial_sum_node.hpp"
#include "tessera/runtime/gemm.hpp"

namespace tessera {

/// The subscripts of einsum as a template argument (`einsum<"ij,jk->ik">`), so that they are
/// parsed, and checked against the operands' ranks, at compile time.
template <std::size_t N>
struct einsum_subscripts {
  char chars[N]{};
  constexpr einsum_subscripts(char const (&s)[N]) {  // NOLINT: implicit from literals by design
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
  constexpr std::string_view view() const { return {chars, N - 1}; }
};

namespace detail {

inline constexpr std::size_t einsum_max_rank = 26;

/// The indices of one operand (or of the output), in order.
struct einsum_term {
  std::array<char, einsum_max_rank> labels{};
  std::size_t rank = 0;
  constexpr bool has(char c) const {
    for (std::size_t i = 0; i < rank; ++i)
      if (labels[i] == c) return true;
    return false;
  }
  constexpr std::size_t find(char c) const {
    for (std::size_t i = 0; i < rank; ++i)
      if (labels[i] == c) return i;
    return rank;
  }
  constexpr void push(char c) { labels[rank++] = c; }
};

/// What is wrong with a subscript string (checked before the operands are looked at).
enum class einsum_error {
  none,
  bad_character,          // not a letter, ',', '->' or a space
  ellipsis,               // '...': not provided
  arrow,                  // '-' without '>', '>' alone, or two '->'
  too_many_operands,      // three or more terms: not provided
  too_many_indices,       // a term longer than einsum_max_rank
  output_index_missing,   // an output index in no operand
  output_index_repeated,  // an output index written twice
  diagonal,               // an index repeated within one operand: not provided
};

/// A parsed subscript string: the operands' terms and the output's (implicit mode: the indices
/// that appear once, in alphabetical order, as NumPy's einsum).
struct einsum_labels {
  std::size_t operands = 0;
  einsum_term a{}, b{}, out{};
  einsum_error error = einsum_error::none;
  char index = 0;  // the offending index or character
};

constexpr bool einsum_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

constexpr einsum_labels parse_einsum(std::string_view s) {
  einsum_labels r;
  auto fail = [&](einsum_error e, char c) {
    if (r.error == einsum_error::none) {
      r.error = e;
      r.index = c;
    }
  };
  std::size_t arrow = s.size();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '-') {
      if (i + 1 >= s.size() || s[i + 1] != '>' || arrow != s.size()) fail(einsum_error::arrow, '-');
      else arrow = i;
      ++i;
    } else if (s[i] == '>') {
      fail(einsum_error::arrow, '>');
    }
  }
  einsum_term terms[3]{};
  std::size_t n = 1;
  for (std::size_t i = 0; i < arrow && i < s.size(); ++i) {
    char const c = s[i];
    if (c == ' ') continue;
    if (c == ',') {
      if (++n > 2) fail(einsum_error::too_many_operands, ',');
      continue;
    }
    if (c == '.') fail(einsum_error::ellipsis, '.');
    else if (!einsum_letter(c)) fail(einsum_error::bad_character, c);
    else if (n <= 2 && terms[n - 1].rank >= einsum_max_rank) fail(einsum_error::too_many_indices, c);
    else if (n <= 2) terms[n - 1].push(c);
  }
  r.operands = n;
  r.a = terms[0];
  r.b = terms[1];
  if (r.error != einsum_error::none) return r;
  for (einsum_term const* t : {&r.a, &r.b})
    for (std::size_t i = 0; i < t->rank; ++i)
      if (t->find(t->labels[i]) != i) fail(einsum_error::diagonal, t->labels[i]);
  if (arrow == s.size()) {
    // Implicit output: the indices that appear once, sorted (ASCII, as NumPy's parser).
    for (char c = 'A'; c <= 'z'; ++c) {
      if (!einsum_letter(c)) continue;
      std::size_t k = 0;
      for (einsum_term const* t : {&r.a, &r.b}) k += t->has(c) ? std::size_t{1} : std::size_t{0};
      if (k == 1) r.out.push(c);
    }
  } else {
    for (std::size_t i = arrow + 2; i < s.size(); ++i) {
      char const c = s[i];
      if (c == ' ') continue;
      if (c == '.') fail(einsum_error::ellipsis, '.');
      else if (!einsum_letter(c)) fail(einsum_error::bad_character, c);
      else if (r.out.has(c)) fail(einsum_error::output_index_repeated, c);
      else if (!r.a.has(c) && !r.b.has(c)) fail(einsum_error::output_index_missing, c);
      else if (r.out.rank >= einsum_max_rank) fail(einsum_error::too_many_indices, c);
      else r.out.push(c);
    }
  }
  return r;
}

/// The dimensions of `t` whose index is in neither `other` nor `out`: summed first.
constexpr einsum_term einsum_summed(einsum_term const& t, einsum_term const& other, einsum_term const& out) {
  einsum_term r;
  for (std::size_t i = 0; i < t.rank; ++i)
    if (!other.has(t.labels[i]) && !out.has(t.labels[i])) r.push(static_cast<char>(i));  // positions
  return r;
}
/// `t` without those dimensions.
constexpr einsum_term einsum_kept(einsum_term const& t, einsum_term const& other, einsum_term const& out) {
  einsum_term r;
  for (std::size_t i = 0; i < t.rank; ++i)
    if (other.has(t.labels[i]) || out.has(t.labels[i])) r.push(t.labels[i]);
  return r;
}

/// What JAX's dot_general sharding rule refuses on Explicit axes.
enum class einsum_sharding_error {
  none,
  batch,        // a batch index sharded differently in the two operands
  contracting,  // a contracting index sharded in both operands
  repeated,     // the result would use one mesh axis twice
};

template <std::size_t RA, std::size_t RB, std::size_t R>
struct einsum_rule_result {
  std::array<dim_spec, RA> a{};    // the spec each operand is moved to
  std::array<dim_spec, RB> b{};
  std::array<dim_spec, R> dims{};  // the result's spec, in the output's order
  dim_spec unreduced{};            // the mesh axes the local products are partial sums over
  einsum_sharding_error error = einsum_sharding_error::none;
  bool explicit_error = false;
  char index = 0;
  dim_spec left{}, right{};
};

/// JAX's dot_general rule for the product of a (indices L.a) and b (L.b) into L.out: batch
/// dimensions must be sharded alike; a contracting dimension may be sharded on one side (the
/// other side takes the matching slice and the local products are partial sums over its axes,
/// summed when the result is used), not on both; the result is sharded as the batch and free
/// dimensions are, and must not use a mesh axis twice. A contracting axis that the result (or
/// another contracting index) uses too is gathered instead, as XLA does. On Auto axes every
/// conflict is settled by resharding (b gives way), and a contracting index sharded alike on
/// both sides stays partial.
template <std::size_t RA, std::size_t RB, std::size_t R, std::size_t M>
constexpr auto einsum_rule(einsum_labels const& L, std::array<dim_spec, RA> const& sa,
                           std::array<dim_spec, RB> const& sb, std::array<mesh_axis, M> const& axes) {
  einsum_rule_result<RA, RB, R> r;
  r.a = sa;
  r.b = sb;
  auto note = [&](einsum_sharding_error e, char c, dim_spec const& x, dim_spec const& y) {
    if (r.error == einsum_sharding_error::none) {
      r.error = e;
      r.index = c;
      r.left = x;
      r.right = y;
    }
    r.explicit_error = r.explicit_error || has_explicit_axis(x, axes) || has_explicit_axis(y, axes);
  };
  for (std::size_t i = 0; i < RA; ++i) {
    char const c = L.a.labels[i];
    std::size_t const j = L.b.find(c);
    if (j == RB) continue;
    dim_spec const x = r.a[i], y = r.b[j];
    if (L.out.has(c)) {
      if (!(x == y)) {
        note(einsum_sharding_error::batch, c, x, y);
        if (x.is_none()) r.a[i] = y;
        else r.b[j] = x;
      }
    } else if (!x.is_none() && !y.is_none()) {
      note(einsum_sharding_error::contracting, c, x, y);
      if (!(x == y)) r.b[j] = dim_spec{};
    }
  }
  // The result's dimensions in JAX's order (batch, a's free, b's free): a later one that
  // reuses an axis is the error, and on Auto axes the one replicated.
  std::array<axis_name, 4 * (RA + RB) + 1> used{};
  std::size_t nused = 0;
  auto uses_any = [&](dim_spec const& d) {
    for (std::size_t k = 0; k < d.count(); ++k)
      for (std::size_t u = 0; u < nused; ++u)
        if (used[u] == d.axis(k)) return true;
    return false;
  };
  auto take = [&](dim_spec const& d) {
    for (std::size_t k = 0; k < d.count(); ++k) used[nused++] = d.axis(k);
  };
  auto result_dim = [&](bool in_a, std::size_t pos) {
    char const c = in_a ? L.a.labels[pos] : L.b.labels[pos];
    dim_spec const d = in_a ? r.a[pos] : r.b[pos];
    if (uses_any(d)) {
      note(einsum_sharding_error::repeated, c, d, d);
      if (in_a) r.a[pos] = dim_spec{};
      else r.b[pos] = dim_spec{};
      if (in_a && L.b.has(c)) r.b[L.b.find(c)] = dim_spec{};
    } else {
      take(d);
    }
  };
  for (std::size_t i = 0; i < RA; ++i)
    if (L.out.has(L.a.labels[i]) && L.b.has(L.a.labels[i])) result_dim(true, i);
  for (std::size_t i = 0; i < RA; ++i)
    if (L.out.has(L.a.labels[i]) && !L.b.has(L.a.labels[i])) result_dim(true, i);
  for (std::size_t j = 0; j < RB; ++j)
    if (L.out.has(L.b.labels[j]) && !L.a.has(L.b.labels[j])) result_dim(false, j);
  for (std::size_t i = 0; i < RA; ++i) {
    char const c = L.a.labels[i];
    std::size_t const j = L.b.find(c);
    if (j == RB || L.out.has(c)) continue;
    dim_spec const u = r.a[i].is_none() ? r.b[j] : r.a[i];
    if (uses_any(u)) {
      r.a[i] = dim_spec{};
      r.b[j] = dim_spec{};
    } else {
      take(u);
      for (std::size_t k = 0; k < u.count(); ++k) r.unreduced.push(u.axis(k));
    }
  }
  for (std::size_t d = 0; d < R; ++d) {
    char const c = L.out.labels[d];
    r.dims[d] = L.a.has(c) ? r.a[L.a.find(c)] : r.b[L.b.find(c)];
  }
  return r;
}

/// Offsets of every multi-index over `group`'s indices (row-major in the group's order) in an
/// operand whose dimension of index c has stride stride[c] (0 where it has none).
inline std::vector<std::size_t> einsum_offsets(einsum_term const& group, std::array<std::size_t, 128> const& extent,
                                               std::array<std::size_t, 128> const& stride) {
  std::size_t n = 1;
  for (std::size_t g = 0; g < group.rank; ++g) n *= extent[static_cast<unsigned char>(group.labels[g])];
  std::vector<std::size_t> out(n, 0);
  std::array<std::size_t, einsum_max_rank> idx{};
  std::size_t off = 0;
  for (std::size_t t = 0; t < n; ++t) {
    out[t] = off;
    for (std::size_t g = group.rank; g-- > 0;) {
      auto const c = static_cast<unsigned char>(group.labels[g]);
      off += stride[c];
      if (++idx[g] < extent[c]) break;
      off -= idx[g] * stride[c];
      idx[g] = 0;
    }
  }
  return out;
}

/// Whether offsets rows[i] + cols[j] (cols.size() == ncols) are a row-major matrix: cols[j] = j
/// and rows[i] = i * lead with lead >= ncols (so rows never overlap); `lead` is then set.
inline bool einsum_matrix(std::vector<std::size_t> const& rows, std::vector<std::size_t> const& cols,
                          std::size_t ncols, std::size_t& lead) {
  for (std::size_t j = 0; j < cols.size(); ++j)
    if (cols[j] != j) return false;
  if (rows.size() < 2) {
    lead = std::max<std::size_t>(ncols, 1);
    return rows.empty() || rows[0] == 0;
  }
  lead = rows[1];
  if (lead < ncols) return false;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i] != i * lead) return false;
  return true;
}

/// The product of one device's values: out[out indices] = sum over every other index of
/// a[...] * b[...]. Indices are grouped as dot_general groups them (batch, a's free, b's free,
/// the rest contracted), each operand packed into (batch, M, K) and (batch, K, N) and multiplied
/// by the local gemm. `extent[c]` is index c's range here; `sa`, `sb`, `so` the strides.
template <class T>
void einsum_local(einsum_labels const& L, std::array<std::size_t, 128> const& extent, T const* pa,
                  std::array<std::size_t, 128> const& sa, T const* pb, std::array<std::size_t, 128> const& sb, T* out,
                  std::array<std::size_t, 128> const& so) {
  einsum_term batch, m, n, k;
  for (std::size_t d = 0; d < L.out.rank; ++d) {
    char const c = L.out.labels[d];
    if (L.a.has(c) && L.b.has(c)) batch.push(c);
    else if (L.a.has(c)) m.push(c);
    else n.push(c);
  }
  for (einsum_term const* t : {&L.a, &L.b})
    for (std::size_t i = 0; i < t->rank; ++i)
      if (!L.out.has(t->labels[i]) && !k.has(t->labels[i])) k.push(t->labels[i]);
  auto const ab = einsum_offsets(batch, extent, sa), am = einsum_offsets(m, extent, sa), ak = einsum_offsets(k, extent, sa);
  auto const bb = einsum_offsets(batch, extent, sb), bk = einsum_offsets(k, extent, sb), bn = einsum_offsets(n, extent, sb);
  auto const ob = einsum_offsets(batch, extent, so), om = einsum_offsets(m, extent, so), on = einsum_offsets(n, extent, so);
  std::size_t const M = am.size(), N = bn.size(), K = ak.size();
  if (M == 0 || N == 0) return;
  // An operand whose two groups are already a row-major matrix (rows `lead` apart, columns
  // adjacent) goes to the gemm as it lies; only the others are packed. A dense layer's
  // "bsd,dhk->bshk" needs no packing at all: the per-element packing, not the product, was what
  // einsum cost (a fifth of the layered transformer's step, bench/RESULTS.md).
  std::size_t lda = 0, ldb = 0, ldc = 0;
  bool const a_direct = K > 0 && einsum_matrix(am, ak, K, lda);
  bool const b_direct = K > 0 && einsum_matrix(bk, bn, N, ldb);
  bool const c_direct = einsum_matrix(om, on, N, ldc);
  std::vector<T> A(a_direct ? 0 : M * K), B(b_direct ? 0 : K * N), C(c_direct ? 0 : M * N);
  for (std::size_t t = 0; t < ab.size(); ++t) {
    if (!a_direct)
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t q = 0; q < K; ++q) A[i * K + q] = pa[ab[t] + am[i] + ak[q]];
    if (!b_direct)
      for (std::size_t q = 0; q < K; ++q)
        for (std::size_t j = 0; j < N; ++j) B[q * N + j] = pb[bb[t] + bk[q] + bn[j]];
    T* const c = c_direct ? out + ob[t] : C.data();
    detail::gemm<T>(M, N, K, a_direct ? pa + ab[t] : A.data(), a_direct ? lda : std::max<std::size_t>(K, 1),
                    b_direct ? pb + bb[t] : B.data(), b_direct ? ldb : N, c, c_direct ? ldc : N, false);
    if (!c_direct)
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j) out[ob[t] + om[i] + on[j]] = C[i * N + j];
  }
}

/// The size of each index in two operands' shapes, or an exception naming the index.
template <std::size_t RA, std::size_t RB>
std::array<std::size_t, 128> einsum_sizes(einsum_labels const& L, shape_t<RA> const& as, shape_t<RB> const& bs) {
  std::array<std::size_t, 128> size{};
  std::array<bool, 128> seen{};
  auto visit = [&](einsum_term const& t, auto const& shape, int which) {
    for (std::size_t i = 0; i < t.rank; ++i) {
      auto const c = static_cast<unsigned char>(t.labels[i]);
      if (seen[c] && size[c] != shape[i])
        throw std::invalid_argument(std::string("tessera::einsum: index '") + t.labels[i] + "' has size " +
                                    std::to_string(size[c]) + " in operand 0 (shape " + shape_string(as) +
                                    ") and size " + std::to_string(shape[i]) + " in operand " + std::to_string(which) +
                                    " (shape " + shape_string(bs) + ")");
      seen[c] = true;
      size[c] = shape[i];
    }
  };
  visit(L.a, as, 0);
  visit(L.b, bs, 1);
  return size;
}

}  // namespace detail

/// The dot_general of einsum: two operands on one mesh whose specs already satisfy the rule
/// (einsum reshards them first), one element type, every index of each operand either in the
/// other or in the output (einsum sums the others first). The result is in the output's order.
template <class A, class B, detail::einsum_labels L>
class einsum_product : public detail::partial_sum_node<einsum_product<A, B, L>> {
  using ta = detail::operand_traits<A>;
  using tb = detail::operand_traits<B>;
  static constexpr std::size_t RA = ta::rank, RB = tb::rank;
  static constexpr auto rule =
      detail::einsum_rule<RA, RB, L.out.rank>(L, ta::spec, tb::spec, detail::as_auto_axes(ta::mesh_type::axes));
  // The rule leaves the operands where they are (a contracting index sharded alike on both
  // sides, allowed on Auto axes, is noted but moves nothing).
  static_assert(rule.a == ta::spec && rule.b == tb::spec,
                "tessera: internal: einsum's operands are resharded to satisfy the rule first");

 public:
  using value_type = typename ta::value_type;
  using mesh_type = typename ta::mesh_type;
  static constexpr std::size_t rank = L.out.rank;
  static constexpr std::array<dim_spec, rank> spec = detail::canonical_spec(rule.dims);
  /// The mesh axes the local products still have to be summed over (JAX's `unreduced`).
  static constexpr dim_spec unreduced = detail::canonical(rule.unreduced);
  using sharding_type = named_sharding<mesh_type, detail::spec_type_t<spec>>;
  using array_type = array<value_type, rank, sharding_type>;

  /// Checks meshes and index sizes now, as jnp.einsum does when it traces.
  einsum_product(A a, B b) : a_(std::move(a)), b_(std::move(b)) {
    detail::check_same_mesh(*detail::mesh_of(a_), *detail::mesh_of(b_), "einsum");
    size_ = detail::einsum_sizes<RA, RB>(L, detail::shape_of(a_), detail::shape_of(b_));
    for (std::size_t d = 0; d < rank; ++d) shape_[d] = size_[static_cast<unsigned char>(L.out.labels[d])];
    if (std::string const e = detail::size_error(shape_, sizeof(value_type)); !e.empty())
      throw std::length_error("tessera::einsum: the result has shape " + detail::shape_string(shape_) + ", which " + e);
  }

  shape_t<rank> const& shape() const { return shape_; }
  mesh_type const& mesh() const { return *detail::mesh_of(a_); }

 private:
  friend class detail::partial_sum_node<einsum_product>;
  sharding_type result_sharding() const { return sharding_type(mesh()); }
  void prepare_operands() const {
    detail::prepare(a_);
    detail::prepare(b_);
  }
  void plan_operands(std::vector<collective_event>& out) const {
    detail::plan_of(a_, out);
    detail::plan_of(b_, out);
  }
  array_type compute_partial() const {
    auto const xa = detail::materialised(a_);
    auto const xb = detail::materialised(b_);
    auto const as = xa.shape();
    auto const bs = xb.shape();
    // Queued (asynchronous dispatch) where the calling thread may queue: the task owns its
    // operands (arrays share their blocks), and reading their blocks waits for them.
    return detail::build_array_queued_on<value_type, rank, sharding_type>(
        mesh(), shape_, "einsum", [xa, xb, as, bs](std::size_t pos, std::array<slice, rank> const& rb, value_type* out) {
          auto const ab = xa.sharding().block(pos, as);
          auto const bb = xb.sharding().block(pos, bs);
          // Each index's range on this device: the result block's for output indices; for a
          // contracting one, the block of the side that shards it (the other holds it whole).
          std::array<slice, 128> range{};
          for (std::size_t i = 0; i < RA; ++i) range[static_cast<unsigned char>(L.a.labels[i])] = ab[i];
          for (std::size_t j = 0; j < RB; ++j)
            if (!L.a.has(L.b.labels[j]) || !tb::spec[j].is_none())
              range[static_cast<unsigned char>(L.b.labels[j])] = bb[j];
          for (std::size_t d = 0; d < rank; ++d) range[static_cast<unsigned char>(L.out.labels[d])] = rb[d];
          std::array<std::size_t, 128> extent{}, sa{}, sb{}, so{};
          for (std::size_t c = 0; c < 128; ++c) extent[c] = range[c].size();
          auto const astr = detail::block_strides(ab);
          auto const bstr = detail::block_strides(bb);
          auto const ostr = detail::block_strides(rb);
          std::size_t a0 = 0, b0 = 0;
          for (std::size_t i = 0; i < RA; ++i) {
            auto const c = static_cast<unsigned char>(L.a.labels[i]);
            sa[c] = astr[i];
            a0 += (range[c].start - ab[i].start) * astr[i];
          }
          for (std::size_t j = 0; j < RB; ++j) {
            auto const c = static_cast<unsigned char>(L.b.labels[j]);
            sb[c] = bstr[j];
            b0 += (range[c].start - bb[j].start) * bstr[j];
          }
          for (std::size_t d = 0; d < rank; ++d) so[static_cast<unsigned char>(L.out.labels[d])] = ostr[d];
          if (out == nullptr) return;
          detail::einsum_local<value_type>(L, extent, xa.block_data(pos) + a0, sa, xb.block_data(pos) + b0, sb, out,
                                           so);
        });
  }

  A a_;
  B b_;
  std::array<std::size_t, 128> size_{};
  shape_t<rank> shape_{};
};

namespace diagnostic {

/// Fires when einsum's subscripts are malformed (the subscripts and the offending index or
/// character are the arguments).
template <einsum_subscripts S, char Index, detail::einsum_error E>
struct einsum_subscripts_must_be_well_formed {
  static_assert(E != detail::einsum_error::bad_character,
                "tessera::einsum: the subscripts contain a character that is not an index (a letter), ',', '->' "
                "or a space (the subscripts and the character are the arguments of "
                "'einsum_subscripts_must_be_well_formed<subscripts, character, error>' above)");
  static_assert(E != detail::einsum_error::ellipsis,
                "tessera::einsum: an ellipsis ('...') in the subscripts is not provided; name every dimension "
                "with an index");
  static_assert(E != detail::einsum_error::arrow,
                "tessera::einsum: the subscripts must contain at most one '->', with nothing but indices after it");
  static_assert(E != detail::einsum_error::too_many_operands,
                "tessera::einsum: the subscripts name three or more operands; einsum of one or two operands is "
                "provided: contract in steps, einsum<\"ij,jk->ik\"> then einsum<\"ik,kl->il\">");
  static_assert(E != detail::einsum_error::too_many_indices,
                "tessera::einsum: an operand or the output has more than 26 indices");
  static_assert(E != detail::einsum_error::output_index_missing,
                "tessera::einsum: an index of the output appears in no operand (the index is the second argument "
                "of 'einsum_subscripts_must_be_well_formed<subscripts, index, error>' above); every output index "
                "must be an index of an operand (JAX: 'einsum: output subscript ... does not appear in inputs')");
  static_assert(E != detail::einsum_error::output_index_repeated,
                "tessera::einsum: an index appears twice in the output (it is the second argument of "
                "'einsum_subscripts_must_be_well_formed<subscripts, index, error>' above); name each output "
                "index once");
  static_assert(E != detail::einsum_error::diagonal,
                "tessera::einsum: an index appears twice in one operand (a diagonal or a trace, as in \"ii->i\"); "
                "this is not provided: take the diagonal another way");
  static constexpr bool value = true;
};

/// Fires when einsum is given a number of operands other than its subscripts name.
template <einsum_subscripts S, std::size_t Named, std::size_t Given, bool Ok>
struct einsum_operand_count_must_match_the_subscripts {
  static_assert(Ok,
                "tessera::einsum: the subscripts name a different number of operands than were given (the "
                "subscripts, the number they name and the number given are the arguments of "
                "'einsum_operand_count_must_match_the_subscripts<subscripts, named, given>' above)");
  static constexpr bool value = true;
};

/// Fires when an operand's term has a number of indices other than the operand's rank.
template <einsum_subscripts S, std::size_t Operand, std::size_t Indices, std::size_t Rank, bool Ok>
struct einsum_indices_must_match_the_operand_rank {
  static_assert(Ok,
                "tessera::einsum: an operand's subscripts have a different number of indices than the operand "
                "has dimensions (the subscripts, the operand, the number of indices and its rank are the "
                "arguments of 'einsum_indices_must_match_the_operand_rank<subscripts, operand, indices, rank>' "
                "above); write one index per dimension");
  static constexpr bool value = true;
};

/// Fires when einsum's operands shard a batch index differently on Explicit axes.
template <char Index, dim_spec Left, dim_spec Right, bool Ok>
struct einsum_batch_index_must_be_sharded_alike {
  static_assert(Ok,
                "tessera::einsum: a batch index (in both operands and the output) is sharded differently in the "
                "two operands (the index and both entries are the arguments of "
                "'einsum_batch_index_must_be_sharded_alike<index, left, right>' above). JAX: 'dot_general "
                "requires lhs batch dimensions and rhs batch dimensions to have the same sharding'; reshard one "
                "operand, or pass an out_sharding");
  static constexpr bool value = true;
};

/// Fires when a contracting index is sharded in both operands on Explicit axes.
template <char Index, dim_spec Left, dim_spec Right, bool Ok>
struct einsum_contracting_index_sharded_in_both_operands {
  static_assert(Ok,
                "tessera::einsum: a contracting index (in both operands, not in the output) is sharded in both "
                "(the index and both entries are the arguments of "
                "'einsum_contracting_index_sharded_in_both_operands<index, left, right>' above). JAX: "
                "'Contracting dimensions are sharded and it is ambiguous how the output should be sharded. Please "
                "specify the output sharding via the `out_sharding` parameter.'; pass one: einsum<...>(a, b, "
                "tessera::P<...>{}), or replicate it in one operand");
  static constexpr bool value = true;
};

/// Fires when einsum's result would use one Explicit mesh axis in two dimensions.
template <char Index, dim_spec Entry, bool Ok>
struct einsum_result_would_use_a_mesh_axis_twice {
  static_assert(Ok,
                "tessera::einsum: the result would shard two dimensions on the same mesh axis (the index of the "
                "second and its entry are the arguments of 'einsum_result_would_use_a_mesh_axis_twice<index, "
                "entry>' above). JAX: 'dot_general operation with inputs: ... produces an illegally sharded "
                "result'; reshard one operand, or pass an out_sharding");
  static constexpr bool value = true;
};

}  // namespace diagnostic

namespace detail {

/// einsum's operands: tessera arrays and expressions, or grad's tracers.
template <class X>
concept einsum_operand = sharded_expression<X> || traced_value<X>;

template <class X>
using einsum_value_t = typename operand_traits<stored_t<decltype(ad::primal_of(std::declval<X const&>()))>>::value_type;
template <class X>
using einsum_mesh_t = typename operand_traits<stored_t<decltype(ad::primal_of(std::declval<X const&>()))>>::mesh_type;
template <class X>
inline constexpr std::size_t einsum_rank_v =
    operand_traits<stored_t<decltype(ad::primal_of(std::declval<X const&>()))>>::rank;
template <class X>
inline constexpr auto einsum_spec_v = operand_traits<stored_t<decltype(ad::primal_of(std::declval<X const&>()))>>::spec;

/// x summed over the dimensions listed in `dims` (positions), or x itself when there are none.
template <einsum_term Dims, class X>
auto einsum_sum_out(X&& x) {
  if constexpr (Dims.rank == 0) {
    return store(std::forward<X>(x));
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return sum<static_cast<std::size_t>(Dims.labels[I])...>(std::forward<X>(x));  // ADL: tracers too
    }(std::make_index_sequence<Dims.rank>{});
  }
}

/// The labels once the indices only one operand has are summed out.
constexpr einsum_labels einsum_kept_labels(einsum_labels const& L) {
  einsum_labels k = L;
  k.a = einsum_kept(L.a, L.b, L.out);
  k.b = einsum_kept(L.b, L.a, L.out);
  return k;
}

/// The product of arrays or expressions (no tracer): the rule's checks, then the node.
template <einsum_labels L, bool OutGiven, class A, class B>
auto einsum_dot_primal(A a, B b) {
  using ta = operand_traits<A>;
  using tb = operand_traits<B>;
  using Mesh = typename ta::mesh_type;
  using T = promote_t<typename ta::value_type, typename tb::value_type>;
  using failed = failed_expression<T, L.out.rank, Mesh>;
  constexpr bool same_mesh = std::is_same_v<Mesh, typename tb::mesh_type>;
  if constexpr (is_failed_expression<A>::value || is_failed_expression<B>::value) {
    return failed{};
  } else if constexpr (!same_mesh) {
    static_assert(diagnostic::operands_must_be_on_the_same_mesh<Mesh, typename tb::mesh_type, same_mesh>::value);
    return failed{};
  } else {
    static_assert(!std::is_same_v<T, bool>, "tessera::einsum: boolean operands; astype<int32_t> them first");
    constexpr auto rule = einsum_rule<ta::rank, tb::rank, L.out.rank>(
        L, ta::spec, tb::spec, OutGiven ? as_auto_axes(Mesh::axes) : Mesh::axes);
    constexpr bool bad = rule.explicit_error;
    if constexpr (bad && rule.error == einsum_sharding_error::batch) {
      static_assert(diagnostic::einsum_batch_index_must_be_sharded_alike<rule.index, canonical(rule.left),
                                                                          canonical(rule.right), false>::value);
      return failed{};
    } else if constexpr (bad && rule.error == einsum_sharding_error::contracting) {
      static_assert(diagnostic::einsum_contracting_index_sharded_in_both_operands<rule.index, canonical(rule.left),
                                                                                   canonical(rule.right), false>::value);
      return failed{};
    } else if constexpr (bad && rule.error == einsum_sharding_error::repeated) {
      static_assert(
          diagnostic::einsum_result_would_use_a_mesh_axis_twice<rule.index, canonical(rule.left), false>::value);
      return failed{};
    } else {
      // Value leaves (arrays, autodiff's values) as one node type per array type: the forward
      // product and the backward ones that read a cotangent then share their code.
      auto xa = as_value_node(move_to<canonical_spec(rule.a)>(as_type<T>(std::move(a))));
      auto xb = as_value_node(move_to<canonical_spec(rule.b)>(as_type<T>(std::move(b))));
      return einsum_product<decltype(xa), decltype(xb), L>(std::move(xa), std::move(xb));
    }
  }
}

/// The specs of operands of types A and B once einsum has summed their unique indices, and the
/// dot_general rule on them: what einsum<S>(a, b) would refuse, known without building it.
template <einsum_subscripts S, class A, class B>
constexpr auto einsum_rule_for() {
  constexpr einsum_labels L = parse_einsum(S.view());
  constexpr einsum_labels K = einsum_kept_labels(L);
  using ta = operand_traits<A>;
  using tb = operand_traits<B>;
  auto kept = [](einsum_term const& t, einsum_term const& k, auto const& spec) {
    std::array<dim_spec, std::tuple_size_v<std::remove_cvref_t<decltype(spec)>>> out{};
    std::size_t j = 0;
    for (std::size_t i = 0; i < t.rank; ++i)
      if (k.has(t.labels[i])) out[j++] = spec[i];
    return out;
  };
  auto const sa = full_spec<K.a.rank>(kept(L.a, K.a, ta::spec));
  auto const sb = full_spec<K.b.rank>(kept(L.b, K.b, tb::spec));
  return einsum_rule<K.a.rank, K.b.rank, K.out.rank>(K, sa, sb, ta::mesh_type::axes);
}

/// The labels of the product that gives the cotangent of one operand: g (indices `g`) against
/// the other operand (`other`), into `target`.
constexpr einsum_labels einsum_transpose_labels(einsum_term const& g, einsum_term const& other,
                                                einsum_term const& target) {
  einsum_labels r;
  r.operands = 2;
  r.a = g;
  r.b = other;
  r.out = target;
  return r;
}

/// The product, traced when an operand is a tracer: the cotangent of each operand is the
/// einsum of g with the other operand into its indices (dot_general's transpose rule), laid out
/// directly in the operand's sharding, so a contracted sharded dimension is summed there once.
template <einsum_labels L, bool OutGiven, class A, class B>
auto einsum_dot(A&& a, B&& b) {
  if constexpr (!traced_value<A> && !traced_value<B>) {
    return einsum_dot_primal<L, OutGiven>(store(std::forward<A>(a)), store(std::forward<B>(b)));
  } else {
    using namespace ad;
    auto fwd = einsum_dot_primal<L, OutGiven>(store(primal_of(a)), store(primal_of(b)));
    return record(tape_of(a, b), std::move(fwd), [a, b](auto const& g, auto const&) {
      constexpr einsum_labels LA = einsum_transpose_labels(L.out, L.b, L.a);
      constexpr einsum_labels LB = einsum_transpose_labels(L.out, L.a, L.b);
      using T = typename std::remove_cvref_t<decltype(g)>::value_type;
      if constexpr (traced_value<A>)
        contribute(a, [&] {
          auto p = einsum_dot_primal<LA, true>(store(g), as_type<T>(store(primal_of(b))));
          return reshard(std::move(p), typename std::remove_cvref_t<A>::array_type::sharding_type::spec_type{});
        });
      if constexpr (traced_value<B>)
        contribute(b, [&] {
          auto p = einsum_dot_primal<LB, true>(store(g), as_type<T>(store(primal_of(a))));
          return reshard(std::move(p), typename std::remove_cvref_t<B>::array_type::sharding_type::spec_type{});
        });
    });
  }
}

/// Whether the subscripts are well formed and fit the operands' count and ranks.
template <einsum_subscripts S, std::size_t Given, std::size_t RA, std::size_t RB>
constexpr bool einsum_ok() {
  constexpr einsum_labels L = parse_einsum(S.view());
  return L.error == einsum_error::none && L.operands == Given && L.a.rank == RA && (Given == 1 || L.b.rank == RB);
}

/// The compile error for subscripts that are not einsum_ok (one, the first that applies).
template <einsum_subscripts S, std::size_t Given, std::size_t RA, std::size_t RB>
void einsum_diagnose() {
  constexpr einsum_labels L = parse_einsum(S.view());
  if constexpr (L.error != einsum_error::none)
    static_assert(diagnostic::einsum_subscripts_must_be_well_formed<S, L.index, L.error>::value);
  else if constexpr (L.operands != Given)
    static_assert(diagnostic::einsum_operand_count_must_match_the_subscripts<S, L.operands, Given, false>::value);
  else if constexpr (L.a.rank != RA)
    static_assert(diagnostic::einsum_indices_must_match_the_operand_rank<S, 0, L.a.rank, RA, false>::value);
  else
    static_assert(diagnostic::einsum_indices_must_match_the_operand_rank<S, 1, L.b.rank, RB, false>::value);
}

/// The transpose taking the kept indices `from` to the output's order.
template <einsum_term From, einsum_term Out, class X>
auto einsum_permute(X&& x) {
  constexpr bool identity = [] {
    for (std::size_t d = 0; d < Out.rank; ++d)
      if (From.labels[d] != Out.labels[d]) return false;
    return true;
  }();
  if constexpr (identity) {
    return std::forward<X>(x);
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return transpose<From.find(Out.labels[I])...>(std::forward<X>(x));  // ADL: tracers too
    }(std::make_index_sequence<Out.rank>{});
  }
}

template <einsum_subscripts S, class X>
auto einsum_one(X&& x) {
  constexpr std::size_t R = einsum_rank_v<X>;
  using failed = failed_expression<einsum_value_t<X>, 0, einsum_mesh_t<X>>;
  if constexpr (!einsum_ok<S, 1, R, 0>()) {
    einsum_diagnose<S, 1, R, 0>();
    return failed{};
  } else {
    constexpr einsum_labels L = parse_einsum(S.view());
    constexpr einsum_term none{};
    constexpr einsum_term summed = einsum_summed(L.a, none, L.out);
    constexpr einsum_term kept = einsum_kept(L.a, none, L.out);
    return einsum_permute<kept, L.out>(einsum_sum_out<summed>(std::forward<X>(x)));
  }
}

template <einsum_subscripts S, bool OutGiven, class A, class B>
auto einsum_two(A&& a, B&& b) {
  using failed = failed_expression<promote_t<einsum_value_t<A>, einsum_value_t<B>>, 0, einsum_mesh_t<A>>;
  if constexpr (!einsum_ok<S, 2, einsum_rank_v<A>, einsum_rank_v<B>>()) {
    einsum_diagnose<S, 2, einsum_rank_v<A>, einsum_rank_v<B>>();
    return failed{};
  } else {
    constexpr einsum_labels L = parse_einsum(S.view());
    constexpr einsum_labels K = einsum_kept_labels(L);
    return einsum_dot<K, OutGiven>(einsum_sum_out<einsum_summed(L.a, L.b, L.out)>(std::forward<A>(a)),
                                   einsum_sum_out<einsum_summed(L.b, L.a, L.out)>(std::forward<B>(b)));
  }
}

}  // namespace detail

/// jnp.einsum(subscripts, x) of one operand: the indices left out of the output are summed
/// (an all-reduce where they are sharded), the rest transposed to the output's order.
template <einsum_subscripts S, detail::einsum_operand X>
auto einsum(X&& x) {
  return detail::einsum_one<S>(std::forward<X>(x));
}

/// jnp.einsum(subscripts, x, out_sharding=P(...)): the result laid out by `out`.
template <einsum_subscripts S, detail::einsum_operand X, dim_spec... D>
auto einsum(X&& x, P<D...> out) {
  auto r = detail::einsum_one<S>(std::forward<X>(x));
  if constexpr (detail::is_failed_expression<decltype(r)>::value) return r;
  else return reshard(std::move(r), out);
}

/// jnp.einsum(subscripts, a, b): indices only one operand has (and the output has not) are
/// summed first; then one dot_general. Batch indices (both operands and the output) must be
/// sharded alike; a contracting index may be sharded in one operand, whose local products are
/// then partial sums over its axes, summed when the result is used (an all-reduce into the
/// replicated default, a reduce-scatter under a sharded constraint). On Explicit axes a
/// conflict fails to compile with JAX's words; on Auto axes b is resharded.
template <einsum_subscripts S, detail::einsum_operand A, detail::einsum_operand B>
auto einsum(A&& a, B&& b) {
  return detail::einsum_two<S, false>(std::forward<A>(a), std::forward<B>(b));
}

/// jnp.einsum(subscripts, a, b, out_sharding=P(...)): as in JAX, nothing is refused: operands
/// that clash are resharded, and partial sums go straight to `out`.
template <einsum_subscripts S, detail::einsum_operand A, detail::einsum_operand B, dim_spec... D>
auto einsum(A&& a, B&& b, P<D...> out) {
  auto r = detail::einsum_two<S, true>(std::forward<A>(a), std::forward<B>(b));
  if constexpr (detail::is_failed_expression<decltype(r)>::value) return r;
  else return reshard(std::move(r), out);
}

}  // namespace tessera
