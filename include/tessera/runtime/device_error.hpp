#pragma once
// The exception a caller sees when code running on devices threw.

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/detail/linkage.hpp"

namespace tessera {

/// Thrown by the caller of a device dispatch when one or more devices threw; none is lost.
class device_error : public std::runtime_error {
 public:
  using failure = std::pair<int, std::exception_ptr>;

  explicit device_error(std::vector<failure> failures)
      : std::runtime_error(describe(failures)), failures_(std::move(failures)) {}
  /// The same for a dispatch that was queued (asynchronous dispatch): the message names the
  /// operation `what`, since the error surfaces at a later wait, not at the call that made it.
  device_error(std::vector<failure> failures, char const* what)
      : std::runtime_error(std::string("tessera: ") + what + " (dispatched asynchronously) failed: " +
                           describe(failures).substr(9)),
        failures_(std::move(failures)) {}

  /// Id of the first (lowest-numbered) device that threw.
  int device() const { return failures_.front().first; }
  /// Every device that threw, in device order, with its exception.
  std::vector<failure> const& failures() const { return failures_; }
  /// Rethrows the first device's original exception (to catch it by its own type).
  [[noreturn]] void rethrow_first() const { std::rethrow_exception(failures_.front().second); }

  /// What an exception says: its what(), or that it is not a std::exception.
  static std::string message_of(std::exception_ptr const& e);

 private:
  static std::string describe(std::vector<failure> const& fs);
  std::vector<failure> failures_;
};

// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS

TESSERA_LINKAGE std::string device_error::message_of(std::exception_ptr const& e) {
  try {
    std::rethrow_exception(e);
  } catch (std::exception const& x) {
    return x.what();
  } catch (...) {
    return "a non-std::exception object";
  }
}

TESSERA_LINKAGE std::string device_error::describe(std::vector<failure> const& fs) {
  std::string s = "tessera: device " + std::to_string(fs.front().first) + " threw: " + message_of(fs.front().second);
  for (std::size_t i = 1; i < fs.size(); ++i)
    s += "; device " + std::to_string(fs[i].first) + " threw: " + message_of(fs[i].second);
  return s;
}
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera
