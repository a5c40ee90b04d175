#pragma once
// Where a device thread is inside a shard_map body: its team, its mesh
// position, and the mesh's axes, so that `psum<"x">(v)` can find the devices
// it reduces with. Set for the duration of the body on each device thread.

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tessera/core/fixed_string.hpp"
#include "tessera/core/mesh.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/device_memory.hpp"
#include "tessera/runtime/mesh_group.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera::detail {

struct process_run;  // parallel/across_processes.hpp

/// A collective result a device made in its body (collectives.hpp's as_result): if the body
/// returns it as it is, shard_map takes its memory for the output instead of copying it.
struct recent_result {
  void const* data = nullptr;
  void const* type = nullptr;  // names the holder's type (collectives.hpp's result_type_tag)
  std::weak_ptr<void> holder;
};

/// The shard_map body a device thread is running.
struct spmd_frame {
  team* t = nullptr;
  std::size_t pos = 0;                 // mesh position of this device
  std::uint32_t seq = 0;               // collectives started so far (the signature's sequence number)
  // The mesh's axis names and sizes, held by the shard_map call (a frame per device per call:
  // no copies of its own).
  std::span<std::string_view const> axis_names;
  std::span<std::size_t const> sizes;
  std::string (*describe)(op_signature const&) = nullptr;
  device_memory* memory = nullptr;     // this device's cache: collective results reuse touched pages
  std::shared_ptr<void const> owner;   // keeps `memory` alive while a result holds a block of it
  bool check_vma = true;               // false under shard_map(..., no_check_vma): grad then types every value varying
  std::size_t team_pos = 0;            // this device's place in the team (pos, unless the mesh spans processes)
  process_run* xp = nullptr;           // set when the mesh spans processes: collectives go through it
  std::array<recent_result, 4> recent{};  // the last collective results made, in a ring
  std::size_t next_recent = 0;
  // The groups this body's collectives ran among, by their axes in order: a body that makes a
  // collective in a loop computes its group once (three allocations a call otherwise, a tenth of
  // a 4 KiB all_to_all between processes). A ring inside the frame: a body over more axis
  // orders than it holds computes the others again.
  struct cached_group {
    std::uint64_t order = 0;
    std::size_t count = 0;  // axes in the order + 1; 0: an empty slot
    group g;
  };
  std::array<cached_group, 4> groups{};
  std::size_t next_group = 0;

  void remember_result(recent_result r) { recent[next_recent++ % recent.size()] = std::move(r); }
};

inline thread_local spmd_frame* current_frame = nullptr;

/// The frame of the calling device thread; `what` names the call for the error outside a body.
inline spmd_frame& frame_for(char const* what) {
  if (current_frame == nullptr)
    throw std::logic_error(std::string("tessera::") + what +
                           " was called outside a shard_map body; collectives run on the devices of a shard_map");
  return *current_frame;
}

/// Sets the frame for the lifetime of the guard.
class frame_guard {
 public:
  explicit frame_guard(spmd_frame& f) : previous_(current_frame) { current_frame = &f; }
  ~frame_guard() { current_frame = previous_; }
  frame_guard(frame_guard const&) = delete;
  frame_guard& operator=(frame_guard const&) = delete;

 private:
  spmd_frame* previous_;
};

inline std::string axes_text(std::span<std::string_view const> names) {
  std::string s = "(";
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", '" : "'") + std::string(names[i]) + "'";
  return s + (names.size() == 1 ? ",)" : ")");
}

/// Mesh axis indices of `axes` (in the order given); throws naming an axis the mesh lacks or a repeat.
template <std::size_t K>
std::array<std::size_t, K> resolve_axes(spmd_frame const& f, std::array<axis_name, K> const& axes, char const* what) {
  std::array<std::size_t, K> idx{};
  for (std::size_t i = 0; i < K; ++i) {
    std::size_t a = 0;
    while (a < f.axis_names.size() && f.axis_names[a] != axes[i].view()) ++a;
    if (a == f.axis_names.size())
      throw std::invalid_argument(std::string("tessera::") + what + ": mesh axis '" + std::string(axes[i].view()) +
                                  "' is not in the shard_map's mesh, whose axes are " + axes_text(f.axis_names));
    for (std::size_t j = 0; j < i; ++j)
      if (idx[j] == a)
        throw std::invalid_argument(std::string("tessera::") + what + ": mesh axis '" +
                                    std::string(axes[i].view()) + "' is named twice");
    idx[i] = a;
  }
  return idx;
}

/// The devices that share this device's coordinates off `axes` (see group_along), computed on
/// the frame's first collective over these axes in this order and kept for its others.
template <std::size_t K>
group const& group_of(spmd_frame& f, std::array<std::size_t, K> const& axes) {
  std::uint64_t order = 0;
  for (std::size_t i = 0; i < K; ++i) order |= static_cast<std::uint64_t>(axes[i]) << (4 * i);
  for (auto const& c : f.groups)
    if (c.count == K + 1 && c.order == order) return c.g;
  // The slot's earlier group may go: a device makes one collective at a time, and the group a
  // collective holds is the one it looked up last.
  auto& slot = f.groups[f.next_group++ % f.groups.size()];
  slot.order = order;
  slot.count = K + 1;
  slot.g = group_along(f.pos, f.sizes, axes);
  return slot.g;
}

/// Collective kinds, as signature codes; kind 0 is "the end of the body".
enum class op_kind : std::uint32_t { end = 0, psum, pmax, pmin, pmean, all_gather, psum_scatter, all_to_all, ppermute };

inline char const* op_name(std::uint32_t k) {
  static constexpr char const* names[] = {"the end of the shard_map body", "psum", "pmax", "pmin", "pmean",
                                          "all_gather", "psum_scatter", "all_to_all", "ppermute"};
  return k < std::size(names) ? names[k] : "an unknown collective";
}

/// Text of a signature for error messages, with the mesh's axis names.
template <class Mesh>
std::string describe_op(op_signature const& s) {
  std::string text = op_name(s.kind);
  if (s.kind == 0) return text;
  std::vector<std::string_view> names;
  for (std::size_t i = 0; i < Mesh::rank && i < max_mesh_axes; ++i)
    if (s.axes & (std::uint64_t{1} << i)) names.emplace_back();
  std::size_t const n = names.size();
  for (std::size_t i = 0; i < n; ++i) names[i] = Mesh::axes[(s.order >> (4 * i)) & 0xF].name.view();
  return text + " over " + axes_text(names) + " of " + std::to_string(s.count) + " " + dtype_text(s.dtype) +
         " elements per device";
}

}  // namespace tessera::detail
