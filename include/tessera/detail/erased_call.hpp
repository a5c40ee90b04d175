#pragma once
// A callable handed to code compiled once, as a function pointer and a context pointer: only
// the small thunk call_erased<F, Args...> depends on the callable's type (issue 14: dispatches,
// build_array and call_once were compiled once per lambda before).

#include <memory>
#include <type_traits>

namespace tessera::detail {

/// Calls the callable of type F behind `ctx` (a pointer from erased_context) with `args`.
template <class F, class... Args>
void call_erased(void* ctx, Args... args) {
  (*static_cast<F*>(ctx))(static_cast<Args>(args)...);
}

/// f as the context pointer call_erased<std::remove_reference_t<decltype(f)>, ...> expects.
template <class F>
void* erased_context(F& f) {
  return const_cast<void*>(static_cast<void const*>(std::addressof(f)));
}

}  // namespace tessera::detail
