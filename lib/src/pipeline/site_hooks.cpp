#include "mha/pipeline/site_hooks.hpp"

#include <algorithm>

#include "mha/checkpoint/family.hpp"

namespace mha {

bool HookList::wants(const Site& site) const {
  return std::any_of(hooks_.begin(), hooks_.end(),
                     [&](const SiteHook<float>* h) { return h->wants(site); });
}

void HookList::tensor(const Site& site, float* data, std::size_t rows, std::size_t cols,
                      std::size_t ld) {
  for (SiteHook<float>* h : hooks_)
    if (h->wants(site)) h->tensor(site, data, rows, cols, ld);
}

void HookList::block(const Site& site, std::size_t b, std::size_t head, std::size_t t0,
                     std::size_t rows, float* data, std::size_t ld) {
  for (SiteHook<float>* h : hooks_)
    if (h->wants(site)) h->block(site, b, head, t0, rows, data, ld);
}

MapHook::MapHook(std::size_t heads_in_model, std::vector<std::size_t> layers,
                 const std::vector<std::size_t>& heads, Sink sink)
    : layers_(std::move(layers)), head_slot_(heads_in_model, -1), sink_(std::move(sink)) {
  for (std::size_t i = 0; i < heads.size(); ++i) head_slot_.at(heads[i]) = static_cast<int>(i);
  if (heads.empty())
    for (std::size_t i = 0; i < heads_in_model; ++i) head_slot_[i] = static_cast<int>(i);
}

long MapHook::slot_of(std::size_t l) const {
  const auto it = std::lower_bound(layers_.begin(), layers_.end(), l);
  return it != layers_.end() && *it == l ? it - layers_.begin() : -1;
}

bool MapHook::wants(const Site& site) const {
  return (site.kind == SiteKind::pattern || site.kind == SiteKind::cross_pattern) &&
         slot_of(site.layer) >= 0;
}

void MapHook::block(const Site& site, std::size_t b, std::size_t head, std::size_t t0,
                    std::size_t rows, float* data, std::size_t ld) {
  (void)ld;  // a whole row: keys = ld
  if (head_slot_[head] < 0) return;
  const MapKind kind = site.kind == SiteKind::cross_pattern ? MapKind::cross
                       : site.stack == Stack::decoder       ? MapKind::decoder
                                                            : MapKind::encoder;
  sink_(kind, static_cast<std::size_t>(slot_of(site.layer)), b,
        static_cast<std::size_t>(head_slot_[head]), t0, rows, data);
}

Site stack_output_site(const Checkpoint& model, Stack stack) {
  const ModelConfig& c = model.config();
  const std::size_t layers = stack == Stack::decoder ? c.num_decoder_layers : c.num_layers;
  if (!model.final_norm(stack).empty()) return Site{SiteKind::ln_final, stack, 0};
  SiteKind kind = SiteKind::resid_post;
  if (c.norm_placement == NormPlacement::post)
    kind = stack == Stack::decoder ? SiteKind::ln3 : SiteKind::ln2;
  return Site{kind, stack, layers ? layers - 1 : 0};
}

HiddenHook::HiddenHook(const Checkpoint& model, Sink sink)
    : output_{stack_output_site(model, Stack::main), model.config().encoder_decoder
                                                         ? stack_output_site(model, Stack::decoder)
                                                         : stack_output_site(model, Stack::main)},
      layers_{model.config().num_layers, model.config().num_decoder_layers},
      sink_(std::move(sink)) {}

bool HiddenHook::wants(const Site& site) const {
  return site.kind == SiteKind::resid_pre || site == output_[site.stack == Stack::decoder];
}

void HiddenHook::tensor(const Site& site, float* data, std::size_t, std::size_t, std::size_t) {
  const std::size_t s = site.stack == Stack::decoder;
  if (site == output_[s]) return sink_(site.stack, layers_[s], data);
  sink_(site.stack, site.layer, data);
}

bool QKHook::wants(const Site& site) const {
  return (site.kind == SiteKind::q || site.kind == SiteKind::k) && site.stack == Stack::main &&
         std::binary_search(layers_.begin(), layers_.end(), site.layer);
}

void QKHook::tensor(const Site& site, float* data, std::size_t, std::size_t, std::size_t ld) {
  if (site.kind == SiteKind::q) {
    q_ = data;
    ldq_ = ld;
    return;
  }
  const auto slot = static_cast<std::size_t>(
      std::lower_bound(layers_.begin(), layers_.end(), site.layer) - layers_.begin());
  sink_(slot, q_, ldq_, data, ld);
}

}  // namespace mha
