#include "mha/kernel/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "linear.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/vexp.hpp"

namespace mha {

namespace {

// LayerNorm rows per task.
constexpr std::size_t kNormRows = 64;

using detail::Buffer;

// Y (rows, n) = act(X (rows, k) W (k, n) + b), in pieces over the pool
// (linear.hpp: column pieces when Y is wider than tall, as the FFN's first
// GEMM is: BERT-base layer 0.81 -> 0.85-0.88 of the sgemm rate).
// `packed`: W's words packed at load (packed_weights.hpp), or empty.
template <class T>
void linear(const T* X, std::size_t rows, std::size_t k, const Tensor<T, 2>& W,
            const PackedBf16& packed, const Tensor<T, 1>& b, T* Y, const Activation* act,
            int threads, bool bf16) {
  const detail::Projection<T> pr =
      detail::projection_of(W, packed, b.size() ? b.data() : nullptr, 0, bf16);
  detail::project<T>(X, k, rows, k, {pr}, Y, pr.n, threads, bf16, act);
}

// x += y over n values.
template <class T>
void add_into(T* x, const T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
}

// x *= y over n values.
template <class T>
void multiply_into(T* x, const T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= y[i];
}

}  // namespace

template <class T>
void activate(T* x, std::size_t n, Activation activation) {
  switch (activation) {
    case Activation::relu:
      for (std::size_t i = 0; i < n; ++i) x[i] = x[i] > T(0) ? x[i] : T(0);
      return;
    case Activation::gelu: {  // x Phi(x), exact
      const T r = T(1) / std::sqrt(T(2));
      for (std::size_t i = 0; i < n; ++i) x[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * r));
      return;
    }
    case Activation::gelu_tanh:  // PyTorch's approximate='tanh'
    case Activation::silu:       // x sigmoid(x)
      break;
  }
  // Both are x sigmoid(z): z = 2 sqrt(2/pi) (x + 0.044715 x^3) for GELU-tanh
  // (0.5 (1 + tanh(u)) = sigmoid(2u)), z = x for SiLU; computed as
  // x - x / (1 + exp(z)), which stays finite for every finite x.
  const bool gelu = activation == Activation::gelu_tanh;
  const T c = T(2) * std::sqrt(T(2) / T(M_PI));
  if constexpr (std::is_same_v<T, float>) {  // exp through the vector kernel, in pieces
    constexpr std::size_t kPiece = 256;
    float e[kPiece];
    for (std::size_t i0 = 0; i0 < n; i0 += kPiece) {
      const std::size_t m = std::min(kPiece, n - i0);
      float* v = x + i0;
      for (std::size_t i = 0; i < m; ++i) {
        const float z = gelu ? c * (v[i] + 0.044715f * v[i] * v[i] * v[i]) : v[i];
        e[i] = std::min(z, 80.0f);  // exp(80) is finite; sigmoid(80) is 1 in float
      }
      exp_shifted_sum(e, m, 0.0f);
      for (std::size_t i = 0; i < m; ++i) v[i] = v[i] - v[i] / (1.0f + e[i]);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const T v = x[i];
      const T z = gelu ? c * (v + T(0.044715) * v * v * v) : v;
      x[i] = v - v / (T(1) + std::exp(std::min(z, T(700))));
    }
  }
}

template <class T>
void layer_norm(const T* x, std::size_t rows, std::size_t d, const Norm<T>& norm, T eps, T* y,
                int threads) {
  const std::size_t tasks = (rows + kNormRows - 1) / kNormRows;
  parallel_for(tasks, threads, [&](std::size_t task, int) {
    const std::size_t r1 = std::min(rows, (task + 1) * kNormRows);
    for (std::size_t r = task * kNormRows; r < r1; ++r) {
      const T* xr = x + r * d;
      T* yr = y + r * d;
      if (norm.rms) {  // x / sqrt(mean(x^2) + eps) * gamma
        double sq = 0;
        for (std::size_t i = 0; i < d; ++i) sq += double(xr[i]) * xr[i];
        const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + static_cast<double>(eps));
        for (std::size_t i = 0; i < d; ++i) yr[i] = static_cast<T>(xr[i] * inv) * norm.gamma(i);
        continue;
      }
      double sum = 0;
      for (std::size_t i = 0; i < d; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(d);
      double sq = 0;
      for (std::size_t i = 0; i < d; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + static_cast<double>(eps));
      for (std::size_t i = 0; i < d; ++i)
        yr[i] = static_cast<T>((xr[i] - mean) * inv) * norm.gamma(i) + norm.beta(i);
    }
  });
}

