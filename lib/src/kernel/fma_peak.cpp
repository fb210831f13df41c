// fma_peak.hpp's loop: kAcc independent accumulators, each updated once per
// iteration by acc = acc * x + y. kAcc covers the FMA latency (4 cycles) times
// the FMA ports (2) with room to spare, so the loop runs at the ports' rate.
// The accumulators stay in registers (16 of 32 zmm, 12 of 16 ymm).
#include "mha/kernel/fma_peak.hpp"

#include <algorithm>
#include <chrono>

#include "bf16_gemm.hpp"
#include "intrinsics.hpp"
#include "mha/base/thread_pool.hpp"
#include "vexp_impl.hpp"

namespace mha {
namespace {

constexpr long kIterations = 1L << 22;

#pragma GCC push_options
#pragma GCC target("avx512f")
// Returns a value that depends on every accumulator, so nothing is optimized away.
float loop_avx512(float seed) {
  constexpr int kAcc = 16;
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < kIterations; ++it)
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  __m512 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")
// VDPBF16PS: 16 lanes, each adding two bfloat16 products (32 multiply-adds
// per instruction). The accumulators stay finite: 1e-20 * 1e-20 underflows
// to 0 (flushed) and 0 is added.
float loop_avx512bf16(float seed) {
  constexpr int kAcc = 16;
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-20f), _mm512_set1_ps(1e-20f));
  for (long it = 0; it < kIterations; ++it)
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, x);
  __m512 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
float loop_avx2(float seed) {
  constexpr int kAcc = 12;
  __m256 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_ps(seed + static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < kIterations; ++it)
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  __m256 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm256_add_ps(sum, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}
#pragma GCC pop_options

// GFLOP/s of `loop` (kAcc registers of `lanes` floats) on `threads` threads at once.
double measure(float (*loop)(float), int acc, int lanes, int threads, int repeat) {
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < std::max(1, repeat); ++r) {
    std::vector<float> out(static_cast<std::size_t>(threads));
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(static_cast<std::size_t>(threads), threads,
                 [&](std::size_t task, int) { out[task] = loop(static_cast<float>(task)); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float v : out) sink = sink + v;
    const double flops = 2.0 * acc * lanes * static_cast<double>(kIterations) * threads;
    best = std::max(best, flops / s / 1e9);
  }
  return best;
}

}  // namespace

std::vector<FmaPeak> fma_peaks(int threads, int repeat) {
  threads = std::max(1, threads);
  std::vector<FmaPeak> peaks;
  if (detail::cpu_has_avx512())
    peaks.push_back({"avx512", measure(loop_avx512, 16, 16, threads, repeat)});
  if (detail::cpu_has_avx2()) peaks.push_back({"avx2", measure(loop_avx2, 12, 8, threads, repeat)});
  if (detail::cpu_has_avx512_bf16())
    peaks.push_back({"avx512bf16", measure(loop_avx512bf16, 16, 32, threads, repeat)});
  return peaks;
}

}  // namespace mha
