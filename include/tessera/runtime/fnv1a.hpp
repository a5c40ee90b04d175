#pragma once
// FNV-1a, the hash processes compare to agree before they act together: the host data of a
// device_put, the signature of an exchange between processes.

#include <cstddef>
#include <cstdint>

namespace tessera::detail {

/// FNV-1a of n bytes at p, continuing from h.
inline std::uint64_t fnv1a(void const* p, std::size_t n, std::uint64_t h = 14695981039346656037ull) {
  auto const* b = static_cast<unsigned char const*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/// h continued with the bytes of a trivially copyable value.
template <class T>
std::uint64_t fnv1a_value(std::uint64_t h, T const& v) {
  return fnv1a(&v, sizeof(T), h);
}

}  // namespace tessera::detail
