#pragma once
// The devices of one SPMD run (a shard_map call) as a team: the barriers of the
// collectives, which a failing device can break, and one mailbox per device
// where it publishes its buffers and the description of the collective it is in.
// Every collective compares the descriptions of its group after its entry, so
// devices that call different collectives get an error naming both, not a hang.
//
// Each device counts the barrier phases it has reached in a futex word of its
// own, and a barrier waits only for the words of the collective's group: the
// groups along one mesh axis do not wait for each other. The same word carries
// an abort bit. A collective has an entry (abortable: a member may never come)
// and an exit (not abortable: every member that entered comes, and until it has
// it may be reading or writing the others' buffers). A device that fails sets
// the abort bit on every word; an entry arrival is then refused, so a member
// that had not arrived never will, and its group gives up without anyone having
// touched a buffer. The phase stamped on each mailbox turns a mailbox from
// another phase (only in a wrong program, whose devices drift apart) into a
// reported mismatch rather than a misread.
//
// Asynchronous collectives (parallel/async_collectives.hpp) do not take barrier phases: a start
// leaves the device's input, kept alive by the exchange, and its signature in a rendezvous of
// the team's async board, and goes on; a wait blocks only until the group's members have started
// the same collective, then pulls the inputs it needs. A wait never depends on a peer's wait, so
// waits may come in any order and a future dropped without one leaves no peer hanging. A peer
// that has instead gone on to a barrier phase this device has not reached is in another
// collective: a mismatch, reported instead of a hang.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <ctime>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "tessera/runtime/device_error.hpp"
#include "tessera/runtime/trace.hpp"
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

/// The devices taking part in one collective: team positions in rank order
/// (axis_index order over the collective's axes) and the caller's rank among them.
struct group {
  std::vector<std::size_t> members;
  std::size_t rank = 0;
  std::size_t size() const { return members.size(); }
};

/// Packs the axes of a collective into a signature.
inline void sign_axes(op_signature& s, std::span<std::size_t const> axes) {
  for (std::size_t i = 0; i < axes.size(); ++i) {
    s.axes |= std::uint64_t{1} << axes[i];
    s.order |= static_cast<std::uint64_t>(axes[i]) << (4 * i);
  }
}

/// Element type code for signatures: size, floating, signed, bool.
template <class T>
constexpr std::uint32_t dtype_code() {
  return static_cast<std::uint32_t>(sizeof(T)) | (std::is_floating_point_v<T> ? 0x100u : 0u) |
         (std::is_signed_v<T> ? 0x200u : 0u) | (std::is_same_v<T, bool> ? 0x400u : 0u);
}

/// The JAX name of a dtype_code (`int32`, `float64`, `bool`).
inline std::string dtype_text(std::uint32_t code) {
  if (code & 0x400u) return "bool";
  std::string const bits = std::to_string(8 * (code & 0xFFu));
  if (code & 0x100u) return "float" + bits;
  return ((code & 0x200u) ? "int" : "uint") + bits;
}

/// One device's mailbox: where its input and output live during a collective, and which collective it is.
struct alignas(64) mailbox {
  void const* in = nullptr;
  void* out = nullptr;
  // The signature, as a seqlock: `stamp` is odd while the owner writes it and 2c + 2 once the
  // signature of the collective it entered at its phase c is complete, so a reader out of
  // step with the owner (only in a wrong program) never takes half of one for a match.
  std::atomic<std::uint64_t> stamp{0};
  std::atomic<std::uint64_t> words[6]{};
};

/// One device's part of an asynchronous collective: its input (kept alive by `keep` until every
/// member has read it) and its signature, published before `arrived` is set.
struct async_entry {
  std::atomic<bool> arrived{false};
  op_signature sig;
  void const* in = nullptr;
  std::shared_ptr<void const> keep;
};

