#pragma once
// std::call_once with its machinery compiled once: libstdc++'s call_once instantiates a
// thread-local trampoline per callable, and expressions cache their values through it, so a
// test file of a thousand expressions paid for a thousand copies (issue 14).

#include <mutex>
#include <type_traits>

#include "tessera/detail/erased_call.hpp"

namespace tessera::detail {

/// std::call_once(once, fn, ctx) for a plain function: the one instantiation every caller shares.
inline void call_once_erased(std::once_flag& once, void (*fn)(void*), void* ctx) { std::call_once(once, fn, ctx); }

/// std::call_once(once, f): f() runs the first time only; if it throws, the next call runs it again.
template <class F>
void call_once(std::once_flag& once, F&& f) {
  call_once_erased(once, &call_erased<std::remove_reference_t<F>>, erased_context(f));
}

}  // namespace tessera::detail
