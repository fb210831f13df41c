// The fused kernel (online softmax over key blocks, skipped blocks, key
// splits, threads) held against the exact path and the double-precision
// reference, with block sizes small enough that every shape spans many query
// and key blocks, and with streamed attention (the sink) against the buffer.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "mha/config/rng.hpp"
#include "mha/kernel/attention.hpp"
#include "reference.hpp"

using mha::AttentionOutput;
using mha::Causal;
using mha::MaskedRows;

namespace {

struct Case {
  std::size_t B, T, S, h, d_k, d_v;
  Causal causal;
  bool key_lengths, bool_mask, float_mask;
  // Variants: grouped-query heads, sliding window, ALiBi, a broadcast float
  // bias of shape (h, 1, S) and soft-capping.
  std::size_t kv_heads = 0, window = 0;
  bool alibi = false, position_bias = false;
  double softcap = 0;
};

std::vector<double> draw(std::size_t n, const char* name, double lo, double hi) {
  std::vector<double> v(n);
  mha::RandomStream(5, name).fill_uniform<double>(v.data(), n, lo, hi);
  return v;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
void close_to(const std::vector<T>& got, const std::vector<double>& want, double tol,
              const char* what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      INFO(what << " index " << i);
      REQUIRE(std::isnan(static_cast<double>(got[i])));
      continue;
    }
    INFO(what << " index " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::abs(static_cast<double>(got[i]) - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

template <class T>
void check_case(const Case& c, MaskedRows policy, int threads, std::size_t block_q,
                std::size_t block_k) {
  CAPTURE(c.B, c.T, c.S, c.h, c.d_k, c.d_v, static_cast<int>(c.causal), c.key_lengths, c.bool_mask,
          c.float_mask, static_cast<int>(policy), threads, block_q, block_k);
  CAPTURE(c.kv_heads, c.window, c.alibi, c.position_bias, c.softcap);
  mha::Dims d;
  d.B = c.B, d.T = c.T, d.S = c.S, d.h = c.h, d.d_k = c.d_k, d.d_v = c.d_v;
  d.d_model = 6, d.kdim = 5, d.vdim = 4, d.d_out = 7;
  d.kv_heads = c.kv_heads;
  d.key_is_query = d.value_is_key = false;
  const std::size_t hdk = d.h * d.d_k, hdv = d.h * d.d_v;
  const std::size_t kdk = d.kv() * d.d_k, kdv = d.kv() * d.d_v;

  // Inputs and weights, rounded to T so the reference sees the same values.
  auto X_q = draw(d.B * d.T * d.d_model, "X_q", -1, 1),
       X_k = draw(d.B * d.S * d.kdim, "X_k", -1, 1), X_v = draw(d.B * d.S * d.vdim, "X_v", -1, 1);
  ref::Params p{draw(d.d_model * hdk, "W_q", -1, 1), draw(hdk, "b_q", -1, 1),
                draw(d.kdim * kdk, "W_k", -1, 1),    draw(kdk, "b_k", -1, 1),
                draw(d.vdim * kdv, "W_v", -1, 1),    draw(kdv, "b_v", -1, 1),
                draw(hdv * d.d_out, "W_o", -1, 1),   draw(d.d_out, "b_o", -1, 1)};
  for (auto* v : {&X_q, &X_k, &X_v, &p.W_q, &p.b_q, &p.W_k, &p.b_k, &p.W_v, &p.b_v, &p.W_o, &p.b_o})
    for (double& x : *v) x = static_cast<double>(static_cast<T>(x));

  mha::Weights<T> w;
  auto fill2 = [](mha::Tensor<T, 2>& t, std::size_t r, std::size_t cols,
                  const std::vector<double>& v) {
    t.resize({r, cols});
    std::copy(v.begin(), v.end(), t.begin());
  };
  auto fill1 = [](mha::Tensor<T, 1>& t, const std::vector<double>& v) {
    t.resize({v.size()});
    std::copy(v.begin(), v.end(), t.begin());
  };
  fill2(w.W_q, d.d_model, hdk, p.W_q), fill2(w.W_k, d.kdim, kdk, p.W_k);
  fill2(w.W_v, d.vdim, kdv, p.W_v), fill2(w.W_o, hdv, d.d_out, p.W_o);
  fill1(w.b_q, p.b_q), fill1(w.b_k, p.b_k), fill1(w.b_v, p.b_v), fill1(w.b_o, p.b_o);

  // The same mask for the kernel and the reference: a per-head 4-D bool mask
  // that hides about a third of the keys, or a (B,T,S) float mask with -inf.
  ref::MaskSpec spec;
  mha::Mask<T> mask;
  spec.causal = mask.causal = c.causal;
  if (c.key_lengths) {
    for (std::size_t b = 0; b < d.B; ++b)
      spec.key_lengths.push_back(static_cast<std::int64_t>((b * 7 + 3) % (d.S + 1)));
    spec.key_lengths[0] = 0;  // one batch entirely padded
    mask.key_lengths = spec.key_lengths;
  }
  if (c.bool_mask) {
    spec.shape = {d.B, d.h, d.T, d.S};
    spec.values = draw(d.B * d.h * d.T * d.S, "mask", 0, 1);
    for (double& v : spec.values) v = v < 0.33 ? 0.0 : 1.0;
    mask.mask_B = d.B, mask.mask_h = d.h;
    for (double v : spec.values) mask.allow.push_back(v != 0.0);
  } else if (c.float_mask) {
    spec.shape = {d.B, d.T, d.S};
    spec.is_float = true;
    spec.values = draw(d.B * d.T * d.S, "mask", -2, 2);
    for (double& v : spec.values)
      if (v < -1.5) v = -std::numeric_limits<double>::infinity();
    mask.mask_B = d.B, mask.mask_h = 1;
    mask.bias = cast<T>(spec.values);
  }

  spec.window = mask.window = c.window;
  spec.alibi = c.alibi;
  if (c.alibi)
    for (double m : mha::alibi_slopes(d.h)) mask.alibi_slopes.push_back(static_cast<T>(m));
  if (c.position_bias) {
    // (h, 1, S): per head and key, broadcast over batch and queries.
    spec.bias_shape = {d.h, 1, d.S};
    spec.bias_values = draw(d.h * d.S, "position_bias", -3, 3);
    for (double& v : spec.bias_values) v = static_cast<double>(static_cast<T>(v));
    mask.position_bias = cast<T>(spec.bias_values);
    mask.bias_strides[0] = 0, mask.bias_strides[1] = d.S, mask.bias_strides[2] = 0;
    mask.bias_strides[3] = 1;
  }
  spec.softcap = c.softcap;

  ref::Sizes z{d.B, d.T, d.S, d.h, d.d_model, d.d_k, d.d_v, d.kdim, d.vdim, d.d_out, c.kv_heads};
  const double scale = 1 / std::sqrt(static_cast<double>(d.d_k));
  const auto want = ref::multi_head_attention(z, X_q, X_k, X_v, p, spec, scale, policy);
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;

  const auto xq = cast<T>(X_q), xk = cast<T>(X_k), xv = cast<T>(X_v);
  mha::LayerOptions<T> opt;
  opt.scale = static_cast<T>(scale);
  opt.softcap = static_cast<T>(c.softcap);
  opt.masked_rows = policy;
  opt.threads = threads;
  opt.block_q = block_q;
  opt.block_k = block_k;

  std::vector<T> fused(d.B * d.T * d.d_out);
  mha::attention_layer<T>(d, xq.data(), xk.data(), xv.data(), w, mask, opt, fused.data());
  close_to(fused, want.output, tol, "fused output");

  // Exact path, attention streamed through the sink block by block.
  std::vector<T> exact(fused.size()), streamed(d.B * d.h * d.T * d.S, T(-7));
  std::mutex m;
  opt.attention = AttentionOutput::per_head;
  opt.sink = [&](std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
                 const T* block) {
    std::lock_guard<std::mutex> lock(m);
    std::copy(block, block + rows * d.S, streamed.begin() + ((b * d.h + head) * d.T + t0) * d.S);
  };
  mha::attention_layer<T>(d, xq.data(), xk.data(), xv.data(), w, mask, opt, exact.data());
  close_to(exact, want.output, tol, "exact output");
  close_to(streamed, want.attention, tol, "streamed attention");

  // Mean over heads, into a buffer.
  std::vector<T> mean(d.B * d.T * d.S);
  opt.attention = AttentionOutput::mean_over_heads;
  opt.sink = nullptr;
  opt.attention_buffer = mean.data();
  mha::attention_layer<T>(d, xq.data(), xk.data(), xv.data(), w, mask, opt, exact.data());
  close_to(mean, ref::mean_over_heads(z, want.attention), tol, "mean attention");
  close_to(exact, want.output, tol, "output with mean attention");
}

const Case kCases[] = {
    // B  T   S  h d_k d_v causal             lengths bool   float
    {2, 13, 17, 3, 4, 5, Causal::none, false, false, false},
    {2, 13, 17, 3, 4, 5, Causal::top_left, false, false, false},
    {2, 17, 11, 2, 3, 2, Causal::top_left, true, false, false},
    {3, 9, 23, 2, 5, 3, Causal::bottom_right, true, false, false},
    {2, 23, 9, 2, 5, 3, Causal::bottom_right, false, false, true},
    {2, 11, 19, 3, 2, 4, Causal::none, true, true, false},
    {1, 1, 41, 2, 4, 4, Causal::none, false, false, false},  // decode: keys split
    {1, 1, 41, 1, 4, 4, Causal::bottom_right, true, false, true},
    // Variants   kv_heads window alibi  bias   softcap
    {2, 13, 17, 4, 4, 5, Causal::none, false, false, false, 2},                 // GQA
    {2, 13, 17, 3, 4, 5, Causal::top_left, true, false, false, 1},              // MQA
    {1, 1, 41, 4, 4, 4, Causal::none, false, false, false, 2},                  // GQA decode
    {2, 19, 19, 2, 3, 3, Causal::none, false, false, false, 0, 4},              // window
    {2, 19, 19, 2, 3, 3, Causal::top_left, true, false, false, 0, 5},           // causal window
    {2, 23, 9, 2, 5, 3, Causal::bottom_right, false, false, true, 0, 3},        // aligned window
    {2, 13, 17, 3, 4, 5, Causal::none, false, false, false, 0, 0, true},        // ALiBi, h = 3
    {2, 17, 17, 4, 4, 4, Causal::top_left, false, false, false, 2, 6, true},    // ALiBi+window+GQA
    {2, 13, 17, 3, 4, 5, Causal::none, false, true, false, 0, 0, false, true},  // bias + bool mask
    {1, 1, 41, 2, 4, 4, Causal::none, false, false, false, 0, 0, false, true},  // bias, decode
    {2, 13, 17, 3, 4, 5, Causal::none, false, false, false, 0, 0, false, false, 0.5},  // softcap
    {2, 17, 11, 4, 3, 2, Causal::top_left, true, false, true, 2, 0, true, true, 2.0},  // all
};

}  // namespace

TEMPLATE_TEST_CASE("fused and exact paths agree with the reference across blocks", "[kernel]",
                   float, double) {
  for (const Case& c : kCases)
    for (MaskedRows policy : {MaskedRows::zero, MaskedRows::uniform, MaskedRows::nan})
      for (int threads : {1, 3})
        for (auto [bq, bk] : {std::pair<std::size_t, std::size_t>{4, 5}, {1, 3}, {64, 256}})
          check_case<TestType>(c, policy, threads, bq, bk);
}
