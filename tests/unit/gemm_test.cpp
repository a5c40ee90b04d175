// Unit tests of the local matrix product (runtime/gemm.hpp): detail::gemm (the BLAS where the
// build has one, else tessera's kernel) and detail::gemm_kernel (tessera's kernel in every
// build) against a naive triple loop in double (floating point, within K * eps * sum |a||b|)
// or in wrapping unsigned arithmetic (integers, exactly), on shapes that are empty, odd,
// cross the kernel's register and cache blocks, with padded leading dimensions, overwriting
// and accumulating; and four threads multiplying at once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tessera/runtime/gemm.hpp"

using Catch::Matchers::Contains;

namespace {

enum class route { dispatch, kernel };

struct shape {
  std::size_t M, N, K;
};

// Zero-sized, tiny, odd, and larger than one register tile (6 or 14 rows, 2 batches), one
// block of K (256), one block of M (144 or 168 rows) and one block of N (4096 columns).
constexpr shape shapes[] = {{0, 0, 0},    {0, 5, 3},    {4, 0, 3},     {4, 5, 0},
                            {1, 1, 1},    {3, 5, 7},    {2, 1, 9},     {1, 40, 3},
                            {17, 33, 65}, {64, 64, 64}, {130, 70, 257}, {300, 37, 20},
                            {15, 31, 513}, {2, 4100, 3}};

// A vector that is a plain array for bool too (std::vector<bool> has no data()).
template <class T>
class values {
 public:
  explicit values(std::size_t n) : n_(n), p_(std::make_unique<T[]>(n)) {}
  values(values const& o) : values(o.n_) { std::copy_n(o.p_.get(), n_, p_.get()); }
  values(values&&) = default;
  values& operator=(values&&) = default;
  T* data() { return p_.get(); }
  T const* data() const { return p_.get(); }
  T& operator[](std::size_t i) { return p_[i]; }
  T const& operator[](std::size_t i) const { return p_[i]; }
  T* begin() { return p_.get(); }
  T* end() { return p_.get() + n_; }

 private:
  std::size_t n_;
  std::unique_ptr<T[]> p_;
};

template <class T>
values<T> random_values(std::size_t n, std::mt19937& gen, T lo, T hi) {
  values<T> v(n);
  if constexpr (std::is_same_v<T, bool>) {
    std::bernoulli_distribution d(0.5);
    for (std::size_t i = 0; i < n; ++i) v[i] = d(gen);
  } else if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<T> d(lo, hi);
    for (auto& x : v) x = d(gen);
  } else {
    std::uniform_int_distribution<long long> d(static_cast<long long>(lo), static_cast<long long>(hi));
    for (auto& x : v) x = static_cast<T>(d(gen));
  }
  return v;
}

