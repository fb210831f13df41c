// The input of one analysis pass (attention_analysis.hpp's analyze_maps,
// ablation.hpp's head_ablation): a one-stack model's rows, or an
// encoder-decoder's source rows with its teacher-forced decoder side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mha {

struct PassInput {
  // ids (B, T) and each row's real length: a one-stack model's tokens, an
  // encoder-decoder's source.
  const std::int32_t* ids = nullptr;
  std::size_t B = 0, T = 0;
  std::vector<std::size_t> lengths;
  // An encoder-decoder's decoder side (null for one stack): its inputs
  // (B, target_T) (decoder_inputs()), the labels they predict (B, target_T)
  // and the target's lengths.
  const std::int32_t* decoder_ids = nullptr;
  const std::int32_t* labels = nullptr;
  std::size_t target_T = 0;
  std::vector<std::size_t> target_lengths;
  bool has_decoder() const { return decoder_ids != nullptr; }
};

}  // namespace mha