/// The meeting point of the team's asynchronous collectives number `seq` (the devices' common
/// collective count), one entry per team position; the futures of its devices hold it.
struct async_rendezvous {
  async_rendezvous(std::uint32_t s, std::size_t n) : seq(s), entries(std::make_unique<async_entry[]>(n)) {}
  std::uint32_t seq;
  std::unique_ptr<async_entry[]> entries;
  std::size_t started = 0;  // under the board's lock
  // Between processes: the process's exchange (parallel/async_gathered.hpp), made with the
  // rendezvous, so every device sees the same one; erased, since runtime/ does not know its type.
  std::shared_ptr<void> process_part;
};

/// The team's open rendezvous (those not every device has started yet) and the word their
/// waiters sleep on, bumped by every start and by an abort.
class async_board {
 public:
  /// Device `pos` of `n` starts collective `sig` (number sig.seq) with input `in`. `*last` (if
  /// given) tells whether this start was the last of the n; `make_part` (if given) makes the
  /// rendezvous's process_part when this start opens it.
  std::shared_ptr<async_rendezvous> start(std::size_t n, std::size_t pos, op_signature const& sig, void const* in,
                                          std::shared_ptr<void const> keep, bool* last = nullptr,
                                          std::shared_ptr<void> (*make_part)() = nullptr) {
    std::shared_ptr<async_rendezvous> rv;
    {
      std::lock_guard lock(mutex_);
      for (auto& r : open_)
        if (r->seq == sig.seq) rv = r;
      if (!rv) {
        rv = std::make_shared<async_rendezvous>(sig.seq, n);
        if (make_part != nullptr) rv->process_part = make_part();
        open_.push_back(rv);
      }
      async_entry& e = rv->entries[pos];
      e.sig = sig;
      e.in = in;
      e.keep = std::move(keep);
      e.arrived.store(true, std::memory_order_release);
      bool const complete = ++rv->started == n;
      if (complete) open_.erase(std::find(open_.begin(), open_.end(), rv));
      if (last != nullptr) *last = complete;
    }
    wake();
    return rv;
  }
  std::uint32_t word() const { return word_.load(std::memory_order_acquire); }
  /// Wakes every waiter (a start, or the run's abort).
  void wake() noexcept {
    word_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) != 0) {
#if defined(__linux__)
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
#endif
    }
  }
  /// Sleeps until the word changes from `old` or about a millisecond has passed (the waiter then
  /// looks at its peers' barrier phases again, which do not wake it).
  void sleep(std::uint32_t old) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (word_.load(std::memory_order_seq_cst) == old) {
#if defined(__linux__)
      timespec const t{0, 1'000'000};
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, old, &t, nullptr, 0);
#else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
#endif
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  }

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<async_rendezvous>> open_;
  std::atomic<std::uint32_t> word_{0};
  std::atomic<std::uint32_t> sleepers_{0};
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "futex needs a plain 32-bit word");
};

/// The n devices of one run, by position 0..n-1 (their mesh positions).
class team {
 public:
  explicit team(std::size_t n, std::vector<int> device_ids) : team(n, std::span<int const>{}) {
    owned_ids_ = std::move(device_ids);
    ids_ = owned_ids_;
  }
  /// A team whose device ids the caller keeps alive for the team's lifetime (a shard_map's mesh
  /// or process layout): no copy of them on every call.
  team(std::size_t n, std::span<int const> device_ids)
      : n_(n), ids_(device_ids), spin_(spin_budget(static_cast<unsigned>(n))) {
    // A small team (a shard_map on a few devices, or one per process) lives in the object
    // itself: an over-aligned heap array cost a shard_map between processes a tenth of its time.
    if (n > small) {
      heap_ = std::make_unique<member[]>(n);
      members_ = heap_.get();
      all_heap_.resize(n);
      for (std::size_t p = 0; p < n; ++p) all_heap_[p] = p;
      all_ = all_heap_;
    } else {
      members_ = inline_.data();
      all_ = std::span<std::size_t const>(iota_.data(), n);
    }
  }
  team(team const&) = delete;
  team& operator=(team const&) = delete;

  std::size_t size() const { return n_; }
  int device_id(std::size_t pos) const { return ids_[pos]; }
  mailbox& box(std::size_t pos) { return members_[pos].box; }
  mailbox const& box(std::size_t pos) const { return members_[pos].box; }

