#pragma once
// Reading the golden files that JAX wrote (tools/jax_reference/gen_*.py) and checking that
// every case in a file has a C++ check and every check a case: a golden case nobody checks,
// or a check whose case JAX never wrote, fails the test instead of passing silently.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tessera/core/partition_spec.hpp"

namespace tessera_jax {

using json = nlohmann::json;

/// The parsed golden file tests/golden/<name> (parsed once per run).
inline json const& golden(std::string const& name) {
  static std::map<std::string, json> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  std::ifstream in(std::string(TESSERA_GOLDEN_DIR) + "/" + name);
  INFO("golden file " << TESSERA_GOLDEN_DIR << "/" << name);
  REQUIRE(in.good());
  return cache.emplace(name, json::parse(in)).first->second;
}

/// The checks of one golden file, by case name: each is called with the case's JSON object.
using checks = std::map<std::string, std::function<void(json const&)>>;

/// Runs every check against its case; fails for a case without a check or a check without a
/// case. Returns the number of cases checked.
inline std::size_t check_all(std::string const& file, checks const& cs) {
  json const& cases = golden(file).at("cases");
  std::set<std::string> seen;
  for (auto const& [name, expected] : cases.items()) {
    INFO(file << ": case '" << name << "'");
    auto it = cs.find(name);
    CHECK(it != cs.end());  // a case JAX wrote that no C++ check reads
    if (it == cs.end()) continue;
    seen.insert(name);
    it->second(expected);
  }
  for (auto const& [name, fn] : cs) {
    INFO(file << ": the check '" << name << "' has no golden case (regenerate the goldens?)");
    CHECK(seen.count(name) == 1);
  }
  return seen.size();
}

/// A C++ std::vector from a JSON array.
template <class T>
std::vector<T> vec(json const& j) {
  return j.get<std::vector<T>>();
}

/// Compares flat values with a tolerance relative to the larger magnitude (0 = exact).
template <class A>
void check_values(A const& got, json const& want, double rtol = 0.0) {
  std::vector<double> w = want.get<std::vector<double>>();
  REQUIRE(static_cast<std::size_t>(got.size()) == w.size());
  std::size_t i = 0;
  for (auto v : got) {
    double const g = static_cast<double>(v);
    double const tol = rtol * std::max({1.0, std::abs(g), std::abs(w[i])});
    INFO("element " << i << ": tessera " << g << ", JAX " << w[i]);
    CHECK(std::abs(g - w[i]) <= tol);
    ++i;
  }
}

/// A spec as the generator writes it: one entry per dimension (null, "X" or ["X", "Y"]), trailing nulls dropped.
template <std::size_t K>
json spec_json(std::array<tessera::dim_spec, K> const& dims, std::size_t rank) {
  json out = json::array();
  for (std::size_t d = 0; d < rank; ++d) {
    tessera::dim_spec const e = d < K ? dims[d] : tessera::dim_spec{};
    if (e.is_none()) {
      out.push_back(nullptr);
    } else if (e.count() == 1) {
      out.push_back(std::string(e.axis(0).view()));
    } else {
      json names = json::array();
      for (std::size_t a = 0; a < e.count(); ++a) names.push_back(std::string(e.axis(a).view()));
      out.push_back(names);
    }
  }
  while (!out.empty() && out.back().is_null()) out.erase(out.size() - 1);
  return out;
}

/// The spec with the mesh axes of size 1 left out: a size-1 axis shards nothing, so specs that
/// differ only there are one layout (JAX's NamedSharding.is_equivalent_to).
inline json without_trivial_axes(json const& spec, json const& mesh_sizes, json const& names) {
  auto trivial = [&](std::string const& a) {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == a) return mesh_sizes[i] == 1;
    return false;
  };
  json out = json::array();
  for (auto const& e : spec) {
    json kept = json::array();
    if (e.is_string() && !trivial(e)) kept.push_back(e);
    if (e.is_array())
      for (auto const& a : e)
        if (!trivial(a)) kept.push_back(a);
    out.push_back(kept.empty() ? json(nullptr) : kept.size() == 1 ? kept[0] : kept);
  }
  while (!out.empty() && out.back().is_null()) out.erase(out.size() - 1);
  return out;
}

}  // namespace tessera_jax
