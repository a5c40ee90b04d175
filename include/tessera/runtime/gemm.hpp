#pragma once
// The local matrix product: C[M,N] (+)= A[M,K] * B[K,N] on one device's blocks, row-major,
// single-threaded (the device pool is the only parallelism: each device thread calls it on
// its own blocks).
//
// float and double go to the BLAS that CMake found (cblas_sgemm/cblas_dgemm, OpenBLAS
// preferred) when the target tessera::tessera carries TESSERA_HAS_CBLAS, and otherwise to
// tessera's own kernel: A and B packed into aligned panels, an xsimd register-blocked
// micro-kernel (MR rows x two batches) over them. Integers (and bool) always use a
// cache-blocked loop that wraps as jnp's integer matmul does. `matmul_backend()` says which
// one a build uses.
//
// Both variants live in an inline namespace named after the choice, so translation units
// compiled with and without TESSERA_HAS_CBLAS link different symbols rather than break the
// one-definition rule.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "tessera/runtime/call_once.hpp"
#include "tessera/runtime/simd.hpp"

#ifdef TESSERA_HAS_CBLAS
#define TESSERA_GEMM_STR2(x) #x
#define TESSERA_GEMM_STR(x) TESSERA_GEMM_STR2(x)
// The two CBLAS entry points, declared under tessera's own names and bound to the C symbols
// with asm labels, so that a program which also includes some <cblas.h> (whose enums and
// integer typedefs differ between BLAS vendors) sees no conflicting declaration. The LP64
// interface (32-bit integers) is assumed; CMake asks FindBLAS for it. 101 = CblasRowMajor,
// 111 = CblasNoTrans in every CBLAS.
extern "C" void tessera_cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k,
                                    float alpha, float const* a, int lda, float const* b, int ldb,
                                    float beta, float* c, int ldc)
    __asm__(TESSERA_GEMM_STR(__USER_LABEL_PREFIX__) "cblas_sgemm");
extern "C" void tessera_cblas_dgemm(int order, int trans_a, int trans_b, int m, int n, int k,
                                    double alpha, double const* a, int lda, double const* b,
                                    int ldb, double beta, double* c, int ldc)
    __asm__(TESSERA_GEMM_STR(__USER_LABEL_PREFIX__) "cblas_dgemm");
// OpenBLAS's thread count: weak, so it is null when the BLAS linked in is not OpenBLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
// The kernel family OpenBLAS chose for this CPU (weak likewise).
extern "C" char* openblas_get_corename(void) __attribute__((weak));
#undef TESSERA_GEMM_STR
#undef TESSERA_GEMM_STR2
#endif

namespace tessera::detail {

namespace gemm_blocking {

/// Whether the target has 32 vector registers (AVX-512, AArch64) rather than 16.
inline constexpr bool many_registers =
#if defined(__AVX512F__) || defined(__aarch64__)
    true;
#else
    false;
#endif

/// The register tile of the xsimd micro-kernel for T: MR rows by NB batches (NR elements).
/// MR * NB accumulators + NB loaded rows of B + 1 broadcast of A fit the register file.
template <class T>
struct tile {
  using batch = xsimd::batch<T>;
  static constexpr std::size_t width = batch::size;
  static constexpr std::size_t NB = 2;
  static constexpr std::size_t MR = many_registers ? 14 : 6;
  static constexpr std::size_t NR = NB * width;
  /// Cache blocks: a KC x NR sliver of B stays in L1, an MC x KC panel of A in L2, a
  /// KC x NC panel of B in L3.
  static constexpr std::size_t KC = 256;
  static constexpr std::size_t MC = MR * (many_registers ? 12 : 24);
  static constexpr std::size_t NC = NR * (4096 / NR);
};

/// An uninitialised buffer of n T aligned to 64 bytes.
template <class T>
class aligned_buffer {
 public:
  explicit aligned_buffer(std::size_t n)
      : p_(static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64}))) {}
  aligned_buffer(aligned_buffer const&) = delete;
  aligned_buffer& operator=(aligned_buffer const&) = delete;
  ~aligned_buffer() { ::operator delete(p_, std::align_val_t{64}); }
  T* get() const { return p_; }

 private:
  T* p_;
};

