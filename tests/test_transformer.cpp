// Transformer encoder and decoder stacks (kernel/transformer.hpp) against a
// plain reference: the attention from reference.hpp, and LayerNorm, the
// feed-forward network and the residual wiring written here as loops in
// double from docs/layers.md, sharing no code with the kernel.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mha/config/layer_weights.hpp"
#include "mha/config/rng.hpp"
#include "mha/kernel/transformer.hpp"
#include "reference.hpp"

using namespace mha;

namespace {

template <class Tensor>
std::vector<double> to_vec(const Tensor& t) {
  return std::vector<double>(t.begin(), t.end());
}

ref::Params params(const Weights<double>& w) {
  return {to_vec(w.W_q), to_vec(w.b_q), to_vec(w.W_k), to_vec(w.b_k),
          to_vec(w.W_v), to_vec(w.b_v), to_vec(w.W_o), to_vec(w.b_o)};
}

std::vector<double> ref_norm(const std::vector<double>& x, std::size_t d, const Norm<double>& n,
                             double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    double mean = 0, var = 0;
    for (std::size_t i = 0; i < d; ++i) mean += x[r * d + i] / static_cast<double>(d);
    for (std::size_t i = 0; i < d; ++i)
      var += (x[r * d + i] - mean) * (x[r * d + i] - mean) / static_cast<double>(d);
    for (std::size_t i = 0; i < d; ++i)
      y[r * d + i] = (x[r * d + i] - mean) / std::sqrt(var + eps) * n.gamma(i) + n.beta(i);
  }
  return y;
}

double act(double v, Activation a) {
  if (a == Activation::relu) return v > 0 ? v : 0;
  if (a == Activation::gelu) return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
}

std::vector<double> ref_ffn(const std::vector<double>& x, std::size_t rows, std::size_t d,
                            std::size_t d_ff, const FeedForward<double>& f, Activation a) {
  std::vector<double> h = ref::affine(x, rows, d, to_vec(f.W_1), to_vec(f.b_1), d_ff);
  for (double& v : h) v = act(v, a);
  return ref::affine(h, rows, d_ff, to_vec(f.W_2), to_vec(f.b_2), d);
}

ref::Sizes sizes(const Dims& d) {
  ref::Sizes z;
  z.B = d.B, z.T = d.T, z.S = d.S, z.h = d.h, z.d_model = d.d_model, z.d_k = d.d_k, z.d_v = d.d_v,
  z.kdim = d.kdim, z.vdim = d.vdim, z.d_out = d.d_out;
  return z;
}

