// `mha bench`: warm, repeated, in-process timings of the attention layer on
// named shapes, next to a large sgemm measured in the same run so results
// read as a fraction of what this machine's BLAS reaches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mha/config/dims.hpp"

namespace mha {

struct BenchShape {
  std::string name;
  Dims dims;  // self-attention unless dims.key_is_query is false
  // Transformer encoder layers (post-norm, relu) around the attention; 0: the
  // attention alone.
  std::size_t layers = 0, d_ff = 0;
};

// tutorial, bert-s128, bert-s512, long-4k, decode-4k (see docs/benchmarks.md).
const std::vector<BenchShape>& bench_shapes();

// Variants: "plain" (no attention weights), "weights" (per-head attention
// (B,h,T,S) computed into memory), "causal" (bottom-right causal mask).
const std::vector<std::string>& bench_variants();
// Variants run only when named (--shapes long-4k:gqa): "gqa" (h/4 key/value
// heads, or 1), "window" (bottom-right causal, window 256), "alibi" (ALiBi,
// bottom-right causal), "softcap" (soft-cap 50). FLOPs are always counted
// for the dense layer, so masked variants show more GFLOP/s than they do.
const std::vector<std::string>& extra_bench_variants();
// The variants a shape runs when none is named: plain and causal for layer
// shapes, bench_variants() for the others.
std::vector<std::string> default_variants(const BenchShape& shape);

struct BenchResult {
  std::string shape, variant;
  std::string dtype = "float32";  // or "bfloat16": bfloat16 GEMM operands
  Dims dims;
  std::uint64_t flops = 0;
  double ms_median = 0, ms_min = 0;
  double gflops = 0;                 // flops / median time
  double sgemm_fraction = 0;         // gflops / sgemm_gflops
  std::uint64_t peak_rss_bytes = 0;  // of the process so far (cumulative)
  std::size_t layers = 0, d_ff = 0;  // layer shapes
};

// GFLOP/s of a 2048^3 float32 GEMM split by rows over `threads` workers,
// each calling single-threaded BLAS, as the kernel does (median of `repeat`).
double sgemm_gflops(int threads, int repeat);

// The median of `values` (the mean of the middle two for an even count; 0 for none).
double median(std::vector<double> values);
// The same 2048^3 GEMM with bfloat16 operands (gemm(..., bf16 = true) in
// blas.hpp: rounding included, by sbgemm or sgemm as bf16_gemm_backend() says).
double bf16_gemm_gflops(int threads, int repeat);

// Times attention_layer<float> on `shape` in `variant`: 2 warm-up calls, then
// `repeat` timed ones.
// block_q, block_k: kernel block sizes (0 = the kernel's defaults).
// bf16: every GEMM with bfloat16 operands (dtype bfloat16); sgemm_fraction
// still compares with the float32 sgemm.
BenchResult bench_case(const BenchShape& shape, const std::string& variant, int threads, int repeat,
                       double sgemm_gflops, std::size_t block_q = 0, std::size_t block_k = 0,
                       bool bf16 = false);

}  // namespace mha