/// Packs rows [0, mc) x columns [0, kc) of A into slivers of MR rows: sliver s holds, for each
/// p, the MR values A[s*MR + i][p] one after another; rows past mc are zeros.
template <class T, std::size_t MR>
void pack_a(std::size_t mc, std::size_t kc, T const* a, std::size_t lda, T* out) {
  for (std::size_t i0 = 0; i0 < mc; i0 += MR) {
    std::size_t const rows = std::min(MR, mc - i0);
    for (std::size_t i = 0; i < rows; ++i) {
      T const* src = a + (i0 + i) * lda;
      for (std::size_t p = 0; p < kc; ++p) out[p * MR + i] = src[p];
    }
    for (std::size_t i = rows; i < MR; ++i)
      for (std::size_t p = 0; p < kc; ++p) out[p * MR + i] = T(0);
    out += MR * kc;
  }
}

/// Packs rows [0, kc) x columns [0, nc) of B into slivers of NR columns: sliver s holds, for
/// each p, the NR values B[p][s*NR + j] one after another; columns past nc are zeros.
template <class T, std::size_t NR>
void pack_b(std::size_t kc, std::size_t nc, T const* b, std::size_t ldb, T* out) {
  for (std::size_t j0 = 0; j0 < nc; j0 += NR) {
    std::size_t const cols = std::min(NR, nc - j0);
    for (std::size_t p = 0; p < kc; ++p) {
      T const* src = b + p * ldb + j0;
      T* dst = out + p * NR;
      std::memcpy(dst, src, cols * sizeof(T));
      for (std::size_t j = cols; j < NR; ++j) dst[j] = T(0);
    }
    out += NR * kc;
  }
}