std::vector<double> add(std::vector<double> a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// docs/layers.md, loop by loop.
std::vector<double> reference_stack(const StackShape& s, const std::vector<double>& x_in,
                                    const std::vector<double>& memory,
                                    const StackWeights<double>& w, const ref::MaskSpec& self_mask,
                                    const ref::MaskSpec& cross_mask, bool norm_first, Activation a,
                                    double eps) {
  const Dims& d = s.self;
  const std::size_t rows = d.B * d.T, dm = d.d_model;
  const bool decoder = s.kind == LayerKind::decoder;
  const double scale = 1 / std::sqrt(static_cast<double>(d.d_k));
  auto sa = [&](const std::vector<double>& y, const TransformerLayer<double>& L) {
    return ref::multi_head_attention(sizes(d), y, y, y, params(L.self_attn), self_mask, scale,
                                     MaskedRows::zero)
        .output;
  };
  auto ca = [&](const std::vector<double>& y, const TransformerLayer<double>& L) {
    return ref::multi_head_attention(sizes(s.cross), y, memory, memory, params(L.cross_attn),
                                     cross_mask, scale, MaskedRows::zero)
        .output;
  };
  std::vector<double> x = x_in;
  for (const TransformerLayer<double>& L : w.layers) {
    const Norm<double>& last = decoder ? L.norm3 : L.norm2;
    if (norm_first) {
      x = add(x, sa(ref_norm(x, dm, L.norm1, eps), L));
      if (decoder) x = add(x, ca(ref_norm(x, dm, L.norm2, eps), L));
      x = add(x, ref_ffn(ref_norm(x, dm, last, eps), rows, dm, s.d_ff, L.ffn, a));
    } else {
      x = ref_norm(add(x, sa(x, L)), dm, L.norm1, eps);
      if (decoder) x = ref_norm(add(x, ca(x, L)), dm, L.norm2, eps);
      x = ref_norm(add(x, ref_ffn(x, rows, dm, s.d_ff, L.ffn, a)), dm, last, eps);
    }
  }
  if (!w.final_norm.empty()) x = ref_norm(x, dm, w.final_norm, eps);
  return x;
}

// Random LayerNorm parameters and biases too, so that every tensor matters.
void perturb(StackWeights<double>& w, std::uint64_t seed) {
  std::uint64_t n = 0;
  auto fill = [&](auto& t, double lo, double hi) {
    RandomStream(seed, "perturb" + std::to_string(n++))
        .fill_uniform<double>(t.data(), t.size(), lo, hi);
  };
  for (auto& L : w.layers) {
    for (Weights<double>* a : {&L.self_attn, &L.cross_attn}) {
      if (!a->has_bias()) continue;
      fill(a->b_q, -0.5, 0.5), fill(a->b_k, -0.5, 0.5), fill(a->b_v, -0.5, 0.5),
          fill(a->b_o, -0.5, 0.5);
    }
    fill(L.ffn.b_1, -0.5, 0.5), fill(L.ffn.b_2, -0.5, 0.5);
    for (Norm<double>* nm : {&L.norm1, &L.norm2, &L.norm3})
      if (!nm->empty()) fill(nm->gamma, 0.5, 1.5), fill(nm->beta, -0.5, 0.5);
  }
  if (!w.final_norm.empty()) fill(w.final_norm.gamma, 0.5, 1.5), fill(w.final_norm.beta, -0.5, 0.5);
}

}  // namespace

