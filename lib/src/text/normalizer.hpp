// Normalizers: text → text before added tokens (normalized ones) and pre-tokenization.
// Sequence, BertNormalizer, NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Replace, Prepend,
// Nmt, and SentencePiece's Precompiled (precompiled.cpp).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace mha::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;  // valid UTF-8 in and out
};

// nullptr for a null normalizer; `where` names the file and key in messages.
std::unique_ptr<const Normalizer> make_normalizer(const nlohmann::json& config,
                                                  const std::string& where, int depth = 0);
// "Precompiled": SentencePiece's character map (precompiled.cpp).
std::unique_ptr<const Normalizer> make_precompiled(const nlohmann::json& config,
                                                   const std::string& where);

}  // namespace mha::text