  /// One barrier phase of the whole team, as a collective's entry: waits until all n devices
  /// arrive; throws collective_aborted if the run was aborted before they all did.
  void arrive_and_wait(std::size_t pos) { meet(pos, all_); }

  /// Publishes `sig` (with `in`/`out`) for device `pos`, waits for the members of `g`, and
  /// checks that each is in the same collective: collective_mismatch naming two devices if
  /// not, collective_aborted if the run was aborted before every member arrived.
  void enter(std::size_t pos, group const& g, op_signature const& sig, void const* in, void* out) {
    std::uint32_t const phase = publish(pos, sig, in, out);
    {
      trace_wait waiting;  // the time this device waits for the others, in its collective's span
      meet(pos, g.members);
    }
    for (std::size_t q : g.members)
      if (q != pos) check(pos, q, phase, sig);
  }

  /// enter() over the whole team (the end of a shard_map body).
  void enter(std::size_t pos, op_signature const& sig, void const* in, void* out) {
    std::uint32_t const phase = publish(pos, sig, in, out);
    {
      trace_wait waiting;
      meet(pos, all_);
    }
    for (std::size_t q = 0; q < n_; ++q)
      if (q != pos) check(pos, q, phase, sig);
  }

  /// A collective's last barrier phase: waits until every member of `g` is done with the
  /// buffers (they entered, so nothing can stop them). A device leaves a collective only through here or before
  /// its entry completed, so no peer ever touches the buffers of a device that has left.
  void leave(std::size_t pos, group const& g) {
    std::uint32_t const phase = arrive(pos, false);
    trace_wait waiting;
    for (std::size_t q : g.members)
      if (q != pos) await(q, phase, false);
    // The collective completed, so the device goes on even if another failed meanwhile: it
    // reports its own error if it has one (which of several failing devices are reported
    // must not depend on timing), and its next entry is refused if it has none.
  }

  /// The board of this run's asynchronous collectives.
  async_board& async() { return board_; }