TEST_CASE("transformer stacks match the double-precision reference", "[transformer]") {
  struct Case {
    LayerKind kind;
    bool norm_first;
    Activation act;
    bool final_norm;
    std::size_t layers;
    std::size_t T = 5, d_model = 16, d_ff = 40;  // big enough: GEMMs in pieces, FFN by columns
  };
  const Case cases[] = {
      {LayerKind::encoder, false, Activation::relu, false, 1},
      {LayerKind::encoder, true, Activation::gelu, true, 2},
      {LayerKind::encoder, false, Activation::gelu_tanh, false, 3},
      {LayerKind::decoder, false, Activation::relu, false, 2},
      {LayerKind::decoder, true, Activation::gelu, true, 2},
      {LayerKind::encoder, false, Activation::relu, false, 1, 24, 64, 256},
      {LayerKind::decoder, true, Activation::gelu_tanh, true, 1, 40, 64, 192},
  };
  for (const Case& k : cases) {
    INFO("kind " << to_string(k.kind) << " norm_first " << k.norm_first << " activation "
                 << to_string(k.act) << " layers " << k.layers);
    StackShape s;
    s.kind = k.kind;
    s.num_layers = k.layers;
    s.d_ff = k.d_ff;
    s.final_norm = k.final_norm;
    Dims& d = s.self;
    d.B = 2, d.T = d.S = k.T, d.h = 4, d.d_model = k.d_model, d.d_k = d.d_v = k.d_model / 4;
    d.kdim = d.vdim = d.d_out = k.d_model;
    s.cross = d;
    s.cross.S = 7;
    s.cross.key_is_query = false;
    StackWeights<double> w = random_stack<double>(s, 11);
    perturb(w, 12);
    std::vector<double> x(d.B * d.T * d.d_model), memory(d.B * s.cross.S * d.d_model);
    RandomStream(3, "x").fill_uniform<double>(x.data(), x.size(), -1, 1);
    RandomStream(3, "memory").fill_uniform<double>(memory.data(), memory.size(), -1, 1);
    // The decoder's self-attention causal, key padding on both attentions.
    Mask<double> self_mask, cross_mask;
    ref::MaskSpec self_ref, cross_ref;
    self_mask.key_lengths = self_ref.key_lengths = {static_cast<std::int64_t>(k.T), 3};
    if (k.kind == LayerKind::decoder) self_mask.causal = self_ref.causal = Causal::top_left;
    cross_mask.key_lengths = cross_ref.key_lengths = {7, 2};
    StackOptions<double> opt;
    opt.kind = k.kind;
    opt.activation = k.act;
    opt.norm_first = k.norm_first;
    opt.eps = 1e-5;
    opt.self_attn.scale = opt.cross_attn.scale = 1 / std::sqrt(static_cast<double>(d.d_k));
    std::vector<double> got(x.size());
    transformer_stack<double>(s, x.data(), memory.data(), w, self_mask, cross_mask, opt,
                              got.data());
    const std::vector<double> want =
        reference_stack(s, x, memory, w, self_ref, cross_ref, k.norm_first, k.act, 1e-5);
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - want[i]));
    CHECK(worst < 1e-12);
    // float32 through the same kernel, within float32's rounding
    StackWeights<float> wf;
    {
      // the same values in float: random_stack<float> draws the same streams, then perturb
      // in double and round
      StackWeights<double> wd = w;
      wf = random_stack<float>(s, 11);
      for (std::size_t l = 0; l < wd.layers.size(); ++l) {
        auto copy = [](const auto& from, auto& to) {
          for (std::size_t i = 0; i < from.size(); ++i)
            to.data()[i] = static_cast<float>(from.data()[i]);
        };
        const auto& a = wd.layers[l];
        auto& b = wf.layers[l];
        for (auto [p, q] :
             {std::pair{&a.self_attn, &b.self_attn}, std::pair{&a.cross_attn, &b.cross_attn}}) {
          if (!p->has_bias()) continue;
          copy(p->W_q, q->W_q), copy(p->W_k, q->W_k), copy(p->W_v, q->W_v), copy(p->W_o, q->W_o);
          copy(p->b_q, q->b_q), copy(p->b_k, q->b_k), copy(p->b_v, q->b_v), copy(p->b_o, q->b_o);
        }
        copy(a.ffn.W_1, b.ffn.W_1), copy(a.ffn.b_1, b.ffn.b_1), copy(a.ffn.W_2, b.ffn.W_2),
            copy(a.ffn.b_2, b.ffn.b_2);
        for (auto [p, q] : {std::pair{&a.norm1, &b.norm1}, std::pair{&a.norm2, &b.norm2},
                            std::pair{&a.norm3, &b.norm3}})
          if (!p->empty()) copy(p->gamma, q->gamma), copy(p->beta, q->beta);
      }
      if (!wd.final_norm.empty()) {
        for (std::size_t i = 0; i < wd.final_norm.gamma.size(); ++i) {
          wf.final_norm.gamma(i) = static_cast<float>(wd.final_norm.gamma(i));
          wf.final_norm.beta(i) = static_cast<float>(wd.final_norm.beta(i));
        }
      }
    }
    std::vector<float> xf(x.begin(), x.end()), mf(memory.begin(), memory.end()), gotf(x.size());
    Mask<float> sm, cm;
    sm.key_lengths = self_mask.key_lengths, sm.causal = self_mask.causal;
    cm.key_lengths = cross_mask.key_lengths;
    StackOptions<float> optf;
    optf.kind = k.kind, optf.activation = k.act, optf.norm_first = k.norm_first, optf.eps = 1e-5f;
    optf.self_attn.scale = optf.cross_attn.scale = 1 / std::sqrt(static_cast<float>(d.d_k));
    transformer_stack<float>(s, xf.data(), mf.data(), wf, sm, cm, optf, gotf.data());
    double worst_f = 0;
    for (std::size_t i = 0; i < gotf.size(); ++i)
      worst_f = std::max(worst_f, std::abs(gotf[i] - want[i]));
    CHECK(worst_f < 1e-4);
  }
}

