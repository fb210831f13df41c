// The machine's float32 limit, for the benchmark to compare with: a loop of
// fused multiply-adds on registers alone (no loads, no stores), run on every
// thread at once, in each vector ISA the CPU has. No real kernel can beat it;
// a GEMM that reaches 85% of it is near the machine's limit.
#pragma once

#include <string>
#include <vector>

namespace mha {

struct FmaPeak {
  std::string isa;  // "avx512" or "avx2" (with FMA), or "avx512bf16" (bfloat16 pairs)
  double gflops = 0;
};

// For each float32 ISA this CPU runs (widest first; empty without AVX2 +
// FMA), then "avx512bf16" where the CPU has AVX512_BF16 (VDPBF16PS, the
// native bfloat16 GEMM's instruction): the best of `repeat` timings of the
// loop on `threads` threads, in GFLOP/s (a multiply-add counts 2).
std::vector<FmaPeak> fma_peaks(int threads, int repeat = 5);

}  // namespace mha