  /// Waits until every member of `g` has started the asynchronous collective of `rv` and checks
  /// that each started the same one as `sig` (device `pos`'s): collective_mismatch naming two
  /// devices if not, or if a member has gone on to a barrier phase this device has not reached
  /// (it is in a blocking collective, or at the end of its body, instead); collective_aborted if
  /// the run was aborted before every member started it.
  void await_async(std::size_t pos, group const& g, async_rendezvous const& rv, op_signature const& sig) {
    trace_wait waiting;
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_);
    for (std::uint32_t round = 0;; ++round) {
      std::uint32_t const seen = board_.word();
      std::size_t missing = n_;
      for (std::size_t q : g.members)
        if (!rv.entries[q].arrived.load(std::memory_order_acquire)) {
          missing = q;
          break;
        }
      if (missing == n_) break;
      if (aborted()) throw collective_aborted();
      std::uint32_t const theirs = members_[missing].reached.load();
      std::uint32_t const mine = members_[pos].phase;
      if (has_reached(theirs & count_mask, (mine + 1) & count_mask)) elsewhere(pos, missing, mine + 1, sig);
      if (round < 64 || (spin_ != 0 && std::chrono::steady_clock::now() < deadline)) {
        cpu_relax();
        if ((round & 7u) == 7u) std::this_thread::yield();
      } else {
        board_.sleep(seen);
      }
    }
    for (std::size_t q : g.members) {
      if (q == pos) continue;
      op_signature theirs = rv.entries[q].sig;
      if (theirs.same_as(sig)) continue;
      theirs.describe = sig.describe;
      throw collective_mismatch(disagreement(pos, sig, q, theirs, true));
    }
  }

  /// Breaks every wait of this run that can still be broken (a device failed): arrivals at
  /// an entry are refused from now on, and whoever waits for a device that has not arrived gives up.
  void abort() noexcept {
    aborted_.store(true, std::memory_order_seq_cst);
    for (std::size_t q = 0; q < n_; ++q) members_[q].reached.update([](std::uint32_t v) { return v | aborted_bit; });
    board_.wake();
  }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  // A device's word: the phases it has reached (mod 2^31) and, on top, the abort bit.
  static constexpr std::uint32_t aborted_bit = 0x8000'0000u;
  static constexpr std::uint32_t count_mask = 0x7FFF'FFFFu;

  struct alignas(64) member {
    wait_word reached;        // phases reached, and the abort bit; its peers wait on it
    std::uint32_t phase = 0;  // the count, the owner's copy
    mailbox box;
  };

  static bool has_reached(std::uint32_t word, std::uint32_t phase) {
    return ((word - phase) & count_mask) <= (count_mask >> 1);  // word >= phase, mod 2^31
  }
  static std::uint64_t stamp_of(std::uint32_t phase) { return 2 * std::uint64_t{phase} + 2; }

  /// Counts device pos's arrival at its next phase and returns that phase. An abortable
  /// arrival (at an entry) is refused once the run is aborted: collective_aborted.
  std::uint32_t arrive(std::size_t pos, bool abortable) {
    member& m = members_[pos];
    bool refused = false;
    m.reached.update([&](std::uint32_t v) {
      refused = abortable && (v & aborted_bit) != 0;
      return refused ? v : (v & aborted_bit) | ((v + 1) & count_mask);
    });
    if (refused) throw collective_aborted();
    m.phase = (m.phase + 1) & count_mask;
    return m.phase;
  }

  /// Waits until device q has reached `phase`. When abortable, throws collective_aborted once
  /// the run is aborted and q has not arrived: its arrival is then refused, so it never will,
  /// and no member can get past this phase to touch the caller's buffers.
  void await(std::size_t q, std::uint32_t phase, bool abortable) {
    wait_word& w = members_[q].reached;
    for (std::uint32_t v = w.load(); !has_reached(v, phase); v = w.wait_for_change(v, spin_))
      if (abortable && (v & aborted_bit) != 0) throw collective_aborted();
  }

  /// An entry phase among `members`. Once every member has arrived, all go on even if the run
  /// was aborted meanwhile: they may already be reading each other's buffers.
  void meet(std::size_t pos, std::span<std::size_t const> members) {
    std::uint32_t const phase = arrive(pos, true);
    for (std::size_t q : members)
      if (q != pos) await(q, phase, true);
  }

  /// Writes the mailbox for the phase the next arrival reaches; returns that phase.
  std::uint32_t publish(std::size_t pos, op_signature const& sig, void const* in, void* out) {
    member& m = members_[pos];
    std::uint32_t const phase = (m.phase + 1) & count_mask;
    mailbox& b = m.box;
    b.in = in;
    b.out = out;
    b.stamp.store(stamp_of(phase) - 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    std::uint64_t const w[6] = {std::uint64_t{sig.seq} << 32 | sig.kind, sig.axes, sig.order, sig.count, sig.param,
                                sig.dtype};
    for (int i = 0; i < 6; ++i) b.words[i].store(w[i], std::memory_order_relaxed);
    b.stamp.store(stamp_of(phase), std::memory_order_release);
    return phase;
  }

  /// Throws collective_mismatch unless device q published `mine` for the same phase.
  void check(std::size_t pos, std::size_t q, std::uint32_t phase, op_signature const& mine) const {
    mailbox const& b = members_[q].box;
    std::uint64_t const before = b.stamp.load(std::memory_order_acquire);
    std::uint64_t w[6];
    for (int i = 0; i < 6; ++i) w[i] = b.words[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    std::uint64_t const after = b.stamp.load(std::memory_order_relaxed);
    op_signature theirs;
    theirs.seq = static_cast<std::uint32_t>(w[0] >> 32);
    theirs.kind = static_cast<std::uint32_t>(w[0]);
    theirs.axes = w[1];
    theirs.order = w[2];
    theirs.count = w[3];
    theirs.param = w[4];
    theirs.dtype = static_cast<std::uint32_t>(w[5]);
    theirs.describe = mine.describe;  // one mesh, one describer
    bool const in_step = before == after && before == stamp_of(phase);
    if (in_step && theirs.same_as(mine)) return;
    throw collective_mismatch(disagreement(pos, mine, q, theirs, in_step));
  }

  /// The message of a collective_mismatch between device pos (in `mine`) and device q.
  std::string disagreement(std::size_t pos, op_signature const& mine, std::size_t q, op_signature const& theirs,
                           bool in_step) const {
    std::string mine_text = text(mine), theirs_text = text(theirs);
    if (mine_text == theirs_text) {  // the same words: the difference is in what the text leaves out
      mine_text += " with " + arguments(mine);
      theirs_text += " with " + arguments(theirs);
    }
    return "tessera: devices of one shard_map disagree on the collective: device " + std::to_string(ids_[pos]) +
           " is in " + mine_text + " but device " + std::to_string(ids_[q]) + " is in " + theirs_text +
           (in_step ? "" : " at another step of its body") +
           "; every device must call the same collectives in the same order";
  }

  /// Device q, which has not started the asynchronous collective `mine` that device pos waits
  /// for, has reached barrier phase `phase`, which pos has not: it is in another collective.
  [[noreturn]] void elsewhere(std::size_t pos, std::size_t q, std::uint32_t phase, op_signature const& mine) const {
    mailbox const& b = members_[q].box;
    std::uint64_t const stamp = b.stamp.load(std::memory_order_acquire);
    op_signature theirs;
    std::uint64_t const w0 = b.words[0].load(std::memory_order_relaxed);
    theirs.seq = static_cast<std::uint32_t>(w0 >> 32);
    theirs.kind = static_cast<std::uint32_t>(w0);
    theirs.axes = b.words[1].load(std::memory_order_relaxed);
    theirs.order = b.words[2].load(std::memory_order_relaxed);
    theirs.count = b.words[3].load(std::memory_order_relaxed);
    theirs.describe = mine.describe;
    std::string const theirs_text =
        stamp == stamp_of(phase) && b.stamp.load(std::memory_order_acquire) == stamp ? text(theirs)
                                                                                      : std::string("another collective");
    throw collective_mismatch("tessera: devices of one shard_map disagree on the collective: device " +
                              std::to_string(ids_[pos]) + " waits for " + text(mine) + " (started asynchronously) but device " +
                              std::to_string(ids_[q]) + " is in " + theirs_text +
                              " without having started it; every device must call the same collectives in the same order");
  }

  /// The parts of a signature the describer does not print: element type and arguments.
  static std::string arguments(op_signature const& s) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(s.param));
    return "element type " + dtype_text(s.dtype) + " and arguments (shape, dimensions, permutation) hashed to " + hex;
  }

  static std::string text(op_signature const& s) {
    return (s.describe ? s.describe(s) : std::string("an unknown collective")) + " (collective #" +
           std::to_string(s.seq) + ")";
  }

  static constexpr std::size_t small = 4;
  static constexpr std::array<std::size_t, small> iota_{0, 1, 2, 3};

  std::size_t n_;
  std::vector<int> owned_ids_;
  std::span<int const> ids_;
  std::array<member, small> inline_{};
  std::unique_ptr<member[]> heap_;
  member* members_ = nullptr;
  std::vector<std::size_t> all_heap_;
  std::span<std::size_t const> all_;  // 0 .. n-1
  std::uint32_t spin_;
  std::atomic<bool> aborted_{false};
  async_board board_;
};

/// The caller-visible error of a failed run: the devices that failed, not those whose
/// collective was abandoned because of them.
inline device_error without_abandoned(device_error const& e) {
  std::vector<device_error::failure> kept;
  for (auto const& f : e.failures()) {
    try {
      std::rethrow_exception(f.second);
    } catch (collective_aborted const&) {
    } catch (...) {
      kept.push_back(f);
    }
  }
  return kept.empty() ? e : device_error(std::move(kept));
}

}  // namespace detail
}  // namespace tessera