TEST_CASE("layer weights: PyTorch names convert to native ones", "[transformer]") {
  // One nn.TransformerEncoderLayer's names (no layers.N. prefix), E = 4, d_ff = 6.
  std::map<std::string, NpyArray> torch;
  auto arr = [](std::vector<std::size_t> shape, float start) {
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
    return NpyArray::of(v.data(), shape);
  };
  torch["self_attn.in_proj_weight"] = arr({12, 4}, 0);
  torch["self_attn.in_proj_bias"] = arr({12}, 100);
  torch["self_attn.out_proj.weight"] = arr({4, 4}, 200);
  torch["self_attn.out_proj.bias"] = arr({4}, 300);
  torch["linear1.weight"] = arr({6, 4}, 400);
  torch["linear1.bias"] = arr({6}, 500);
  torch["linear2.weight"] = arr({4, 6}, 600);
  torch["linear2.bias"] = arr({4}, 700);
  torch["norm1.weight"] = arr({4}, 800);
  torch["norm1.bias"] = arr({4}, 900);
  torch["norm2.weight"] = arr({4}, 1000);
  torch["norm2.bias"] = arr({4}, 1100);
  const NativeWeights n = layer_weights_to_native(torch, WeightsFormat::auto_detect, "t.npz");
  CHECK(n.format == WeightsFormat::torch);
  CHECK(layer_count(n.arrays) == 1);
  CHECK(n.arrays.at("layers.0.ffn.W_1").shape == std::vector<std::size_t>{4, 6});
  CHECK(n.arrays.at("layers.0.norm2.beta").shape == std::vector<std::size_t>{4});
  StackShape s;
  s.d_ff = 6;
  s.self.h = 2, s.self.d_model = s.self.kdim = s.self.vdim = s.self.d_out = 4;
  s.self.d_k = s.self.d_v = 2;
  const StackWeights<double> w = stack_from_arrays<double>(n.arrays, s, "t.npz");
  // W_1 = linear1.weight transposed: W_1[i][j] = linear1.weight[j][i] = 400 + 4 j + i
  CHECK(w.layers[0].ffn.W_1(1, 2) == 400 + 4 * 2 + 1);
  CHECK(w.layers[0].norm1.gamma(3) == 803);
  // W_k = in_proj_weight[4:8].T
  CHECK(w.layers[0].self_attn.W_k(0, 1) == 4 * 5 + 0);
  torch["self_attn.bias_k"] = arr({1, 1, 4}, 0);
  CHECK_THROWS_WITH(layer_weights_to_native(torch, WeightsFormat::torch, "t.npz"),
                    Catch::Contains("bias_k"));
  torch.erase("self_attn.bias_k");
  torch.erase("norm2.bias");
  const NativeWeights m = layer_weights_to_native(torch, WeightsFormat::torch, "t.npz");
  CHECK_THROWS_WITH(stack_from_arrays<double>(m.arrays, s, "t.npz"),
                    "t.npz: missing weight tensor 'layers.0.norm2.beta' (d_model,)");
}

