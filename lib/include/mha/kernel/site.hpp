// Activation sites: every activation a Transformer layer stack computes, by
// kind, in TransformerLens's names (docs/models.md has the table with shapes),
// and the one hook through which a pass shows them and lets them be edited.
//
// A site is (kind, stack, layer). Its name, for a decoder-only or
// encoder-only model:
//   hook_embed, hook_pos_embed                      (B, T, d_model)
//   blocks.{l}.hook_resid_pre                       (B, T, d_model)
//   blocks.{l}.ln1.hook_normalized                  (B, T, d_model)
//   blocks.{l}.attn.hook_q                          (B, T, h, d_head)
//   blocks.{l}.attn.hook_k, attn.hook_v             (B, S, kv_heads, d_head)
//   blocks.{l}.attn.hook_attn_scores                (B, h, T, S)
//   blocks.{l}.attn.hook_pattern                    (B, h, T, S)
//   blocks.{l}.attn.hook_z                          (B, T, h, d_head)
//   blocks.{l}.hook_attn_out, hook_resid_mid        (B, T, d_model)
//   blocks.{l}.ln2.hook_normalized                  (B, T, d_model)
//   blocks.{l}.mlp.hook_pre, mlp.hook_post          (B, T, d_ff)
//   blocks.{l}.hook_mlp_out, hook_resid_post        (B, T, d_model)
//   ln_final.hook_normalized                        (B, T, d_model)
// An encoder-decoder's names start with "encoder." or "decoder."; a decoder
// layer adds its cross-attention: cross_attn.hook_q ... hook_z (keys over the
// encoder's S positions), hook_cross_attn_out, hook_resid_mid_cross, and its
// norms ln1 (self), ln2 (cross), ln3 (MLP).
//
// Where a layer has no such activation there is no site: no hook_pos_embed
// without a learned position table, no hook_resid_mid with a parallel
// residual (GPT-NeoX), no ln_final without a final norm. Post-norm layers
// (BERT, BART) follow TransformerLens's HookedEncoder: hook_resid_mid is
// resid_pre + attn_out, ln1.hook_normalized its norm, hook_resid_post the
// sum before ln2 (ln3 in a decoder), whose output is the next layer's
// hook_resid_pre. Gated MLPs: mlp.hook_pre is the gate's pre-activation,
// mlp.hook_post act(gate) * up. Sandwich norms (Gemma 2): hook_attn_out and
// hook_mlp_out are after the post-norms.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace mha {

// Which stack of layers: a decoder-only or encoder-only model has one
// (main); an encoder-decoder's encoder is main, its decoder `decoder`.
enum class Stack { main, decoder };

enum class SiteKind {
  embed,      // hook_embed
  pos_embed,  // hook_pos_embed
  resid_pre,
  ln1,  // ln1.hook_normalized
  q,    // attn.hook_q
  k,
  v,
  scores,   // attn.hook_attn_scores: scaled, soft-capped, masked (-inf), before softmax
  pattern,  // attn.hook_pattern
  z,        // attn.hook_z
  attn_out,
  resid_mid,
  ln2,
  cross_q,  // decoder layers of an encoder-decoder: cross_attn.hook_q ...
  cross_k,
  cross_v,
  cross_scores,
  cross_pattern,
  cross_z,
  cross_attn_out,  // hook_cross_attn_out
  resid_mid_cross,
  ln3,
  mlp_pre,
  mlp_post,
  mlp_out,
  resid_post,
  ln_final,  // ln_final.hook_normalized (one per stack)
};
constexpr std::size_t kSiteKinds = static_cast<std::size_t>(SiteKind::ln_final) + 1;

struct Site {
  SiteKind kind = SiteKind::resid_pre;
  Stack stack = Stack::main;
  std::size_t layer = 0;  // 0 for hook_embed, hook_pos_embed and ln_final

  bool operator==(const Site& o) const {
    return kind == o.kind && stack == o.stack && layer == o.layer;
  }
  bool operator!=(const Site& o) const { return !(*this == o); }
};

// True for the sites that belong to no layer (embeddings, the final norm).
bool model_wide(SiteKind kind);
// True for the attention's per-head (B, h, T, S) sites, which arrive in blocks.
bool blockwise(SiteKind kind);

// The site's name (above); `encoder_decoder` adds the stack's prefix.
std::string site_name(const Site& site, bool encoder_decoder);

// The site a name denotes, or nothing when the name is not of the grammar
// above (the model's own range and features are checked by the caller).
std::optional<Site> parse_site_name(const std::string& name, bool encoder_decoder);

// A name pattern matches a site's name as a shell glob: "*" any run of
// characters (dots included), "?" one; "blocks.*.attn.hook_z" every layer's.
bool site_matches(const std::string& pattern, const std::string& name);

// The hook a layer stack calls at each site it computes. wants() is asked
// once per site and layer before the layer runs, so a pass that wants nothing
// takes its fastest path; the calls then come in the order of the pass.
//   tensor(): a whole activation, C-order (rows, cols) with row stride ld:
//     rows B*T (B*S for k and v) and cols as the table's trailing dims (h*d_head for q, k, v,
//     z; d_model; d_ff). On the pass's thread; what it leaves in `data` is
//     what the pass goes on with (an edit: ablation, patching).
//   block(): rows [t0, t0 + rows) of head `head` of batch row b of a
//     (B, h, T, S) site, a C-order (rows, S) block with row stride ld. From
//     worker threads, concurrently and in no fixed order; for the pattern,
//     an edit is what the heads' outputs are computed from.
template <class T>
class SiteHook {
 public:
  virtual ~SiteHook() = default;
  virtual bool wants(const Site& site) const = 0;
  virtual void tensor(const Site& site, T* data, std::size_t rows, std::size_t cols,
                      std::size_t ld) {
    (void)site, (void)data, (void)rows, (void)cols, (void)ld;
  }
  virtual void block(const Site& site, std::size_t b, std::size_t head, std::size_t t0,
                     std::size_t rows, T* data, std::size_t ld) {
    (void)site, (void)b, (void)head, (void)t0, (void)rows, (void)data, (void)ld;
  }
};

}  // namespace mha
