// Weights packed once for the native bfloat16 GEMM (kernel/packed_weights.hpp):
// the packed words against bfloat16's rounding element by element, both
// source layouts (pack_bf16_columns), unpack_bf16 exact; an attention layer
// and a Transformer stack (gated feed-forward) give the same bits with their
// weights packed at load, packed with no float32 W left, or packed per call;
// a pack made from a W since replaced is not used. Where bfloat16 GEMMs do not run
// natively (MHA_BF16_GEMM=sgemm, CPUs without AVX512_BF16) packing does
// nothing, and that is checked instead.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "mha/config/layer_weights.hpp"
#include "mha/config/rng.hpp"
#include "mha/config/weights.hpp"
#include "mha/kernel/attention.hpp"
#include "mha/kernel/bfloat16.hpp"
#include "mha/kernel/packed_weights.hpp"
#include "mha/kernel/transformer.hpp"

namespace {

std::vector<float> uniform(std::size_t n, const char* name, float lo = -1, float hi = 1) {
  std::vector<float> v(n);
  mha::RandomStream(31, name).fill_uniform<float>(v.data(), n, lo, hi);
  return v;
}

mha::Tensor<float, 2> matrix(std::size_t k, std::size_t n, const char* name) {
  mha::Tensor<float, 2> W({k, n});
  mha::RandomStream(32, name).fill_uniform<float>(W.data(), k * n, -1, 1);
  return W;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

}  // namespace

TEST_CASE("pack_bf16: pairs of W's rows rounded to bfloat16, from either layout", "[packed]") {
  const std::size_t k = 37, n = 150;  // odd k: the last pair's high half is 0
  const mha::Tensor<float, 2> W = matrix(k, n, "W");
  if (!mha::bf16_packing()) {
    mha::Weights<float> w;
    w.W_q = W;
    mha::pack_bf16(w, 2);
    CHECK(w.packed_q.empty());  // nothing to pack for: each call rounds W itself
    return;
  }
  const mha::PackedBf16 p = mha::pack_bf16(W.data(), k, n, 2);
  REQUIRE((p.k == k && p.n == n && p.of == W.data()));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint32_t word = p.words.get()[i / 2 * n + j];
      wrong += (i % 2 ? word >> 16 : word & 0xffffu) != mha::bfloat16_bits(W(i, j));
    }
  for (std::size_t j = 0; j < n; ++j) wrong += (p.words.get()[k / 2 * n + j] >> 16) != 0;
  CHECK(wrong == 0);

  // Columns from nn.Linear's rows (out, in) and from Conv1D's (in, out), in
  // two pieces each, as a checkpoint's fused q | k | v fills them.
  std::vector<float> rows(n * k), cols(k * n);
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = 0; j < n; ++j) rows[j * k + i] = cols[i * n + j] = W(i, j);
  for (const bool linear : {true, false}) {
    CAPTURE(linear);
    mha::PackedBf16 q;
    mha::reserve_bf16(q, k, n);
    for (const auto& [c0, c1] : {std::pair<std::size_t, std::size_t>{0, 70}, {70, n}})
      mha::pack_bf16_columns(q, c0, c1 - c0, linear ? rows.data() + c0 * k : cols.data() + c0,
                             linear ? k : n, linear, 2);
    CHECK(std::memcmp(q.words.get(), p.words.get(), 4 * ((k + 1) / 2) * n) == 0);
    CHECK(q.of == nullptr);
  }
  const mha::Tensor<float, 2> back = mha::unpack_bf16(p);
  wrong = 0;
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = 0; j < n; ++j) wrong += back(i, j) != mha::round_to_bfloat16(W(i, j));
  CHECK(wrong == 0);

  // reserve_bf16 keeps words nothing else holds, at the same size.
  mha::PackedBf16 r;
  mha::reserve_bf16(r, k, n);
  const std::uint32_t* first = r.words.get();
  mha::reserve_bf16(r, k, n);
  CHECK(r.words.get() == first);
  const mha::PackedBf16 held = r;
  mha::reserve_bf16(r, k, n);
  CHECK(r.words.get() != first);  // `held` still reads the old words
}