TEST_CASE("transformer stacks: parallel residual and sandwich norms match the reference",
          "[transformer]") {
  // GPT-NeoX's x + (FFN(norm2(x)) + SA(norm1(x))) and Gemma 2's
  // x + post(SA(norm1(x))), x + post(FFN(norm2(x))), written as loops here.
  StackShape s;
  s.kind = LayerKind::encoder;
  s.num_layers = 2;
  s.d_ff = 40;
  Dims& d = s.self;
  d.B = 2, d.T = d.S = 6, d.h = 4, d.d_model = 16, d.d_k = d.d_v = 4;
  d.kdim = d.vdim = d.d_out = 16;
  std::vector<double> x(d.B * d.T * d.d_model);
  RandomStream(5, "x").fill_uniform<double>(x.data(), x.size(), -1, 1);
  Mask<double> mask;
  ref::MaskSpec mask_ref;
  mask.key_lengths = mask_ref.key_lengths = {6, 4};
  mask.causal = mask_ref.causal = Causal::top_left;
  const double scale = 1 / std::sqrt(4.0), eps = 1e-5;
  const std::size_t rows = d.B * d.T, dm = d.d_model;
  for (const bool parallel : {true, false}) {
    INFO((parallel ? "parallel residual" : "sandwich norms"));
    StackWeights<double> w = random_stack<double>(s, 21);
    perturb(w, 22);
    if (!parallel)
      for (auto& L : w.layers)
        for (Norm<double>* n : {&L.post_attn, &L.post_ffn}) {
          n->gamma = Tensor<double, 1>({dm});
          n->beta = Tensor<double, 1>({dm});
          RandomStream(23, "post").fill_uniform<double>(n->gamma.data(), dm, 0.5, 1.5);
          RandomStream(24, "post").fill_uniform<double>(n->beta.data(), dm, -0.5, 0.5);
        }
    StackOptions<double> opt;
    opt.kind = LayerKind::encoder;
    opt.activation = Activation::gelu;
    opt.norm_first = true;
    opt.parallel_residual = parallel;
    opt.eps = eps;
    opt.self_attn.scale = scale;
    std::vector<double> got(x.size());
    transformer_stack<double>(s, x.data(), nullptr, w, mask, Mask<double>{}, opt, got.data());
    std::vector<double> want = x;
    for (const TransformerLayer<double>& L : w.layers) {
      auto sa = [&](const std::vector<double>& y) {
        return ref::multi_head_attention(sizes(d), y, y, y, params(L.self_attn), mask_ref, scale,
                                         MaskedRows::zero)
            .output;
      };
      auto ffn = [&](const std::vector<double>& y) {
        return ref_ffn(y, rows, dm, s.d_ff, L.ffn, Activation::gelu);
      };
      if (parallel) {
        want = add(
            want, add(ffn(ref_norm(want, dm, L.norm2, eps)), sa(ref_norm(want, dm, L.norm1, eps))));
      } else {
        want = add(want, ref_norm(sa(ref_norm(want, dm, L.norm1, eps)), dm, L.post_attn, eps));
        want = add(want, ref_norm(ffn(ref_norm(want, dm, L.norm2, eps)), dm, L.post_ffn, eps));
      }
    }
    double worst = 0, moved = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::abs(got[i] - want[i]));
      moved = std::max(moved, std::abs(want[i] - x[i]));
    }
    CHECK(worst < 1e-12);
    CHECK(moved > 0.1);  // the layers did something the check can see
  }
}

namespace {

// Every site a stack shows, recorded by name (site_name), copied as double.
class Recorder : public SiteHook<double> {
 public:
  std::map<std::string, std::vector<double>> seen;
  std::size_t T = 0, S = 0;  // the query and key lengths of the blocks
  bool wants(const Site&) const override { return true; }
  void tensor(const Site& site, double* data, std::size_t rows, std::size_t cols,
              std::size_t ld) override {
    std::vector<double>& v = seen[site_name(site, false)];
    for (std::size_t r = 0; r < rows; ++r) v.insert(v.end(), data + r * ld, data + r * ld + cols);
  }
  void block(const Site& site, std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
             double* data, std::size_t ld) override {
    std::vector<double>& v = seen[site_name(site, false)];
    const std::size_t h = 4;  // the test's heads
    v.resize(2 * h * T * ld);
    std::lock_guard<std::mutex> lock(mutex_);
    std::copy(data, data + rows * ld, v.begin() + ((b * h + head) * T + t0) * ld);
  }

 private:
  std::mutex mutex_;
};

double worst(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(a[i] - b[i]));
  return w;
}

}  // namespace

