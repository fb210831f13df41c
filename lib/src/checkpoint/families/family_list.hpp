// Declares each registered family (registry.def) for the registry and for
// the family's own file, which defines it.
#pragma once

#include "../config_keys.hpp"
#include "mha/checkpoint/family.hpp"

namespace mha {

#define MHA_FAMILY(name) extern const Family name##_family;
#include "registry.def"
#undef MHA_FAMILY

// ViT's config.json keys (families/vit.cpp), which DeiT's config shares: call
// with c.distillation_token set for a position table that counts it.
void read_vit_config(const ConfigKeys& k, ModelConfig& c);

// Short names the families' tables use.
namespace table {
constexpr Part W = Part::weight, B = Part::bias;
constexpr Dim d = Dim::d_model, f = Dim::d_ff, none = Dim::none;
constexpr Layout vec = Layout::vector, lin = Layout::linear;
}  // namespace table

}  // namespace mha
