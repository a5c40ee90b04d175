#pragma once
// The devices of one SPMD run (a shard_map call) as a team: a barrier that a
// failing device can break, and one mailbox per device where it publishes the
// buffers and the description of the collective it is in. Every collective
// compares the descriptions after its first barrier, so devices that call
// different collectives get an error naming both, never a hang.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/runtime/wait_policy.hpp"

namespace tessera {

/// Thrown on a device waiting in a collective when another device of the same run failed;
/// shard_map reports the failing device, not these.
class collective_aborted : public std::runtime_error {
 public:
  collective_aborted()
      : std::runtime_error("tessera: collective abandoned because another device of this shard_map failed") {}
};

/// Devices of one shard_map reached different collectives (or one returned while others are in a collective).
class collective_mismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

/// What a device says about the collective it is in; equal on every device when the program is SPMD.
struct op_signature {
  std::uint32_t seq = 0;          // how many collectives this device has started in this run
  std::uint32_t kind = 0;         // which collective (an index into op names, 0 = the end of the body)
  std::uint64_t axes = 0;         // bit i: mesh axis i; the order of the axes is in `order`
  std::uint64_t order = 0;        // the axes in the order given, 4 bits each
  std::uint64_t count = 0;        // elements per device
  std::uint64_t param = 0;        // the collective's own arguments (dimension, tiled, ...), packed
  std::uint32_t dtype = 0;        // element size and kind
  std::string (*describe)(op_signature const&) = nullptr;  // for error messages only

  bool same_as(op_signature const& o) const {
    return seq == o.seq && kind == o.kind && axes == o.axes && order == o.order && count == o.count &&
           param == o.param && dtype == o.dtype;
  }
};

/// One device's mailbox: where its input and output live during a collective.
struct alignas(64) mailbox {
  void const* in = nullptr;
  void* out = nullptr;
  op_signature sig;
};

/// The n devices of one run, by position 0..n-1 (their mesh positions).
class team {
 public:
  explicit team(std::size_t n, std::vector<int> device_ids)
      : n_(n), ids_(std::move(device_ids)), boxes_(std::make_unique<mailbox[]>(n)),
        spin_(spin_budget(static_cast<unsigned>(n))) {}
  team(team const&) = delete;
  team& operator=(team const&) = delete;

  std::size_t size() const { return n_; }
  int device_id(std::size_t pos) const { return ids_[pos]; }
  mailbox& box(std::size_t pos) { return boxes_[pos]; }
  mailbox const& box(std::size_t pos) const { return boxes_[pos]; }

  /// Waits until all n devices arrive; throws collective_aborted if the run was aborted.
  void arrive_and_wait() {
    if (aborted_.load(std::memory_order_acquire)) throw collective_aborted();
    std::uint32_t const gen = generation_.load();
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.bump();
    } else {
      generation_.wait_for_change(gen, spin_);
    }
    if (aborted_.load(std::memory_order_acquire)) throw collective_aborted();
  }

  /// Breaks every current and future wait of this run (a device failed).
  void abort() noexcept {
    aborted_.store(true, std::memory_order_release);
    generation_.bump();
  }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  /// Publishes `sig` (with `in`/`out`) for device `pos`, waits for all, and checks that every
  /// device is in the same collective. Throws collective_mismatch naming the devices otherwise.
  void enter(std::size_t pos, op_signature const& sig, void const* in, void* out) {
    auto& b = boxes_[pos];
    b.sig = sig;
    b.in = in;
    b.out = out;
    arrive_and_wait();
    for (std::size_t q = 0; q < n_; ++q) {
      if (boxes_[q].sig.same_as(sig)) continue;
      throw collective_mismatch("tessera: devices of one shard_map disagree on the collective: device " +
                                std::to_string(ids_[pos]) + " is in " + text(sig) + " but device " +
                                std::to_string(ids_[q]) + " is in " + text(boxes_[q].sig) +
                                "; every device must call the same collectives in the same order");
    }
  }

 private:
  static std::string text(op_signature const& s) {
    return (s.describe ? s.describe(s) : std::string("an unknown collective")) + " (collective #" +
           std::to_string(s.seq) + ")";
  }

  std::size_t n_;
  std::vector<int> ids_;
  std::unique_ptr<mailbox[]> boxes_;
  std::uint32_t spin_;
  alignas(64) std::atomic<std::size_t> arrived_{0};
  alignas(64) wait_word generation_;
  std::atomic<bool> aborted_{false};
};

}  // namespace detail
}  // namespace tessera