TEST_CASE("site names: every kind round-trips, patterns are globs, wrong names are refused",
          "[sites]") {
  for (std::size_t k = 0; k < kSiteKinds; ++k)
    for (Stack stack : {Stack::main, Stack::decoder})
      for (std::size_t layer : {std::size_t{0}, std::size_t{11}}) {
        Site site{static_cast<SiteKind>(k), stack, model_wide(SiteKind(k)) ? 0 : layer};
        for (bool ed : {false, true}) {
          if (!ed && stack == Stack::decoder) continue;
          const std::string name = site_name(site, ed);
          INFO(name);
          const std::optional<Site> back = parse_site_name(name, ed);
          REQUIRE(back);
          CHECK(*back == site);
        }
      }
  CHECK(site_name({SiteKind::z, Stack::main, 3}, false) == "blocks.3.attn.hook_z");
  CHECK(site_name({SiteKind::cross_pattern, Stack::decoder, 1}, true) ==
        "decoder.blocks.1.cross_attn.hook_pattern");
  CHECK(site_name({SiteKind::embed, Stack::main, 0}, true) == "encoder.hook_embed");
  for (const char* bad : {"blocks.01.hook_resid_pre", "blocks.x.hook_resid_pre", "blocks.3",
                          "blocks.3.hook_embed", "hook_resid_pre", "blocks..attn.hook_z",
                          "blocks.3.attn.hook_zz", "encoder.blocks.0.hook_resid_pre"})
    CHECK_FALSE(parse_site_name(bad, false));
  CHECK_FALSE(
      parse_site_name("blocks.0.hook_resid_pre", true));  // an encoder-decoder's need a stack
  CHECK(site_matches("blocks.*.attn.hook_z", "blocks.10.attn.hook_z"));
  CHECK(site_matches("*hook_resid_post", "decoder.blocks.2.hook_resid_post"));
  CHECK(site_matches("blocks.?.ln1.*", "blocks.4.ln1.hook_normalized"));
  CHECK_FALSE(site_matches("blocks.?.ln1.*", "blocks.14.ln1.hook_normalized"));
  CHECK_FALSE(site_matches("blocks.*.attn.hook_z", "blocks.1.attn.hook_q"));
}

