// The choices the kernel takes as enums: how causality aligns queries and
// keys, what a fully masked row gets, which Transformer layer and which
// activation. The config (config/config.hpp) holds them under the same names,
// so a run passes them through unchanged.
#pragma once

namespace mha {

// top_left: query t sees keys s <= t; bottom_right: s <= t + S - T (mask.hpp).
enum class Causal { none, top_left, bottom_right };
// A query row whose keys are all masked: weights and output 0, 1/S over all
// keys, or NaN.
enum class MaskedRows { zero, uniform, nan };
// What a run computes: one attention (the default), or a stack of Transformer
// encoder or decoder layers around it (transformer.hpp, docs/layers.md).
enum class LayerKind { attention, encoder, decoder };
// The feed-forward's activation: ReLU, GELU (erf), GELU's tanh approximation,
// or SiLU (x sigmoid(x), the gate of LLaMA's SwiGLU).
enum class Activation { relu, gelu, gelu_tanh, silu };

}  // namespace mha