template <class T>
void transformer_stack(const StackShape& s, const T* x_in, const T* memory,
                       const StackWeights<T>& w, const Mask<T>& self_mask,
                       const Mask<T>& cross_mask, const StackOptions<T>& opt, T* output) {
  const Dims& d = s.self;
  const std::size_t rows = d.B * d.T, n = rows * d.d_model;
  const int threads = resolve_threads(opt.threads);
  // x: the residual stream (the output buffer); y: a norm's output; a: an
  // attention's or the FFN's output; f: the FFN's hidden layer.
  T* x = output;
  std::copy(x_in, x_in + n, x);
  const bool gated = std::any_of(w.layers.begin(), w.layers.end(),
                                 [](const TransformerLayer<T>& L) { return L.ffn.gated(); });
  Buffer<T> y(n), a(n), f(rows * s.d_ff), g(gated ? rows * s.d_ff : 0),
      p(opt.parallel_residual ? n : 0);
  LayerOptions<T> self_opt = opt.self_attn, cross_opt = opt.cross_attn;
  self_opt.threads = cross_opt.threads = threads;
  const bool decoder = s.kind == LayerKind::decoder;
  for (std::size_t l = 0; l < s.num_layers; ++l) {
    const TransformerLayer<T>& L = w.layers[l];
    const std::size_t layer = opt.first_layer + l;
    self_opt.hook = cross_opt.hook = opt.hook;
    self_opt.site = cross_opt.site = Site{SiteKind::resid_pre, opt.stack, layer};
    cross_opt.cross = true;
    if (opt.before_layer) opt.before_layer(l, self_opt, cross_opt);
    // The hook's view of a (rows, cols) activation at site `kind` of this layer.
    auto show = [&](SiteKind kind, T* data, std::size_t cols) {
      const Site site{kind, opt.stack, layer};
      if (opt.hook && opt.hook->wants(site)) opt.hook->tensor(site, data, rows, cols, cols);
    };
    auto wants = [&](SiteKind kind) {
      return opt.hook && opt.hook->wants(Site{kind, opt.stack, layer});
    };
    const Norm<T>& ffn_norm = decoder ? L.norm3 : L.norm2;
    const SiteKind ffn_ln = decoder ? SiteKind::ln3 : SiteKind::ln2;
    // a (rows, d_model) = FFN(in); f (rows, d_ff) its hidden layer. With mlp.hook_pre
    // wanted, the activation runs after the GEMM instead of in it (the same values).
    auto ffn = [&](const T* in) {
      const bool pre = wants(SiteKind::mlp_pre);
      const Activation* act = pre ? nullptr : &opt.activation;
      if (L.ffn.gated()) {  // f = act(in W_gate + b_gate) * (in W_1 + b_1)
        linear(in, rows, d.d_model, L.ffn.W_gate, L.ffn.packed_gate, L.ffn.b_gate, f.get(), act,
               threads, opt.bf16_gemm);
        linear(in, rows, d.d_model, L.ffn.W_1, L.ffn.packed_1, L.ffn.b_1, g.get(), nullptr, threads,
               opt.bf16_gemm);
      } else {
        linear(in, rows, d.d_model, L.ffn.W_1, L.ffn.packed_1, L.ffn.b_1, f.get(), act, threads,
               opt.bf16_gemm);
      }
      if (pre) {
        show(SiteKind::mlp_pre, f.get(), s.d_ff);
        activate(f.get(), rows * s.d_ff, opt.activation);
      }
      if (L.ffn.gated()) multiply_into(f.get(), g.get(), rows * s.d_ff);
      show(SiteKind::mlp_post, f.get(), s.d_ff);
      linear(f.get(), rows, s.d_ff, L.ffn.W_2, L.ffn.packed_2, L.ffn.b_2, a.get(), nullptr, threads,
             opt.bf16_gemm);
    };
    // a = post(a) when the layer has that sandwich norm (y as scratch).
    auto post = [&](const Norm<T>& norm) {
      if (norm.empty()) return;
      layer_norm(a.get(), rows, d.d_model, norm, opt.eps, y.get(), threads);
      std::copy(y.get(), y.get() + n, a.get());
    };
    const std::size_t dm = d.d_model;
    show(SiteKind::resid_pre, x, dm);
    if (opt.norm_first && opt.parallel_residual && !decoder) {
      // x + (FFN(norm2(x)) + SA(norm1(x))), summed in that order as GPT-NeoX does
      layer_norm(x, rows, dm, L.norm1, opt.eps, y.get(), threads);
      show(SiteKind::ln1, y.get(), dm);
      attention_layer<T>(d, y.get(), y.get(), y.get(), L.self_attn, self_mask, self_opt, p.get());
      show(SiteKind::attn_out, p.get(), dm);
      layer_norm(x, rows, dm, L.norm2, opt.eps, y.get(), threads);
      show(SiteKind::ln2, y.get(), dm);
      ffn(y.get());
      show(SiteKind::mlp_out, a.get(), dm);
      add_into(a.get(), p.get(), n);
      add_into(x, a.get(), n);
      show(SiteKind::resid_post, x, dm);
    } else if (opt.norm_first) {
      layer_norm(x, rows, dm, L.norm1, opt.eps, y.get(), threads);
      show(SiteKind::ln1, y.get(), dm);
      attention_layer<T>(d, y.get(), y.get(), y.get(), L.self_attn, self_mask, self_opt, a.get());
      post(L.post_attn);
      show(SiteKind::attn_out, a.get(), dm);
      add_into(x, a.get(), n);
      show(SiteKind::resid_mid, x, dm);
      if (decoder) {
        layer_norm(x, rows, dm, L.norm2, opt.eps, y.get(), threads);
        show(SiteKind::ln2, y.get(), dm);
        attention_layer<T>(s.cross, y.get(), memory, memory, L.cross_attn, cross_mask, cross_opt,
                           a.get());
        show(SiteKind::cross_attn_out, a.get(), dm);
        add_into(x, a.get(), n);
        show(SiteKind::resid_mid_cross, x, dm);
      }
      layer_norm(x, rows, dm, ffn_norm, opt.eps, y.get(), threads);
      show(ffn_ln, y.get(), dm);
      ffn(y.get());
      post(L.post_ffn);
      show(SiteKind::mlp_out, a.get(), dm);
      add_into(x, a.get(), n);
      show(SiteKind::resid_post, x, dm);
    } else {  // post-norm: the sums before each norm are hook_resid_mid(_cross) and resid_post
      attention_layer<T>(d, x, x, x, L.self_attn, self_mask, self_opt, a.get());
      show(SiteKind::attn_out, a.get(), dm);
      add_into(a.get(), x, n);
      show(SiteKind::resid_mid, a.get(), dm);
      layer_norm(a.get(), rows, dm, L.norm1, opt.eps, x, threads);
      show(SiteKind::ln1, x, dm);
      if (decoder) {
        attention_layer<T>(s.cross, x, memory, memory, L.cross_attn, cross_mask, cross_opt,
                           a.get());
        show(SiteKind::cross_attn_out, a.get(), dm);
        add_into(a.get(), x, n);
        show(SiteKind::resid_mid_cross, a.get(), dm);
        layer_norm(a.get(), rows, dm, L.norm2, opt.eps, x, threads);
        show(SiteKind::ln2, x, dm);
      }
      ffn(x);
      show(SiteKind::mlp_out, a.get(), dm);
      add_into(a.get(), x, n);
      show(SiteKind::resid_post, a.get(), dm);
      layer_norm(a.get(), rows, dm, ffn_norm, opt.eps, x, threads);
      show(ffn_ln, x, dm);
    }
    if (opt.after_layer) opt.after_layer(l, x);
  }
  if (!w.final_norm.empty()) {
    layer_norm(x, rows, d.d_model, w.final_norm, opt.eps, y.get(), threads);
    std::copy(y.get(), y.get() + n, x);
  }
}

#define MHA_INSTANTIATE(T)                                                                     \
  template void transformer_stack<T>(const StackShape&, const T*, const T*,                    \
                                     const StackWeights<T>&, const Mask<T>&, const Mask<T>&,   \
                                     const StackOptions<T>&, T*);                              \
  template void layer_norm<T>(const T*, std::size_t, std::size_t, const Norm<T>&, T, T*, int); \
  template void activate<T>(T*, std::size_t, Activation);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