/// The micro-kernel: the MR x NR tile at c (row stride ldc) = (overwrite ? 0 : c) + the
/// product of one packed sliver of A (MR x kc) and one of B (kc x NR).
template <class T>
void micro_kernel(std::size_t kc, T const* a, T const* b, T* c, std::size_t ldc, bool overwrite) {
  using tl = tile<T>;
  using batch = typename tl::batch;
  constexpr std::size_t MR = tl::MR, NB = tl::NB, W = tl::width;
  batch acc[MR][NB];
#pragma GCC unroll 16
  for (std::size_t i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (std::size_t j = 0; j < NB; ++j) acc[i][j] = batch(T(0));
  for (std::size_t p = 0; p < kc; ++p) {
    batch bv[NB];
#pragma GCC unroll 4
    for (std::size_t j = 0; j < NB; ++j) bv[j] = batch::load_unaligned(b + j * W);
#pragma GCC unroll 16
    for (std::size_t i = 0; i < MR; ++i) {
      batch const av(a[i]);
#pragma GCC unroll 4
      for (std::size_t j = 0; j < NB; ++j) acc[i][j] = xsimd::fma(av, bv[j], acc[i][j]);
    }
    a += MR;
    b += NB * W;
  }
#pragma GCC unroll 16
  for (std::size_t i = 0; i < MR; ++i) {
    T* row = c + i * ldc;
#pragma GCC unroll 4
    for (std::size_t j = 0; j < NB; ++j) {
      batch const r = overwrite ? acc[i][j] : acc[i][j] + batch::load_unaligned(row + j * W);
      r.store_unaligned(row + j * W);
    }
  }
}

/// The blocked xsimd product for float and double (M, N, K > 0).
template <class T>
void gemm_packed(std::size_t M, std::size_t N, std::size_t K, T const* A, std::size_t lda,
                 T const* B, std::size_t ldb, T* C, std::size_t ldc, bool accumulate) {
  using tl = tile<T>;
  constexpr std::size_t MR = tl::MR, NR = tl::NR;
  std::size_t const kc_max = std::min(K, tl::KC);
  std::size_t const mc_max = std::min((M + MR - 1) / MR * MR, tl::MC);
  std::size_t const nc_max = std::min((N + NR - 1) / NR * NR, tl::NC);
  aligned_buffer<T> const pa(mc_max * kc_max);
  aligned_buffer<T> const pb(kc_max * nc_max);
  alignas(64) T edge[MR * NR];

  for (std::size_t jc = 0; jc < N; jc += tl::NC) {
    std::size_t const nc = std::min(tl::NC, N - jc);
    for (std::size_t pc = 0; pc < K; pc += tl::KC) {
      std::size_t const kc = std::min(tl::KC, K - pc);
      bool const overwrite = pc == 0 && !accumulate;
      pack_b<T, NR>(kc, nc, B + pc * ldb + jc, ldb, pb.get());
      for (std::size_t ic = 0; ic < M; ic += tl::MC) {
        std::size_t const mc = std::min(tl::MC, M - ic);
        pack_a<T, MR>(mc, kc, A + ic * lda + pc, lda, pa.get());
        for (std::size_t jr = 0; jr < nc; jr += NR) {
          std::size_t const cols = std::min(NR, nc - jr);
          T const* bs = pb.get() + jr * kc;
          for (std::size_t ir = 0; ir < mc; ir += MR) {
            std::size_t const rows = std::min(MR, mc - ir);
            T const* as = pa.get() + ir * kc;
            T* c = C + (ic + ir) * ldc + jc + jr;
            if (rows == MR && cols == NR) {
              micro_kernel<T>(kc, as, bs, c, ldc, overwrite);
            } else {
              micro_kernel<T>(kc, as, bs, edge, NR, true);
              for (std::size_t i = 0; i < rows; ++i)
                for (std::size_t j = 0; j < cols; ++j)
                  c[i * ldc + j] = overwrite ? edge[i * NR + j] : c[i * ldc + j] + edge[i * NR + j];
            }
          }
        }
      }
    }
  }
}

/// The cache-blocked loop for other element types (M, N, K > 0): rows of C gather rows of B,
/// a block of K at a time. Integers wrap (runtime/wrapping.hpp: the arithmetic is done in an
/// unsigned type at least as wide as unsigned int, so nothing overflows); bool is "or" of "and"s.
template <class T>
void gemm_loop(std::size_t M, std::size_t N, std::size_t K, T const* A, std::size_t lda,
               T const* B, std::size_t ldb, T* C, std::size_t ldc, bool accumulate) {
  constexpr std::size_t KB = 256, NB = 1024;
  if (!accumulate)
    for (std::size_t i = 0; i < M; ++i) std::fill_n(C + i * ldc, N, T(0));
  for (std::size_t jc = 0; jc < N; jc += NB) {
    std::size_t const nb = std::min(NB, N - jc);
    for (std::size_t pc = 0; pc < K; pc += KB) {
      std::size_t const kb = std::min(KB, K - pc);
      for (std::size_t i = 0; i < M; ++i) {
        T* c = C + i * ldc + jc;
        for (std::size_t p = pc; p < pc + kb; ++p) {
          T const a = A[i * lda + p];
          T const* b = B + p * ldb + jc;
          std::size_t j = 0;
          if constexpr (simd::vectorised<T>) {
            // Signed integers through their unsigned twins (which may alias them): xsimd's
            // scalar fallbacks (32-bit multiplies before SSE4.1, 64-bit ones before AVX-512)
            // would overflow otherwise.
            using S = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                                  std::type_identity<T>>::type;
            using batch = xsimd::batch<S>;
            constexpr std::size_t W = batch::size;
            S* cs = reinterpret_cast<S*>(c);
            S const* bs = reinterpret_cast<S const*>(b);
            batch const av(static_cast<S>(a));
            for (; j + W <= nb; j += W)
              (batch::load_unaligned(cs + j) + av * batch::load_unaligned(bs + j))
                  .store_unaligned(cs + j);
          }
          for (; j < nb; ++j) c[j] = wrapping_add(c[j], wrapping_mul(a, b[j]));
        }
      }
    }
  }
}

/// The checks gemm and gemm_kernel share; false when there is nothing to multiply.
template <class T>
bool gemm_prologue(char const* name, std::size_t M, std::size_t N, std::size_t K,
                   std::size_t lda, std::size_t ldb, std::size_t ldc, T* C, bool accumulate) {
  auto fail = [&](char const* ld, std::size_t value, char const* dim, std::size_t extent) {
    throw std::invalid_argument(std::string(name) + ": " + ld + " = " + std::to_string(value) +
                                " is less than " + dim + " = " + std::to_string(extent) +
                                " (M = " + std::to_string(M) + ", N = " + std::to_string(N) +
                                ", K = " + std::to_string(K) + ")");
  };
  if (M == 0 || N == 0) return false;
  if (ldc < N) fail("ldc", ldc, "N", N);
  if (K == 0) {
    if (!accumulate)
      for (std::size_t i = 0; i < M; ++i) std::fill_n(C + i * ldc, N, T(0));
    return false;
  }
  if (lda < K) fail("lda", lda, "K", K);
  if (ldb < N) fail("ldb", ldb, "N", N);
  return true;
}

}  // namespace gemm_blocking

