// The machine's float32 limit, for the benchmark to compare with: a loop of
// fused multiply-adds on registers alone (no loads, no stores), run on every
// thread at once, in each vector ISA the CPU has. No real kernel can beat it;
// a GEMM that reaches 85% of it is near the machine's limit.
#pragma once

#include <string>
#include <vector>

namespace mha {

struct FmaPeak {
  std::string isa;  // "avx512" or "avx2" (with FMA)
  double gflops = 0;
};

// For each ISA this CPU runs (widest first; empty without AVX2 + FMA): the
// best of `repeat` timings of the loop on `threads` threads, in GFLOP/s
// (a fused multiply-add counts 2).
std::vector<FmaPeak> fma_peaks(int threads, int repeat = 5);

}  // namespace mha
