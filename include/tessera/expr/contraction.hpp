#pragma once
// Matrix products (jnp.matmul): each device multiplies the blocks it holds
// with the local kernel (runtime/gemm.hpp). Where the contracting dimension is
// sharded, the products are partial sums over its mesh axes, and the node
// says so in its type (`unreduced`): they are summed only when needed, into
// the layout asked for (array/sum_partials.hpp): an all-reduce for the default,
// replicated result, a reduce-scatter under a sharded constraint.

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/array/placement.hpp"
#include "tessera/array/queued_build.hpp"
#include "tessera/array/sum_partials.hpp"
#include "tessera/core/sharding_rules.hpp"
#include "tessera/expr/evaluate.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/partial_sum_node.hpp"
#include "tessera/runtime/call_once.hpp"
#include "tessera/runtime/gemm.hpp"

namespace tessera {

namespace detail {

/// Whether each dimension of a spec is sharded, as plain values.
template <std::size_t N>
constexpr std::array<bool, N> sharded_dims(std::array<dim_spec, N> const& spec) {
  std::array<bool, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = !spec[i].is_none();
  return out;
}

/// jnp.matmul's result shape for operands of shapes `as` and `bs` (whether each of their
/// dimensions is sharded: a_sharded, b_sharded) into `out`, checked as JAX checks when it traces:
/// contracting sizes that differ, batch dimensions that do not broadcast or broadcast while
/// sharded, a result too large to count. Plain values, compiled once rather than once per
/// contraction type (issue 31's compile time).
inline void matmul_shape(std::span<std::size_t const> as, std::span<std::size_t const> bs, std::span<bool const> a_sharded,
                         std::span<bool const> b_sharded, std::span<std::size_t> out, std::size_t element_bytes) {
  std::size_t const RA = as.size(), RB = bs.size();
  std::size_t const BA = batch_rank(RA), BB = batch_rank(RB), NB = BA > BB ? BA : BB;
  std::size_t const ka = as[RA - 1], kb = bs[rhs_contracting(RB)];
  if (ka != kb)
    throw std::invalid_argument("tessera::matmul: the operands of shapes " + shape_string(as) + " and " +
                                shape_string(bs) + " do not contract: dimension " + std::to_string(RA - 1) +
                                " of the left one has size " + std::to_string(ka) + " and dimension " +
                                std::to_string(rhs_contracting(RB)) + " of the right one has size " +
                                std::to_string(kb));
  for (std::size_t d = 0; d < NB; ++d) {
    std::size_t const x = d + BA >= NB ? as[d + BA - NB] : 1, y = d + BB >= NB ? bs[d + BB - NB] : 1;
    if (x != y && x != 1 && y != 1)
      throw std::invalid_argument("tessera::matmul: the batch dimensions of shapes " + shape_string(as) + " and " +
                                  shape_string(bs) + " do not broadcast: result dimension " + std::to_string(d) +
                                  " would have sizes " + std::to_string(x) + " and " + std::to_string(y));
    out[d] = x == 1 ? y : x;
    bool const a_bcast = x == 1 && y != 1 && d + BA >= NB && a_sharded[d + BA - NB];
    bool const b_bcast = y == 1 && x != 1 && d + BB >= NB && b_sharded[d + BB - NB];
    if (a_bcast || b_bcast)
      throw std::invalid_argument("tessera::matmul: batch dimension " + std::to_string(d) + " of an operand of shape " +
                                  (a_bcast ? shape_string(as) : shape_string(bs)) +
                                  " has size 1 and broadcasts, but it is sharded over mesh axes; replicate it");
  }
  std::size_t d = NB;
  if (RA >= 2) out[d++] = as[RA - 2];
  if (RB >= 2) out[d] = bs[RB - 1];
  // Empty operands (a contracting size of 0) can have a product too large to count.
  if (std::string const e = size_error(out, element_bytes); !e.empty())
    throw std::length_error("tessera::matmul: the product of shapes " + shape_string(as) + " and " + shape_string(bs) +
                            " has shape " + shape_string(out) + ", which " + e);
}

/// Row-major strides of a block.
template <std::size_t N>
std::array<std::size_t, N> block_strides(std::array<slice, N> const& b) {
  std::array<std::size_t, N> s{};
  std::size_t st = 1;
  for (std::size_t i = N; i-- > 0;) {
    s[i] = st;
    st *= b[i].size();
  }
  return s;
}

}  // namespace detail

/// jnp.matmul(a, b) of two operands on one mesh whose specs already satisfy the contraction
/// rule (tessera::matmul reshards them first where needed) and share one element type.
template <class A, class B>
class contraction : public detail::partial_sum_node<contraction<A, B>> {
  using ta = detail::operand_traits<A>;
  using tb = detail::operand_traits<B>;
  static constexpr std::size_t RA = ta::rank, RB = tb::rank;
  static constexpr std::size_t BA = detail::batch_rank(RA), BB = detail::batch_rank(RB);
  static constexpr std::size_t NB = BA > BB ? BA : BB;
  static constexpr auto rule = detail::contract_rule(ta::spec, tb::spec, ta::mesh_type::axes);
  static_assert(rule.error == detail::contract_error::none,
                "tessera: internal: matmul's operands are resharded to satisfy the rule first");

