// A GGUF file (io/gguf.hpp) seen as the Hugging Face checkpoint that
// llama.cpp's converter (convert_hf_to_gguf.py) made it from: config.json's
// keys rebuilt from the metadata, and the tensors under the reference
// implementation's names and shapes, with the converter's changes undone
// (docs/gguf.md). Internal to checkpoint/.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tensor_source.hpp"

namespace mha {

struct GgufView {
  std::string architecture;               // general.architecture
  nlohmann::json config;                  // config.json as transformers would write it
  std::unique_ptr<TensorSource> tensors;  // dtype: the GGUF type's name ("F32", "Q4_K")
};

// Throws mha::Error (invalid_input) naming the file and the key or tensor: a
// malformed file, an architecture mha has no family for, a tensor missing.
GgufView open_gguf(const std::string& path);

}  // namespace mha
