#include "mha/kernel/site.hpp"

#include <array>
#include <cctype>
#include <cstring>

namespace mha {

namespace {

// Each kind's name after "blocks.{l}." (or alone, for the model-wide ones).
constexpr std::array<const char*, kSiteKinds> kNames = {
    "hook_embed",
    "hook_pos_embed",
    "hook_resid_pre",
    "ln1.hook_normalized",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_attn_scores",
    "attn.hook_pattern",
    "attn.hook_z",
    "hook_attn_out",
    "hook_resid_mid",
    "ln2.hook_normalized",
    "cross_attn.hook_q",
    "cross_attn.hook_k",
    "cross_attn.hook_v",
    "cross_attn.hook_attn_scores",
    "cross_attn.hook_pattern",
    "cross_attn.hook_z",
    "hook_cross_attn_out",
    "hook_resid_mid_cross",
    "ln3.hook_normalized",
    "mlp.hook_pre",
    "mlp.hook_post",
    "hook_mlp_out",
    "hook_resid_post",
    "ln_final.hook_normalized",
};

// Glob match of p against s ('*' any run, '?' one character), iterative.
bool glob(const char* p, const char* s) {
  const char *star = nullptr, *resume = nullptr;
  while (*s) {
    if (*p == '*') {
      star = p++;
      resume = s;
    } else if (*p == '?' || *p == *s) {
      ++p;
      ++s;
    } else if (star) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (*p == '*') ++p;
  return !*p;
}

}  // namespace

bool model_wide(SiteKind kind) {
  return kind == SiteKind::embed || kind == SiteKind::pos_embed || kind == SiteKind::ln_final;
}

bool blockwise(SiteKind kind) {
  return kind == SiteKind::scores || kind == SiteKind::pattern || kind == SiteKind::cross_scores ||
         kind == SiteKind::cross_pattern;
}

std::string site_name(const Site& site, bool encoder_decoder) {
  std::string name;
  if (encoder_decoder) name = site.stack == Stack::decoder ? "decoder." : "encoder.";
  if (!model_wide(site.kind)) name += "blocks." + std::to_string(site.layer) + ".";
  return name + kNames[static_cast<std::size_t>(site.kind)];
}

std::optional<Site> parse_site_name(const std::string& name, bool encoder_decoder) {
  Site site;
  std::string rest = name;
  if (encoder_decoder) {
    if (rest.rfind("encoder.", 0) == 0) {
      rest = rest.substr(8);
    } else if (rest.rfind("decoder.", 0) == 0) {
      site.stack = Stack::decoder;
      rest = rest.substr(8);
    } else {
      return std::nullopt;
    }
  }
  bool in_block = false;
  if (rest.rfind("blocks.", 0) == 0) {
    std::size_t i = 7, layer = 0;
    const std::size_t digits = i;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i])) && i - digits < 9)
      layer = layer * 10 + static_cast<std::size_t>(rest[i++] - '0');
    if (i == digits || i >= rest.size() || rest[i] != '.') return std::nullopt;
    if (rest[digits] == '0' && i - digits > 1) return std::nullopt;  // "blocks.01."
    site.layer = layer;
    rest = rest.substr(i + 1);
    in_block = true;
  }
  for (std::size_t k = 0; k < kSiteKinds; ++k) {
    if (rest != kNames[k]) continue;
    site.kind = static_cast<SiteKind>(k);
    if (model_wide(site.kind) == in_block) return std::nullopt;
    return site;
  }
  return std::nullopt;
}

bool site_matches(const std::string& pattern, const std::string& name) {
  return glob(pattern.c_str(), name.c_str());
}

}  // namespace mha