 public:
  using value_type = typename ta::value_type;
  using mesh_type = typename ta::mesh_type;
  static constexpr std::size_t rank = detail::matmul_rank(RA, RB);
  static constexpr std::array<dim_spec, rank> spec = detail::canonical_spec(rule.dims);
  /// The mesh axes the local products still have to be summed over (JAX's `unreduced`).
  static constexpr dim_spec unreduced = detail::canonical(rule.unreduced);
  using sharding_type = named_sharding<mesh_type, detail::spec_type_t<spec>>;
  using array_type = array<value_type, rank, sharding_type>;

  /// Checks meshes and shapes now, as jnp.matmul does when it traces.
  contraction(A a, B b)
      : a_(std::move(a)), b_(std::move(b)) {
    detail::check_same_mesh(*detail::mesh_of(a_), *detail::mesh_of(b_), "matmul");
    auto const as = detail::shape_of(a_);
    auto const bs = detail::shape_of(b_);
    static constexpr auto a_sharded = detail::sharded_dims(ta::spec);
    static constexpr auto b_sharded = detail::sharded_dims(tb::spec);
    detail::matmul_shape(as, bs, a_sharded, b_sharded, shape_, sizeof(value_type));
  }

  /// The result's shape.
  shape_t<rank> const& shape() const { return shape_; }
  mesh_type const& mesh() const { return *detail::mesh_of(a_); }
  /// The left operand.
  A const& lhs() const { return a_; }
  /// The right operand.
  B const& rhs() const { return b_; }

 private:
  friend class detail::partial_sum_node<contraction>;
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
    constexpr std::size_t KB = detail::rhs_contracting(RB);
    constexpr bool ka_sharded = !ta::spec[RA - 1].is_none(), kb_sharded = !tb::spec[KB].is_none();
    // Queued (asynchronous dispatch) where the calling thread may queue: the task owns its
    // operands (arrays share their blocks), and reading their blocks waits for them.
    return detail::build_array_queued_on<value_type, rank, sharding_type>(
        mesh(), shape_, "matmul", [xa, xb, as, bs](std::size_t pos, std::array<slice, rank> const& rb, value_type* out) {
          auto const ab = xa.sharding().block(pos, as);
          auto const bb = xb.sharding().block(pos, bs);
          slice const kr = ka_sharded ? ab[RA - 1] : kb_sharded ? bb[KB] : slice{0, as[RA - 1]};
          auto const astr = detail::block_strides(ab);
          auto const bstr = detail::block_strides(bb);
          slice const mr = [&] {
            if constexpr (RA >= 2) return rb[NB];
            else return slice{0, 1};
          }();
          slice const nr = [&] {
            if constexpr (RB >= 2) return rb[rank - 1];
            else return slice{0, 1};
          }();
          std::size_t const m = mr.size(), n = nr.size(), k = kr.size();
          if (m == 0 || n == 0) return;
          // Offsets of the (M, K) and (K, N) corners inside the operands' blocks.
          std::size_t a0 = (kr.start - ab[RA - 1].start) * astr[RA - 1];
          std::size_t lda = std::max<std::size_t>(k, 1);
          if constexpr (RA >= 2) {
            a0 += (mr.start - ab[RA - 2].start) * astr[RA - 2];
            lda = std::max<std::size_t>(astr[RA - 2], 1);
          }
          std::size_t b0 = (kr.start - bb[KB].start) * bstr[KB];
          std::size_t ldb = 1;
          if constexpr (RB >= 2) {
            b0 += (nr.start - bb[RB - 1].start) * bstr[RB - 1];
            ldb = std::max<std::size_t>(bstr[KB], 1);
          }
          value_type const* pa = xa.block_data(pos);
          value_type const* pb = xb.block_data(pos);
          // One product per batch index of the result block.
          std::array<std::size_t, NB + 1> bi{};
          std::size_t batches = 1;
          for (std::size_t d = 0; d < NB; ++d) {
            bi[d] = rb[d].start;
            batches *= rb[d].size();
          }
          for (std::size_t t = 0; t < batches; ++t) {
            std::size_t ao = a0, bo = b0;
            for (std::size_t d = 0; d < NB; ++d) {
              if (d + BA >= NB) {
                std::size_t const j = d + BA - NB;
                ao += ((as[j] == 1 ? 0 : bi[d]) - ab[j].start) * astr[j];
              }
              if (d + BB >= NB) {
                std::size_t const j = d + BB - NB;
                bo += ((bs[j] == 1 ? 0 : bi[d]) - bb[j].start) * bstr[j];
              }
            }
            detail::gemm<value_type>(m, n, k, pa + ao, lda, pb + bo, ldb, out + t * m * n, n, false);
            for (std::size_t d = NB; d-- > 0;) {
              if (++bi[d] < rb[d].stop) break;
              bi[d] = rb[d].start;
            }
          }
        });
  }

  A a_;
  B b_;
  shape_t<rank> shape_{};
};

}  // namespace tessera