TEST_CASE("a stack's sites hold the reference's activations, and edits carry on", "[sites]") {
  for (bool norm_first : {true, false}) {
    INFO("norm_first " << norm_first);
    StackShape s;
    s.kind = LayerKind::encoder;
    s.num_layers = 2;
    s.d_ff = 24;
    Dims& d = s.self;
    d.B = 2, d.T = d.S = 5, d.h = 4, d.d_model = 16, d.d_k = d.d_v = 4;
    d.kdim = d.vdim = d.d_out = 16;
    StackWeights<double> w = random_stack<double>(s, 21);
    perturb(w, 22);
    const std::size_t rows = d.B * d.T, dm = d.d_model;
    std::vector<double> x(rows * dm);
    RandomStream(5, "x").fill_uniform<double>(x.data(), x.size(), -1, 1);
    Mask<double> mask;
    ref::MaskSpec mask_ref;
    mask.key_lengths = mask_ref.key_lengths = {5, 3};
    StackOptions<double> opt;
    opt.activation = Activation::gelu;
    opt.norm_first = norm_first;
    opt.eps = 1e-5;
    opt.self_attn.scale = 0.5;
    std::vector<double> plain(x.size()), hooked(x.size());
    transformer_stack<double>(s, x.data(), nullptr, w, mask, Mask<double>{}, opt, plain.data());
    Recorder rec;
    rec.T = rec.S = d.T;
    opt.hook = &rec;
    transformer_stack<double>(s, x.data(), nullptr, w, mask, Mask<double>{}, opt, hooked.data());
    // Looking changes nothing but the rounding: the pattern and scores take the exact
    // attention path (the softmax over whole rows) where the plain pass takes the fused one.
    CHECK(worst(hooked, plain) < 1e-12);

    // Layer 0 by the reference's steps.
    const TransformerLayer<double>& L = w.layers[0];
    const std::vector<double> in = norm_first ? ref_norm(x, dm, L.norm1, 1e-5) : x;
    const ref::Result sa = ref::multi_head_attention(sizes(d), in, in, in, params(L.self_attn),
                                                     mask_ref, 0.5, MaskedRows::zero);
    const std::vector<double> mid = add(x, sa.output);
    CHECK(worst(rec.seen.at("blocks.0.hook_resid_pre"), x) == 0);
    CHECK(worst(rec.seen.at("blocks.0.attn.hook_pattern"), sa.attention) < 1e-12);
    CHECK(worst(rec.seen.at("blocks.0.hook_attn_out"), sa.output) < 1e-12);
    CHECK(worst(rec.seen.at("blocks.0.attn.hook_q"),
                ref::affine(in, rows, dm, to_vec(L.self_attn.W_q), to_vec(L.self_attn.b_q), dm)) <
          1e-12);
    CHECK(worst(rec.seen.at("blocks.0.hook_resid_mid"), mid) < 1e-12);
    const std::vector<double> ffn_in =
        norm_first ? ref_norm(mid, dm, L.norm2, 1e-5) : ref_norm(mid, dm, L.norm1, 1e-5);
    CHECK(worst(rec.seen.at(norm_first ? "blocks.0.ln2.hook_normalized"
                                       : "blocks.0.ln1.hook_normalized"),
                ffn_in) < 1e-12);
    const std::vector<double> mlp = ref_ffn(ffn_in, rows, dm, s.d_ff, L.ffn, Activation::gelu);
    CHECK(worst(rec.seen.at("blocks.0.hook_mlp_out"), mlp) < 1e-12);
    const std::vector<double> post = norm_first ? add(mid, mlp) : add(ffn_in, mlp);
    CHECK(worst(rec.seen.at("blocks.0.hook_resid_post"), post) < 1e-12);
    const std::vector<double> out0 = norm_first ? post : ref_norm(post, dm, L.norm2, 1e-5);
    CHECK(worst(rec.seen.at("blocks.1.hook_resid_pre"), out0) < 1e-12);
    // mlp.hook_pre is the first GEMM before its activation; hook_post after it.
    std::vector<double> pre =
        ref::affine(ffn_in, rows, dm, to_vec(L.ffn.W_1), to_vec(L.ffn.b_1), s.d_ff);
    CHECK(worst(rec.seen.at("blocks.0.mlp.hook_pre"), pre) < 1e-12);
    for (double& v : pre) v = act(v, Activation::gelu);
    CHECK(worst(rec.seen.at("blocks.0.mlp.hook_post"), pre) < 1e-12);
    // Masked keys have -inf scores; each real one is scale q.k.
    const std::vector<double>& scores = rec.seen.at("blocks.0.attn.hook_attn_scores");
    CHECK(std::isinf(scores[((1 * 4 + 0) * 5 + 0) * 5 + 4]));
    CHECK(std::isfinite(scores[((1 * 4 + 0) * 5 + 0) * 5 + 2]));

    // An edit: head 2 of layer 1 zeroed in hook_z is the reference with that head's
    // columns of the context zeroed, i.e. its rows of W_o not used.
    struct ZeroHead : SiteHook<double> {
      bool wants(const Site& site) const override {
        return site.kind == SiteKind::z && site.layer == 1;
      }
      void tensor(const Site&, double* z, std::size_t n, std::size_t, std::size_t ld) override {
        for (std::size_t r = 0; r < n; ++r) std::fill(z + r * ld + 8, z + r * ld + 12, 0.0);
      }
    } zero;
    opt.hook = &zero;
    std::vector<double> edited(x.size());
    transformer_stack<double>(s, x.data(), nullptr, w, mask, Mask<double>{}, opt, edited.data());
    StackWeights<double> cut = w;
    for (std::size_t i = 8; i < 12; ++i)
      for (std::size_t j = 0; j < dm; ++j) cut.layers[1].self_attn.W_o.data()[i * dm + j] = 0;
    opt.hook = nullptr;
    std::vector<double> want(x.size());
    transformer_stack<double>(s, x.data(), nullptr, cut, mask, Mask<double>{}, opt, want.data());
    CHECK(worst(edited, want) < 1e-12);
    CHECK(worst(edited, plain) > 1e-6);
  }
}
