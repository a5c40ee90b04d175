#pragma once
// The exception a caller sees when code running on devices threw.

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

/// Thrown by the caller of a device dispatch when one or more devices threw; none is lost.
class device_error : public std::runtime_error {
 public:
  using failure = std::pair<int, std::exception_ptr>;

  explicit device_error(std::vector<failure> failures)
      : std::runtime_error(describe(failures)), failures_(std::move(failures)) {}

  /// Id of the first (lowest-numbered) device that threw.
  int device() const { return failures_.front().first; }
  /// Every device that threw, in device order, with its exception.
  std::vector<failure> const& failures() const { return failures_; }
  /// Rethrows the first device's original exception (to catch it by its own type).
  [[noreturn]] void rethrow_first() const { std::rethrow_exception(failures_.front().second); }

 private:
  static std::string message_of(std::exception_ptr const& e) {
    try {
      std::rethrow_exception(e);
    } catch (std::exception const& x) {
      return x.what();
    } catch (...) {
      return "a non-std::exception object";
    }
  }
  static std::string describe(std::vector<failure> const& fs) {
    std::string s = "tessera: device " + std::to_string(fs.front().first) + " threw: " + message_of(fs.front().second);
    for (std::size_t i = 1; i < fs.size(); ++i)
      s += "; device " + std::to_string(fs[i].first) + " threw: " + message_of(fs[i].second);
    return s;
  }
  std::vector<failure> failures_;
};

}  // namespace tessera
