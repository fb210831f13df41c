// A layer in the compute type T: the object behind mha::Layer (layer.hpp),
// `mha run`'s compute stage and `mha bench`. It is built once from a plan:
// the weights are checked, converted to T and laid out for the kernel (or
// drawn from the seed), and the kernel's options are made from the config;
// a call then runs the kernel on the caller's arrays. Nothing here touches a
// file except the mask files of a config, read once when the layer is built
// (for the planned sizes) and again only for a call of other sizes.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/config/layer_weights.hpp"
#include "mha/config/mask_file.hpp"
#include "mha/config/weights.hpp"
#include "mha/kernel/attention.hpp"
#include "mha/kernel/mask.hpp"
#include "mha/kernel/packed_weights.hpp"
#include "mha/kernel/transformer.hpp"
#include "mha/run/plan.hpp"

namespace mha {

using Warn = std::function<void(const std::string&)>;

// NaN or Inf in an input would silently poison every output row that sees it;
// refused unless allow_nonfinite says the caller wants exactly that. `name`
// (a path, or "query") and the index of the first such value are in the message.
// Whether every value is finite, from the exponent bits (all ones: Inf or
// NaN): integer operations the compiler vectorizes, so a call's inputs cost
// a fraction of a millisecond per million values.
template <class T>
bool all_finite(const T* x, std::size_t n) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  constexpr Bits exponent =
      static_cast<Bits>(sizeof(T) == 4 ? 0x7f800000ull : 0x7ff0000000000000ull);
  Bits any = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, x + i, sizeof b);
    any |= static_cast<Bits>((b & exponent) == exponent);
  }
  return any == 0;
}

template <class T>
void check_finite(const T* x, std::size_t n, const std::vector<std::size_t>& shape,
                  const std::string& name) {
  if (all_finite(x, n)) return;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) continue;
    std::vector<std::size_t> index(shape.size());
    for (std::size_t k = shape.size(), rest = i; k-- > 0;) {
      index[k] = rest % shape[k];
      rest /= shape[k];
    }
    fail_input(name + ": non-finite value " + std::to_string(x[i]) + " at index " +
               shape_str(index) + "; expected finite numbers (allow_nonfinite accepts them" +
               (std::isinf(x[i]) && sizeof(T) == 4
                    ? "; a value beyond float32's range, +-3.4e38, also reads as inf: "
                      "dtype float64 keeps it)"
                    : ")"));
  }
}

template <class Tensor>
void check_finite(const Tensor& t, const std::string& name) {
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  check_finite(t.data(), t.size(), shape, name);
}

template <class T>
void check_finite(const Weights<T>& w, const std::string& path, const std::string& prefix = "") {
  check_finite(w.W_q, path + ":" + prefix + "W_q");
  check_finite(w.W_k, path + ":" + prefix + "W_k");
  check_finite(w.W_v, path + ":" + prefix + "W_v");
  check_finite(w.W_o, path + ":" + prefix + "W_o");
  if (w.has_bias()) {
    check_finite(w.b_q, path + ":" + prefix + "b_q");
    check_finite(w.b_k, path + ":" + prefix + "b_k");
    check_finite(w.b_v, path + ":" + prefix + "b_v");
    check_finite(w.b_o, path + ":" + prefix + "b_o");
  }
}

inline Rope rope_of(const Config& c) {
  Rope r;
  r.layout = c.rope == Config::RopeKind::half          ? RopeLayout::half
             : c.rope == Config::RopeKind::interleaved ? RopeLayout::interleaved
                                                       : RopeLayout::none;
  r.theta = c.rope_theta;
  r.dim = c.rope_dim ? static_cast<std::size_t>(*c.rope_dim) : 0;
  r.offset = static_cast<std::size_t>(c.position_offset);
  r.scaling = c.rope_scaling;
  return r;
}