template <class T>
void call(route r, std::size_t M, std::size_t N, std::size_t K, T const* A, std::size_t lda,
          T const* B, std::size_t ldb, T* C, std::size_t ldc, bool accumulate) {
  if (r == route::dispatch) tessera::detail::gemm(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  else tessera::detail::gemm_kernel(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

// One product checked element by element, padding of C (columns N..ldc) included.
template <class T>
void check_product(route r, shape s, std::size_t pad, bool accumulate, T lo, T hi,
                   std::uint32_t seed) {
  auto const [M, N, K] = s;
  std::size_t const lda = K + pad, ldb = N + pad, ldc = N + 2 * pad;
  std::mt19937 gen(seed);
  // One extra element so that the pointers are valid (and distinct) when a size is zero.
  values<T> const A = random_values<T>(M * lda + 1, gen, lo, hi);
  values<T> const B = random_values<T>(K * ldb + 1, gen, lo, hi);
  values<T> C = random_values<T>(M * ldc + 1, gen, lo, hi);
  if constexpr (std::is_floating_point_v<T>) {
    // Overwriting must not read C: a NaN there must not show through.
    if (!accumulate)
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j) C[i * ldc + j] = std::numeric_limits<T>::quiet_NaN();
  }
  values<T> const C0 = C;

  call<T>(r, M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc, accumulate);

  INFO("M = " << M << ", N = " << N << ", K = " << K << ", pad = " << pad
              << ", accumulate = " << accumulate << ", "
              << (r == route::dispatch ? "gemm" : "gemm_kernel"));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < M; ++i) {
    for (std::size_t j = 0; j < ldc; ++j) {
      T const got = C[i * ldc + j];
      if (j >= N) {  // padding: untouched
        if (!(got == C0[i * ldc + j]) && bad++ < 5) FAIL_CHECK("padding C[" << i << "][" << j << "] changed");
        continue;
      }
      if constexpr (std::is_floating_point_v<T>) {
        double sum = accumulate ? double(C0[i * ldc + j]) : 0.0;
        double size = accumulate ? std::abs(double(C0[i * ldc + j])) : 0.0;
        for (std::size_t p = 0; p < K; ++p) {
          double const ab = double(A[i * lda + p]) * double(B[p * ldb + j]);
          sum += ab;
          size += std::abs(ab);
        }
        double const tol = 2.0 * double(K + 1) * double(std::numeric_limits<T>::epsilon()) * size;
        if (!(std::abs(double(got) - sum) <= tol) && bad++ < 5)
          FAIL_CHECK("C[" << i << "][" << j << "] = " << got << ", expected " << sum << " +- " << tol);
      } else {
        // Integers wrap: the exact product modulo 2^64, cast to T (modulo 2^bits); bool is or-of-ands.
        std::uint64_t sum = accumulate ? static_cast<std::uint64_t>(C0[i * ldc + j]) : 0;
        for (std::size_t p = 0; p < K; ++p)
          sum += static_cast<std::uint64_t>(A[i * lda + p]) * static_cast<std::uint64_t>(B[p * ldb + j]);
        T const expected = std::is_same_v<T, bool> ? static_cast<T>(sum != 0) : static_cast<T>(sum);
        if (!(got == expected) && bad++ < 5)
          FAIL_CHECK("C[" << i << "][" << j << "] = " << +got << ", expected " << +expected);
      }
    }
  }
  CHECK(bad == 0);
}

template <class T>
void check_all_shapes(route r, T lo, T hi) {
  std::uint32_t seed = 1;
  for (shape const& s : shapes)
    for (std::size_t pad : {0u, 3u})
      for (bool accumulate : {false, true}) check_product<T>(r, s, pad, accumulate, lo, hi, seed++);
}

}  // namespace

TEMPLATE_TEST_CASE("gemm matches a naive triple loop on every shape", "[runtime][gemm]", float,
                   double, std::int32_t, std::int64_t) {
  if constexpr (std::is_floating_point_v<TestType>) check_all_shapes<TestType>(route::dispatch, -1, 1);
  else check_all_shapes<TestType>(route::dispatch, -50, 50);
}

TEMPLATE_TEST_CASE("gemm_kernel (tessera's own kernel, BLAS or not) matches a naive triple loop",
                   "[runtime][gemm]", float, double, std::int8_t, std::uint16_t, std::int32_t,
                   std::uint64_t, bool) {
  if constexpr (std::is_same_v<TestType, bool>) check_all_shapes<bool>(route::kernel, false, true);
  else if constexpr (std::is_floating_point_v<TestType>) check_all_shapes<TestType>(route::kernel, -1, 1);
  else if constexpr (std::is_signed_v<TestType>) check_all_shapes<TestType>(route::kernel, -9, 9);
  else check_all_shapes<TestType>(route::kernel, 0, 9);
}

TEMPLATE_TEST_CASE("integer products wrap around as jnp's integer matmul does", "[runtime][gemm]",
                   std::int8_t, std::uint16_t, std::int32_t, std::int64_t, std::uint32_t) {
  using T = TestType;
  T const lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  std::uint32_t seed = 100;
  for (shape s : {shape{3, 5, 7}, shape{17, 33, 65}, shape{9, 70, 300}})
    for (bool accumulate : {false, true}) {
      check_product<T>(route::dispatch, s, 1, accumulate, lo, hi, seed++);
      check_product<T>(route::kernel, s, 0, accumulate, lo, hi, seed++);
    }
}

TEST_CASE("gemm with K == 0 zeroes C, or leaves it when accumulating", "[runtime][gemm]") {
  std::vector<float> C{1, 2, 3, 4, 5, 6};
  float const dummy = 7;
  tessera::detail::gemm<float>(2, 2, 0, &dummy, 0, &dummy, 2, C.data(), 3, true);
  CHECK(C == std::vector<float>{1, 2, 3, 4, 5, 6});
  tessera::detail::gemm<float>(2, 2, 0, &dummy, 0, &dummy, 2, C.data(), 3, false);
  CHECK(C == std::vector<float>{0, 0, 3, 0, 0, 6});
  std::vector<int> Ci{1, 2, 3, 4};
  int const di = 7;
  tessera::detail::gemm_kernel<int>(2, 2, 0, &di, 0, &di, 2, Ci.data(), 2, false);
  CHECK(Ci == std::vector<int>{0, 0, 0, 0});
}

