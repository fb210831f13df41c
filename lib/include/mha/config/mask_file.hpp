// The mask a config describes, read from its files for the kernel
// (kernel/mask.hpp): the load stage's part of masking.
//   causal       the config's causal, as is;
//   mask         a .npy of shape (T,S), (B,T,S) or (B',h',T,S) with B' in {1,B}
//                and h' in {1,h}; bool (or integer): true/nonzero = may attend;
//                float: added to the scaled logits (-inf masks);
//   key_lengths  B lengths, inline or a 1-D integer .npy: keys s >=
//                key_lengths[b] are padding;
//   key_padding_mask  (B, S): bool true = padding (PyTorch's meaning), or
//                float added to every query's logit for key s;
//   window, alibi  the config's values;
//   bias         a float .npy broadcastable to (B, h, T, S).
// mask_true_means = ignore flips bool/integer masks (PyTorch's attn_mask);
// it does not apply to key_padding_mask, whose true always means padding.
#pragma once

#include <functional>
#include <string>

#include "mha/config/config.hpp"
#include "mha/kernel/dims.hpp"
#include "mha/kernel/mask.hpp"

namespace mha {

// Builds the mask that `config` describes (reading its .npy files) for `dims`.
// Errors name the file or key and the expected shape or range. A float mask
// holding only 0 and 1 (almost always a bool mask saved as float) is passed
// to `warn`.
template <class T>
Mask<T> load_mask(const Config& config, const Dims& dims,
                  const std::function<void(const std::string&)>& warn = {});

}  // namespace mha