template <class T>
class TypedLayer {
 public:
  // The weights of `plan` (its file's arrays, or drawn from the seed),
  // checked for NaN/Inf unless allow_nonfinite, and, with `planned_mask`, the
  // mask of the planned sizes (a layer built without its call's sizes makes
  // each call's mask instead). Throws mha::Error naming the tensor or file.
  TypedLayer(const RunPlan& plan, const Warn& warn, bool planned_mask = true)
      : config_(plan.config), dims_(plan.dims), stack_(plan.stack) {
    const Config& c = config_;
    scale_ = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(dims_.d_k));
    if (stack_) {
      build_stack(plan);
    } else if (plan.weights) {
      weights_ = weights_from_arrays<T>(plan.weights->arrays, dims_, plan.use_bias, *c.weights);
      if (!c.allow_nonfinite) check_finite(weights_, *c.weights);
    } else {
      weights_ = random_weights<T>(dims_, plan.use_bias, c.seed, plan.threads);
    }
    if (planned_mask) mask_ = std::make_shared<Mask<T>>(load_mask<T>(c, dims_, warn));
    // bfloat16 GEMMs read the weights packed once, here, rather than in each call.
    if constexpr (std::is_same_v<T, float>)
      if (c.dtype == ComputeType::bfloat16) {
        pack_bf16(weights_, plan.threads);
        for (TransformerLayer<T>& L : stack_weights_.layers) pack_bf16(L, plan.threads);
      }
  }

  const Config& config() const { return config_; }
  const Dims& dims() const { return dims_; }  // as planned
  const std::optional<StackShape>& stack() const { return stack_; }
  double scale() const { return scale_; }
  const Weights<T>& weights() const { return weights_; }
  const StackWeights<T>& stack_weights() const { return stack_weights_; }

  // The mask of a call with sizes `d` and config `c` (the layer's, or one
  // with a call's mask keys): the one built with the layer when both are the
  // planned ones, else made now.
  std::shared_ptr<const Mask<T>> mask(const Config& c, const Dims& d, const Warn& warn) const {
    if (mask_ && &c == &config_ && d.B == dims_.B && d.T == dims_.T && d.S == dims_.S) return mask_;
    return std::make_shared<Mask<T>>(load_mask<T>(c, d, warn));
  }
  const Mask<T>& planned_mask() const { return *mask_; }
  // The decoder's cross-attention mask (memory padding).
  Mask<T> cross_mask(const Config& c) const {
    Mask<T> m;
    if (c.memory_key_lengths) m.key_lengths = *c.memory_key_lengths;
    return m;
  }

  // The kernel's options as `c` sets them (no attention output, no sinks).
  LayerOptions<T> attention_options(const Config& c) const {
    LayerOptions<T> o;
    o.scale = static_cast<T>(scale_);
    o.masked_rows = c.masked_rows;
    o.threads = c.threads;
    o.allow_nonfinite = c.allow_nonfinite;
    o.softcap = static_cast<T>(c.softcap.value_or(0.0));
    o.bf16_gemm = c.dtype == ComputeType::bfloat16;
    o.rope = rope_of(c);
    o.qk_norm_eps = static_cast<T>(c.qk_norm_eps);
    return o;
  }
  StackOptions<T> stack_options(const Config& c) const {
    StackOptions<T> o;
    o.kind = stack_->kind;
    o.activation = c.activation;
    o.norm_first = c.norm_first;
    o.eps = static_cast<T>(c.layer_norm_eps);
    o.threads = c.threads;
    o.bf16_gemm = c.dtype == ComputeType::bfloat16;
    LayerOptions<T>& sa = o.self_attn;
    sa.scale = static_cast<T>(scale_);
    sa.masked_rows = c.masked_rows;
    sa.allow_nonfinite = c.allow_nonfinite;
    sa.softcap = static_cast<T>(c.softcap.value_or(0.0));
    sa.bf16_gemm = o.bf16_gemm;
    sa.rope = rope_of(c);
    LayerOptions<T>& ca = o.cross_attn;
    ca = sa;
    ca.rope = Rope{};  // rotary positions are the self-attention's
    ca.softcap = T(0);
    ca.scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(stack_->cross.d_k)));
    return o;
  }

  // The attention layer: X_q (B, T, d_model), X_k (B, S, kdim), X_v (B, S,
  // vdim) as in attention_layer (attention.hpp); output (B, T, d_out).
  // A call of under a million multiply-adds runs on the calling thread: waking
  // the pool costs more than the second thread saves there (a (1, 16, 64), h
  // = 4 call is ~0.6 MFLOP). The bits do not depend on the thread count.
  void attend(const Dims& d, const T* X_q, const T* X_k, const T* X_v, const Mask<T>& mask,
              const LayerOptions<T>& options, T* output) const {
    constexpr std::uint64_t kInlineFlops = 2'000'000;
    if (d.flops() >= kInlineFlops || options.threads == 1)
      return attention_layer<T>(d, X_q, X_k, X_v, weights_, mask, options, output);
    LayerOptions<T> inline_options = options;
    inline_options.threads = 1;
    attention_layer<T>(d, X_q, X_k, X_v, weights_, mask, inline_options, output);
  }
  // The stack: x (B, T, d_model), memory (B, S, d_model) for decoders;
  // output (B, T, d_model).
  void run_stack(const StackShape& s, const T* x, const T* memory, const Mask<T>& self_mask,
                 const Mask<T>& cross_mask, const StackOptions<T>& options, T* output) const {
    transformer_stack<T>(s, x, memory, stack_weights_, self_mask, cross_mask, options, output);
  }

  // Finite inputs can still overflow the compute dtype (logits beyond 3.4e38
  // in float32); say so rather than return NaN where no policy asked for it.
  void check_output(const Config& c, const T* output, std::size_t n) const {
    if (c.allow_nonfinite || c.masked_rows == MaskedRows::nan || all_finite(output, n)) return;
    for (std::size_t i = 0; i < n; ++i)
      if (!std::isfinite(output[i]) && stack_)
        fail_input("output element " + std::to_string(i) +
                   " is not finite: the inputs or weights overflow the compute dtype");
      else if (!std::isfinite(output[i]))
        fail_input("output element " + std::to_string(i) +
                   " is not finite: the inputs or weights overflow " +
                   (sizeof(T) == 4 ? "float32" : "float64") + " (logits beyond its range); " +
                   (sizeof(T) == 4 ? "use dtype float64 or smaller values" : "use smaller values"));
  }

 private:
  void build_stack(const RunPlan& plan) {
    const Config& c = config_;
    const StackShape& s = *stack_;
    if (!plan.weights) {
      stack_weights_ = random_stack<T>(s, c.seed, plan.threads);
      return;
    }
    stack_weights_ = stack_from_arrays<T>(plan.weights->arrays, s, *c.weights);
    if (c.allow_nonfinite) return;
    for (std::size_t i = 0; i < stack_weights_.layers.size(); ++i) {
      const TransformerLayer<T>& L = stack_weights_.layers[i];
      const std::string prefix = "layers." + std::to_string(i) + ".";
      check_finite(L.self_attn, *c.weights, prefix + "self_attn.");
      if (s.kind == LayerKind::decoder)
        check_finite(L.cross_attn, *c.weights, prefix + "cross_attn.");
      check_finite(L.ffn.W_1, *c.weights + ":" + prefix + "ffn.W_1");
      check_finite(L.ffn.W_2, *c.weights + ":" + prefix + "ffn.W_2");
    }
  }

  Config config_;
  Dims dims_;
  std::optional<StackShape> stack_;
  double scale_ = 1;
  Weights<T> weights_;
  StackWeights<T> stack_weights_;
  std::shared_ptr<const Mask<T>> mask_;  // for the planned sizes, or null
};

}  // namespace mha
