// Ready-made hooks over a pass's activation sites (kernel/site.hpp), for the
// things a run and the analyses take from every pass: the attention maps of
// chosen layers and heads, the hidden states, the queries and keys, a few
// sites by function, and several hooks at once.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "mha/checkpoint/checkpoint.hpp"
#include "mha/kernel/site.hpp"

namespace mha {

// Several hooks as one: a site is wanted when one of them wants it, and each
// sees the sites it wants, in the list's order (an editor after a reader sees
// the activation before its edit only if it comes later in the list).
class HookList : public SiteHook<float> {
 public:
  HookList() = default;
  explicit HookList(std::vector<SiteHook<float>*> hooks) : hooks_(std::move(hooks)) {}
  void add(SiteHook<float>* hook) {
    if (hook) hooks_.push_back(hook);
  }
  bool empty() const { return hooks_.empty(); }
  bool wants(const Site& site) const override;
  void tensor(const Site& site, float* data, std::size_t rows, std::size_t cols,
              std::size_t ld) override;
  void block(const Site& site, std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
             float* data, std::size_t ld) override;

 private:
  std::vector<SiteHook<float>*> hooks_;
};

// A hook from functions: `want` picks the sites, `on_tensor` and `on_block`
// see them (either may be empty).
class SiteFunctions : public SiteHook<float> {
 public:
  std::function<bool(const Site&)> want;
  std::function<void(const Site&, float* data, std::size_t rows, std::size_t cols, std::size_t ld)>
      on_tensor;
  std::function<void(const Site&, std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
                     float* data, std::size_t ld)>
      on_block;

  bool wants(const Site& site) const override { return want && want(site); }
  void tensor(const Site& site, float* data, std::size_t rows, std::size_t cols,
              std::size_t ld) override {
    if (on_tensor) on_tensor(site, data, rows, cols, ld);
  }
  void block(const Site& site, std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
             float* data, std::size_t ld) override {
    if (on_block) on_block(site, b, head, t0, rows, data, ld);
  }
};

// The three kinds of maps: a stack's self-attention (the encoder's, or a
// one-stack model's: encoder), an encoder-decoder's decoder's self-attention
// and its cross-attention.
enum class MapKind { encoder, decoder, cross };

// The attention maps (hook_pattern, and cross_attn.hook_pattern) of the
// layers `layers` (ascending, distinct; in each stack that has them) and
// heads `heads` (ascending, distinct; empty: all): `sink` receives map rows
// [t0, t0 + rows) of head slot `head` (an index into heads) of batch row b
// for layer slot `slot` (an index into layers), a C-order (rows, keys) block.
// From worker threads.
class MapHook : public SiteHook<float> {
 public:
  using Sink = std::function<void(MapKind kind, std::size_t slot, std::size_t b, std::size_t head,
                                  std::size_t t0, std::size_t rows, const float* block)>;
  MapHook(std::size_t heads_in_model, std::vector<std::size_t> layers,
          const std::vector<std::size_t>& heads, Sink sink);
  bool wants(const Site& site) const override;
  void block(const Site& site, std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
             float* data, std::size_t ld) override;
  // Layer l's slot, or -1.
  long slot_of(std::size_t l) const;

 private:
  std::vector<std::size_t> layers_;
  std::vector<int> head_slot_;
  Sink sink_;
};

// The site that holds a stack's output, its last hidden state: ln_final with
// a final norm, else the last layer's hook_resid_post (pre-norm) or its last
// norm's output (post-norm: ln2, or ln3 in a decoder).
Site stack_output_site(const Checkpoint& model, Stack stack);

// The hidden states as transformers' output_hidden_states gives them, to
// `sink(stack, i, hidden)` (B, L, d_model): state i < layers is layer i's
// input (hook_resid_pre; state 0 the embeddings, after their norm), the last
// the stack's output (stack_output_site). On the pass's thread.
class HiddenHook : public SiteHook<float> {
 public:
  using Sink = std::function<void(Stack stack, std::size_t i, const float* hidden)>;
  HiddenHook(const Checkpoint& model, Sink sink);
  bool wants(const Site& site) const override;
  void tensor(const Site& site, float* data, std::size_t rows, std::size_t cols,
              std::size_t ld) override;

 private:
  Site output_[2];
  std::size_t layers_[2];
  Sink sink_;
};

// The queries and keys of the map layers (MapHook's `layers`), after QK-norm
// and RoPE: `sink(slot, Q, ldq, K, ldk)` with Q (B*T, h*head_dim) and K
// (B*S, kv_heads*head_dim), once both are known. Self-attention of the main
// stack only. On the pass's thread.
class QKHook : public SiteHook<float> {
 public:
  using Sink = std::function<void(std::size_t slot, const float* Q, std::size_t ldq, const float* K,
                                  std::size_t ldk)>;
  QKHook(std::vector<std::size_t> layers, Sink sink)
      : layers_(std::move(layers)), sink_(std::move(sink)) {}
  bool wants(const Site& site) const override;
  void tensor(const Site& site, float* data, std::size_t rows, std::size_t cols,
              std::size_t ld) override;

 private:
  std::vector<std::size_t> layers_;
  Sink sink_;
  const float* q_ = nullptr;
  std::size_t ldq_ = 0;
};

}  // namespace mha