TEST_CASE("an attention layer packed at load gives the bits of packing per call", "[packed]") {
  mha::Dims d;
  d.B = 2, d.T = 40, d.S = 40, d.h = 4, d.d_k = 12, d.d_v = 10;
  d.d_model = d.kdim = d.vdim = 48, d.d_out = 32;
  const auto X = uniform(d.B * d.T * d.d_model, "X");
  mha::Mask<float> mask;
  mask.causal = mha::Causal::top_left;
  mha::LayerOptions<float> opt;
  opt.scale = 1 / std::sqrt(12.0f);
  opt.threads = 2;
  opt.bf16_gemm = true;
  auto run = [&](const mha::Weights<float>& w) {
    std::vector<float> out(d.B * d.T * d.d_out);
    mha::attention_layer<float>(d, X.data(), X.data(), X.data(), w, mask, opt, out.data());
    return out;
  };
  const mha::Weights<float> plain = mha::random_weights<float>(d, true, 5);
  const std::vector<float> want = run(plain);
  mha::Weights<float> packed = plain;
  mha::pack_bf16(packed, 2);
  CHECK(packed.packed_q.empty() == !mha::bf16_packing());
  CHECK(same_bits(run(packed), want));
  if (mha::bf16_packing()) {
    // Packed with no float32 W (a checkpoint's layer read for a bfloat16 pass).
    mha::Weights<float> only = packed;
    for (mha::PackedBf16* p : {&only.packed_q, &only.packed_k, &only.packed_v, &only.packed_o})
      p->of = nullptr;
    only.W_q = only.W_k = only.W_v = only.W_o = mha::Tensor<float, 2>();
    CHECK(same_bits(run(only), want));
  }
  // A W replaced after packing (new storage): its stale pack is not used. (A
  // W changed in place keeps its storage; packed_weights.hpp: pack it again.)
  const mha::Weights<float> other = mha::random_weights<float>(d, true, 6);
  const float* old = packed.W_q.data();
  packed.W_q = mha::Tensor<float, 2>(other.W_q);
  REQUIRE(packed.W_q.data() != old);
  mha::Weights<float> fresh = plain;
  fresh.W_q = other.W_q;
  const std::vector<float> changed = run(fresh);
  CHECK(!same_bits(changed, want));
  CHECK(same_bits(run(packed), changed));
}

TEST_CASE("a Transformer stack packed at load gives the bits of packing per call", "[packed]") {
  mha::StackShape s;
  s.kind = mha::LayerKind::encoder;
  s.num_layers = 2;
  s.d_ff = 72;
  mha::Dims& d = s.self;
  d.B = 2, d.T = d.S = 33, d.h = 4, d.d_model = 32, d.d_k = d.d_v = 8;
  d.kdim = d.vdim = d.d_out = 32;
  mha::StackWeights<float> w = mha::random_stack<float>(s, 7);
  for (auto& L : w.layers) L.ffn.W_gate = matrix(d.d_model, s.d_ff, "gate");  // SwiGLU
  const auto x = uniform(d.B * d.T * d.d_model, "x");
  mha::StackOptions<float> opt;
  opt.kind = mha::LayerKind::encoder;
  opt.activation = mha::Activation::silu;
  opt.norm_first = true;
  opt.eps = 1e-5f;
  opt.threads = opt.self_attn.threads = 2;
  opt.bf16_gemm = opt.self_attn.bf16_gemm = true;
  opt.self_attn.scale = 1 / std::sqrt(8.0f);
  mha::Mask<float> mask;
  mask.causal = mha::Causal::top_left;
  auto run = [&](const mha::StackWeights<float>& weights) {
    std::vector<float> out(x.size());
    mha::transformer_stack<float>(s, x.data(), nullptr, weights, mask, mha::Mask<float>{}, opt,
                                  out.data());
    return out;
  };
  const std::vector<float> want = run(w);
  mha::StackWeights<float> packed = w;
  for (auto& L : packed.layers) mha::pack_bf16(L, 2);
  CHECK(same_bits(run(packed), want));
  if (!mha::bf16_packing()) return;
  for (auto& L : packed.layers) {
    CHECK(!L.ffn.packed_gate.empty());
    L.ffn.packed_gate.of = L.ffn.packed_1.of = L.ffn.packed_2.of = nullptr;
    L.ffn.W_gate = L.ffn.W_1 = L.ffn.W_2 = mha::Tensor<float, 2>();
    CHECK(L.ffn.gated());  // by its packed words
  }
  CHECK(same_bits(run(packed), want));
}
