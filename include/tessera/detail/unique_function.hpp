#pragma once
// A move-only owning callable, for the steps tessera stores per operation (autodiff's tape,
// deferred values, pass preludes). std::function costs each stored lambda a manager (type info,
// clone, destroy) and std::__invoke's traits: about eleven functions per lambda type, 12% of the
// functions of a test file (tests/unit/scan_test.cpp: 388 lambdas, 4300 of 35000 functions at
// -O0). This one needs two thunks per lambda type, and no copy of the lambda is ever made.

#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>

namespace tessera::detail {

template <class Sig>
class unique_function;

/// A std::function<R(Args...)> that owns a callable it never copies (move-only).
template <class R, class... Args>
class unique_function<R(Args...)> {
 public:
  unique_function() noexcept = default;
  unique_function(std::nullptr_t) noexcept {}  // NOLINT: as std::function
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, unique_function> && !std::is_same_v<std::remove_cvref_t<F>, std::nullptr_t>)
  unique_function(F&& f)  // NOLINT: converts, as std::function does
      : obj_(new std::remove_cvref_t<F>(std::forward<F>(f))),
        call_(&invoke<std::remove_cvref_t<F>>),
        drop_(&destroy<std::remove_cvref_t<F>>) {}
  unique_function(unique_function&& o) noexcept
      : obj_(std::exchange(o.obj_, nullptr)), call_(std::exchange(o.call_, nullptr)), drop_(std::exchange(o.drop_, nullptr)) {}
  unique_function& operator=(unique_function&& o) noexcept {
    if (this != &o) {
      reset();
      obj_ = std::exchange(o.obj_, nullptr);
      call_ = std::exchange(o.call_, nullptr);
      drop_ = std::exchange(o.drop_, nullptr);
    }
    return *this;
  }
  unique_function(unique_function const&) = delete;
  unique_function& operator=(unique_function const&) = delete;
  ~unique_function() { reset(); }

  explicit operator bool() const noexcept { return call_ != nullptr; }

  /// Calls the callable (as std::function does, a const call of a callable that may change).
  R operator()(Args... args) const {
    if (call_ == nullptr) throw std::bad_function_call();
    return call_(obj_, std::forward<Args>(args)...);
  }

 private:
  template <class F>
  static R invoke(void* f, Args&&... args) {
    if constexpr (std::is_void_v<R>) (*static_cast<F*>(f))(std::forward<Args>(args)...);
    else return (*static_cast<F*>(f))(std::forward<Args>(args)...);
  }
  template <class F>
  static void destroy(void* f) noexcept {
    delete static_cast<F*>(f);
  }
  void reset() noexcept {
    if (drop_ != nullptr) drop_(obj_);
    obj_ = nullptr;
    call_ = nullptr;
    drop_ = nullptr;
  }

  void* obj_ = nullptr;
  R (*call_)(void*, Args&&...) = nullptr;
  void (*drop_)(void*) noexcept = nullptr;
};

}  // namespace tessera::detail