/// C[M,N] (+)= A[M,K] * B[K,N] with tessera's own kernel, whatever the build's BLAS: the
/// packed xsimd micro-kernel for float and double, the cache-blocked loop for every other
/// arithmetic type. Arguments as for gemm.
template <class T>
void gemm_kernel(std::size_t M, std::size_t N, std::size_t K, T const* A, std::size_t lda,
                 T const* B, std::size_t ldb, T* C, std::size_t ldc, bool accumulate) {
  static_assert(std::is_arithmetic_v<T>,
                "tessera::detail::gemm_kernel<T>: T must be an arithmetic type (bool, an integer "
                "or a floating-point type)");
  if (!gemm_blocking::gemm_prologue("tessera::detail::gemm_kernel", M, N, K, lda, ldb, ldc, C,
                                    accumulate))
    return;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    gemm_blocking::gemm_packed(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  else
    gemm_blocking::gemm_loop(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

#ifdef TESSERA_HAS_CBLAS
inline namespace gemm_cblas {
#else
inline namespace gemm_builtin {
#endif

#ifdef TESSERA_HAS_CBLAS
/// Every device thread calls the BLAS at once, so OpenBLAS must not add threads of its own:
/// its thread count is set to 1 once per process, before the first product. (This is
/// process-wide: a program that calls OpenBLAS itself gets one thread per call too, unless it
/// sets another count after tessera's first product.)
inline void blas_one_thread() {
  static std::once_flag once;
  detail::call_once(once, [] {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
  });
}

/// Whether OpenBLAS runs a kernel older than this build's own: a DYNAMIC_ARCH OpenBLAS that
/// does not know the CPU (OpenBLAS 0.3.21, Debian 12's, on a 2023 Xeon, family 6 model 207)
/// falls back to its SSE3 "Prescott" kernel, which multiplies a third as fast as its AVX-512
/// one (the transformer's step: 18 ms against 11 ms with OPENBLAS_CORETYPE=SkylakeX) and
/// slower than tessera's own kernel compiled for AVX2 or later (16 ms). Then tessera's kernel
/// is used; OPENBLAS_CORETYPE (Haswell, SkylakeX, ...) makes OpenBLAS pick its own again.
inline bool blas_kernel_generic() {
#if defined(__AVX2__) && defined(__FMA__) && (defined(__GNUC__) || defined(__clang__))
  static bool const generic = [] {
    if (!openblas_get_corename) return false;
    char const* core = openblas_get_corename();
    if (core == nullptr) return false;
    std::string_view const name(core);
    for (std::string_view const old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Katmai",
                                       "Coppermine", "Northwood", "Banias", "Atom", "Unknown"})
      if (name == old) return true;
    return false;
  }();
  return generic;
#else
  return false;  // this build's own kernel is no faster than any OpenBLAS kernel
#endif
}
#endif

/// C[M,N] (+)= A[M,K] * B[K,N], row-major with leading dimensions (element strides between
/// rows) lda >= K, ldb >= N, ldc >= N; accumulate=false overwrites C (its old values, NaN
/// included, are not read). M, N or K may be 0 (K == 0: C = 0, or unchanged when
/// accumulating). C must not overlap A or B. Runs on the calling thread only, and may be
/// called from several threads at once. Throws std::invalid_argument for a leading dimension
/// smaller than its row.
template <class T>
void gemm(std::size_t M, std::size_t N, std::size_t K, T const* A, std::size_t lda, T const* B,
          std::size_t ldb, T* C, std::size_t ldc, bool accumulate) {
  static_assert(std::is_arithmetic_v<T>,
                "tessera::detail::gemm<T>: T must be an arithmetic type (bool, an integer or a "
                "floating-point type)");
#ifdef TESSERA_HAS_CBLAS
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (!gemm_blocking::gemm_prologue("tessera::detail::gemm", M, N, K, lda, ldb, ldc, C,
                                      accumulate))
      return;
    constexpr std::size_t int_max = static_cast<std::size_t>(std::numeric_limits<int>::max());
    if (std::max({M, N, K, lda, ldb, ldc}) <= int_max && !blas_kernel_generic()) {
      blas_one_thread();
      auto const i = [](std::size_t v) { return static_cast<int>(v); };
      T const beta = accumulate ? T(1) : T(0);
      if constexpr (std::is_same_v<T, float>)
        tessera_cblas_sgemm(101, 111, 111, i(M), i(N), i(K), 1.0f, A, i(lda), B, i(ldb), beta, C,
                            i(ldc));
      else
        tessera_cblas_dgemm(101, 111, 111, i(M), i(N), i(K), 1.0, A, i(lda), B, i(ldb), beta, C,
                            i(ldc));
      return;
    }
  }
#endif
  gemm_kernel(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

/// Which kernel float/double products use in this build: "OpenBLAS (cblas_sgemm/cblas_dgemm,
/// 1 thread per call)", "cblas (cblas_sgemm/cblas_dgemm of the BLAS linked in)" or "tessera
/// xsimd kernel". Other element types always use tessera's own loop.
inline char const* gemm_backend() {
#ifdef TESSERA_HAS_CBLAS
  if (blas_kernel_generic())
    return "tessera xsimd kernel (OpenBLAS chose its generic kernel for this CPU; set OPENBLAS_CORETYPE)";
  if (openblas_set_num_threads) return "OpenBLAS (cblas_sgemm/cblas_dgemm, 1 thread per call)";
  return "cblas (cblas_sgemm/cblas_dgemm of the BLAS linked in)";
#else
  return "tessera xsimd kernel";
#endif
}

}  // inline namespace gemm_cblas / gemm_builtin

}  // namespace tessera::detail

namespace tessera {

/// Which kernel multiplies float32 and float64 blocks on a device in this build:
/// "OpenBLAS (cblas_sgemm/cblas_dgemm, 1 thread per call)" when CMake found OpenBLAS (but
/// "tessera xsimd kernel (OpenBLAS chose its generic kernel ...)" where OpenBLAS does not know
/// the CPU and falls back to a pre-AVX kernel, in a build for AVX2 or later),
/// "cblas (...)" for another BLAS with the CBLAS interface, or "tessera xsimd kernel" when no
/// BLAS was found or the build was configured with -DTESSERA_USE_BLAS=OFF. Integer and bool
/// products always use tessera's own loop.
inline char const* matmul_backend() { return detail::gemm_backend(); }

}  // namespace tessera
