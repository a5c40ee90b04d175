#pragma once
// The communication plan of an expression, before anything runs: its result
// type and every collective its evaluation will run, with the mesh axes and
// the bytes per device, derived from the types and the shapes alone. Hidden
// all-gathers are what users of JAX and DTensor most often miss; here they are
// printed, and a collective_counter checks that a run kept to the plan.
// (debug/ reads expr/ here: the plan is a property of expression nodes.)

#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/core/communication_plan.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/typeof_expression.hpp"

namespace tessera {

/// What explain() returns: the result type and the collectives, in the order they run.
struct communication_plan {
  /// jax.typeof of the result, e.g. `float32[8@X,4]`.
  std::string result;
  /// The collectives evaluation runs.
  std::vector<collective_event> collectives;

  /// How many collectives (of one kind, when given) the plan runs.
  std::size_t count(std::string const& kind = {}) const {
    std::size_t n = 0;
    for (auto const& e : collectives) n += kind.empty() || e.kind == kind;
    return n;
  }
  /// `result: float32[8@X,4]` then one line per collective, or `collectives: none`.
  friend std::ostream& operator<<(std::ostream& os, communication_plan const& p) {
    os << "result: " << p.result << '\n';
    if (p.collectives.empty()) return os << "collectives: none\n";
    os << "collectives:\n";
    for (auto const& e : p.collectives) os << "  " << e << '\n';
    return os;
  }
};

/// The plan of evaluating `e` now (results already computed and cached in its nodes run nothing again; like printing the HLO of jax.jit(f).lower(x).compile() and
/// looking for its collectives); an array's plan is empty.
template <sharded_expression E>
communication_plan explain(E const& e) {
  communication_plan p;
  p.result = type_of(e);
  if constexpr (expression_node<E>) e.plan(p.collectives);
  return p;
}

}  // namespace tessera
