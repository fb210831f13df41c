#include "mha/run/bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/config/rng.hpp"
#include "mha/kernel/attention.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/transformer.hpp"
#include "mha/run/plan.hpp"
#include "mha/run/report.hpp"
#include "typed_layer.hpp"

namespace mha {
namespace {

using Clock = std::chrono::steady_clock;

Dims self_attention(std::size_t B, std::size_t T, std::size_t S, std::size_t d_model,
                    std::size_t h) {
  Dims d;
  d.B = B, d.T = T, d.S = S, d.h = h;
  d.d_model = d.kdim = d.vdim = d.d_out = d_model;
  d.d_k = d.d_v = d_model / h;
  // Decode shapes attend from T = 1 query over a separate S-long memory.
  d.key_is_query = T == S;
  d.value_is_key = true;
  return d;
}

template <class F>
std::vector<double> time_ms(int warmup, int repeat, const F& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

// The layer a case times, built as `mha run` builds it (plan, then weights
// drawn from seed 0): the shape's sizes and the variant's keys.
TypedLayer<float> bench_layer(const BenchShape& shape, const std::string& variant, int threads,
                              bool bf16) {
  const Dims& d = shape.dims;
  Config c;
  c.h = static_cast<std::int64_t>(d.h);
  c.d_model = static_cast<std::int64_t>(d.d_model);
  c.batch = static_cast<std::int64_t>(d.B);
  c.seq_len = static_cast<std::int64_t>(d.T);
  c.kv_seq_len = static_cast<std::int64_t>(d.S);
  c.threads = threads;
  c.dtype = bf16 ? ComputeType::bfloat16 : ComputeType::float32;
  if (shape.layers) {
    c.layer = LayerKind::encoder;
    c.num_layers = static_cast<std::int64_t>(shape.layers);
    c.d_ff = static_cast<std::int64_t>(shape.d_ff);
  }
  // Grouped-query: a quarter as many key/value heads (Llama 2 70B's ratio is 1/8).
  if (variant == "gqa") c.kv_heads = static_cast<std::int64_t>(d.h % 4 == 0 ? d.h / 4 : 1);
  if (variant == "causal" || variant == "window" || variant == "alibi")
    c.causal = Causal::bottom_right;
  if (variant == "window") c.window = 256;  // Mistral-style local layers
  if (variant == "alibi") c.alibi = true;
  if (variant == "softcap") c.softcap = 50;  // Gemma 2's attention soft-cap
  PlanFiles files;
  return TypedLayer<float>(plan_run(c, files), {});
}

std::vector<float> uniform(std::size_t n, const char* name) {
  std::vector<float> x(n);
  RandomStream(0, name).fill_uniform<float>(x.data(), n, 0.f, 1.f);
  return x;
}

}  // namespace

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n == 0 ? 0 : n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

const std::vector<BenchShape>& bench_shapes() {
  static const std::vector<BenchShape> shapes = {
      {"tutorial", self_attention(64, 5, 5, 512, 8)},
      {"bert-s128", self_attention(8, 128, 128, 768, 12)},
      {"bert-s512", self_attention(1, 512, 512, 768, 12)},
      {"long-4k", self_attention(1, 4096, 4096, 512, 8)},
      {"decode-4k", self_attention(1, 1, 4096, 512, 8)},
      // BERT-base's encoder layer, and a 6-layer stack of it (docs/layers.md).
      {"bert-layer", self_attention(1, 512, 512, 768, 12), 1, 3072},
      {"bert-6layers", self_attention(1, 512, 512, 768, 12), 6, 3072},
  };
  return shapes;
}

const std::vector<std::string>& bench_variants() {
  static const std::vector<std::string> variants = {"plain", "weights", "causal"};
  return variants;
}

std::vector<std::string> default_variants(const BenchShape& shape) {
  if (shape.layers) return {"plain", "causal"};
  return bench_variants();
}

const std::vector<std::string>& extra_bench_variants() {
  static const std::vector<std::string> variants = {"gqa", "window", "alibi", "softcap"};
  return variants;
}

namespace {

double gemm_gflops(int threads, int repeat, bool bf16) {
  blas_load();
  const std::size_t n = 2048;
  std::vector<float> A = uniform(n * n, "A"), B = uniform(n * n, "B"), C(n * n);
  auto ms = time_ms(1, repeat, [&] {
    parallel_for(threads, threads, [&](std::size_t p, int) {
      const std::size_t r0 = n * p / threads, r1 = n * (p + 1) / threads;
      gemm<float>(false, false, r1 - r0, n, n, 1.f, A.data() + r0 * n, n, B.data(), n, 0.f,
                  C.data() + r0 * n, n, bf16);
    });
  });
  return 2.0 * n * n * n / (median(ms) * 1e6);
}

}  // namespace

double sgemm_gflops(int threads, int repeat) {
  return gemm_gflops(threads, repeat, false);
}

double bf16_gemm_gflops(int threads, int repeat) {
  bf16_gemm_backend();  // may throw (MHA_BF16_GEMM), not inside the pool
  return gemm_gflops(threads, repeat, true);
}

namespace {

// A case's result from its timings (sorted, ms) and FLOP count.
BenchResult result_of(const BenchShape& shape, const std::string& variant, bool bf16, const Dims& d,
                      std::uint64_t flops, const std::vector<double>& ms, double sgemm) {
  BenchResult r;
  r.shape = shape.name;
  r.variant = variant;
  r.dtype = bf16 ? "bfloat16" : "float32";
  r.dims = d;
  r.layers = shape.layers;
  r.d_ff = shape.d_ff;
  r.flops = flops;
  r.ms_median = median(ms);
  r.ms_min = ms.front();
  r.gflops = static_cast<double>(r.flops) / (r.ms_median * 1e6);
  r.sgemm_fraction = sgemm > 0 ? r.gflops / sgemm : 0;
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

// A stack of encoder layers (post-norm, relu, random weights) on the shape.
BenchResult bench_layers(const BenchShape& shape, const std::string& variant, int threads,
                         int repeat, double sgemm, bool bf16) {
  if (variant != "plain" && variant != "causal")
    fail_input("bench variant '" + variant + "' is not for layer shapes such as " + shape.name +
               " (expected plain or causal)");
  const TypedLayer<float> layer = bench_layer(shape, variant, threads, bf16);
  const StackShape& s = *layer.stack();
  const Dims& d = s.self;
  std::vector<float> x = uniform(d.B * d.T * d.d_model, "query"), output(x.size());
  const Mask<float>& mask = layer.planned_mask();
  const Mask<float> none;
  const StackOptions<float> opt = layer.stack_options(layer.config());
  auto ms = time_ms(2, repeat,
                    [&] { layer.run_stack(s, x.data(), nullptr, mask, none, opt, output.data()); });
  return result_of(shape, variant, bf16, d,
                   shape.layers * (d.flops() + 4 * static_cast<std::uint64_t>(d.B * d.T) *
                                                   d.d_model * shape.d_ff),
                   ms, sgemm);
}

}  // namespace

BenchResult bench_case(const BenchShape& shape, const std::string& variant, int threads, int repeat,
                       double sgemm, std::size_t block_q, std::size_t block_k, bool bf16) {
  Dims d = shape.dims;
  const auto& extra = extra_bench_variants();
  if (std::find(bench_variants().begin(), bench_variants().end(), variant) ==
          bench_variants().end() &&
      std::find(extra.begin(), extra.end(), variant) == extra.end())
    fail_input("unknown bench variant '" + variant +
               "' (expected plain, weights, causal, gqa, window, alibi or softcap)");
  if (shape.layers) return bench_layers(shape, variant, threads, repeat, sgemm, bf16);
  const TypedLayer<float> layer = bench_layer(shape, variant, threads, bf16);
  d.kv_heads = layer.dims().kv_heads;
  std::vector<float> X_q = uniform(d.B * d.T * d.d_model, "query");
  std::vector<float> X_kv =
      d.key_is_query ? std::vector<float>() : uniform(d.B * d.S * d.kdim, "key");
  const float* kv = d.key_is_query ? X_q.data() : X_kv.data();
  const std::shared_ptr<const Mask<float>> mask = layer.mask(layer.config(), d, {});
  LayerOptions<float> opt = layer.attention_options(layer.config());
  opt.block_q = block_q;
  opt.block_k = block_k;
  std::vector<float> attention, output(d.B * d.T * d.d_out);
  if (variant == "weights") {
    attention.resize(d.B * d.h * d.T * d.S);
    opt.attention = AttentionOutput::per_head;
    opt.attention_buffer = attention.data();
  }
  auto ms =
      time_ms(2, repeat, [&] { layer.attend(d, X_q.data(), kv, kv, *mask, opt, output.data()); });
  return result_of(shape, variant, bf16, d, d.flops(), ms, sgemm);
}

}  // namespace mha