TEST_CASE("a leading dimension shorter than its row is an std::invalid_argument with the numbers",
          "[runtime][gemm][errors]") {
  std::vector<double> A(64), B(64), C(64);
  auto const short_lda = [&] { tessera::detail::gemm<double>(2, 3, 5, A.data(), 4, B.data(), 3, C.data(), 3, false); };
  auto const short_ldb = [&] { tessera::detail::gemm<double>(2, 3, 5, A.data(), 5, B.data(), 2, C.data(), 3, false); };
  auto const short_ldc = [] { tessera::detail::gemm_kernel<int>(2, 3, 5, nullptr, 5, nullptr, 3, nullptr, 1, false); };
  CHECK_THROWS_AS(short_lda(), std::invalid_argument);
  CHECK_THROWS_WITH(short_lda(), Contains("lda = 4 is less than K = 5"));
  CHECK_THROWS_WITH(short_ldb(), Contains("ldb = 2 is less than N = 3"));
  CHECK_THROWS_AS(short_ldc(), std::invalid_argument);
  CHECK_THROWS_WITH(short_ldc(),
                    Contains("tessera::detail::gemm_kernel: ldc = 1 is less than N = 3 (M = 2, N = 3, K = 5)"));
}

TEST_CASE("four threads multiplying at once each get their own product", "[runtime][gemm][threads]") {
  constexpr std::size_t M = 70, N = 45, K = 300, rounds = 8;
  struct job {
    values<float> A{M * K}, B{K * N};
    values<double> Ad{M * K}, Bd{K * N};
    std::vector<float> expected;
    std::vector<double> expected_d;
    bool ok = true;
  };
  std::vector<job> jobs(4);
  std::mt19937 gen(42);
  for (job& j : jobs) {
    j.A = random_values<float>(M * K, gen, -1, 1);
    j.B = random_values<float>(K * N, gen, -1, 1);
    j.Ad = random_values<double>(M * K, gen, -1, 1);
    j.Bd = random_values<double>(K * N, gen, -1, 1);
    j.expected.assign(M * N, 0);
    j.expected_d.assign(M * N, 0);
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t c = 0; c < N; ++c) {
        double s = 0, sd = 0;
        for (std::size_t p = 0; p < K; ++p) {
          s += double(j.A[i * K + p]) * double(j.B[p * N + c]);
          sd += j.Ad[i * K + p] * j.Bd[p * N + c];
        }
        j.expected[i * N + c] = float(s);
        j.expected_d[i * N + c] = sd;
      }
  }
  std::vector<std::thread> threads;
  for (job& j : jobs)
    threads.emplace_back([&j] {
      std::vector<float> C(M * N);
      std::vector<double> Cd(M * N);
      for (std::size_t r = 0; r < rounds; ++r) {
        tessera::detail::gemm<float>(M, N, K, j.A.data(), K, j.B.data(), N, C.data(), N, false);
        tessera::detail::gemm<double>(M, N, K, j.Ad.data(), K, j.Bd.data(), N, Cd.data(), N, false);
        for (std::size_t e = 0; e < M * N; ++e) {
          // |a|, |b| <= 1: the error is below K * eps * K.
          if (std::abs(C[e] - j.expected[e]) > 2e-7f * K * K / 4) j.ok = false;
          if (std::abs(Cd[e] - j.expected_d[e]) > 4e-16 * K * K / 4) j.ok = false;
        }
      }
    });
  for (std::thread& t : threads) t.join();
  for (std::size_t t = 0; t < jobs.size(); ++t) {
    INFO("thread " << t);
    CHECK(jobs[t].ok);
  }
}

TEST_CASE("matmul_backend names the kernel of this build", "[runtime][gemm]") {
  std::string const backend = tessera::matmul_backend();
  CHECK(backend == tessera::detail::gemm_backend());
#ifdef TESSERA_HAS_CBLAS
  // Where OpenBLAS does not know the CPU and runs its pre-AVX kernel, a build for AVX2 or later
  // multiplies with its own kernel instead, and says why.
  std::string const fallback =
      "tessera xsimd kernel (OpenBLAS chose its generic kernel for this CPU; set OPENBLAS_CORETYPE)";
  if (tessera::detail::blas_kernel_generic()) {
    CHECK(backend == fallback);
    CHECK(openblas_get_corename != nullptr);
  } else {
    CHECK((backend == "OpenBLAS (cblas_sgemm/cblas_dgemm, 1 thread per call)" ||
           backend == "cblas (cblas_sgemm/cblas_dgemm of the BLAS linked in)"));
  }
#else
  CHECK(backend == "tessera xsimd kernel");
#endif
}
