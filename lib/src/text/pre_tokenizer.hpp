// Pre-tokenizers: one section of text (between added tokens) → the words BPE or WordPiece
// tokenize one at a time. ByteLevel, Split, Sequence, Metaspace, BertPreTokenizer, Whitespace,
// WhitespaceSplit, Digits, Punctuation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mha::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // `words` in, words out (each in turn split); `section` is the index of the text's section
  // among those the added tokens cut it into (Metaspace's prepend_scheme "first").
  virtual std::vector<std::string> split(std::vector<std::string> words,
                                         std::size_t section) const = 0;
  virtual bool byte_level() const { return false; }  // for Tokenizer::kind()
};

// nullptr for a null pre-tokenizer.
std::unique_ptr<const PreTokenizer> make_pre_tokenizer(const nlohmann::json& config,
                                                       const std::string& where, int depth = 0);

}  // namespace mha::text
