#pragma once
// How the compiler treats a mesh axis; the same three modes as JAX's AxisType.

#include <string_view>

namespace tessera {

/// jax.sharding.AxisType: Auto (the library picks communication), Explicit
/// (sharding is part of the type and conflicts are compile errors), Manual (shard_map).
enum class axis_type { auto_, explicit_, manual };

/// The spelling JAX prints for an axis type (`AxisType.Explicit` prints `Explicit`).
constexpr std::string_view to_string(axis_type t) {
  switch (t) {
    case axis_type::auto_: return "Auto";
    case axis_type::explicit_: return "Explicit";
    case axis_type::manual: return "Manual";
  }
  return "?";
}

/// Tag for make_mesh: every axis Auto (JAX's default `axis_types=(AxisType.Auto, ...)`).
struct auto_axes_t { static constexpr axis_type value = axis_type::auto_; };
/// Tag for make_mesh: every axis Explicit (`axis_types=(AxisType.Explicit, ...)`).
struct explicit_axes_t { static constexpr axis_type value = axis_type::explicit_; };
/// Tag for make_mesh: every axis Manual (`axis_types=(AxisType.Manual, ...)`).
struct manual_axes_t { static constexpr axis_type value = axis_type::manual; };
/// make_mesh<"X","Y">({2,4}, explicit_axes) is `make_mesh(..., axis_types=(Explicit, Explicit))`.
inline constexpr explicit_axes_t explicit_axes{};
/// All axes Auto, the default.
inline constexpr auto_axes_t auto_axes{};
/// All axes Manual.
inline constexpr manual_axes_t manual_axes{};

}  // namespace tessera
