// The model: words → vocabulary tokens. BPE (bpe.cpp), WordPiece (wordpiece.cpp) and Unigram
// (unigram.cpp) read their settings from tokenizer.json's "model"; BPE and WordPiece look tokens
// up in one table, the vocabulary with the added tokens over it (as the reference does), that
// the tokenizer builds first; Unigram searches its own pieces.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mha::text {

using TokenIds = std::unordered_map<std::string, std::int32_t>;
using Merges = std::vector<std::pair<std::string, std::string>>;  // in rank order

class Model {
 public:
  virtual ~Model() = default;
  // Appends the tokens of the words of one section, in order.
  virtual void tokenize(const std::vector<std::string>& words,
                        std::vector<std::string>& tokens) const = 0;
  virtual std::optional<std::int32_t> unk_id() const = 0;
  virtual bool byte_fallback() const { return false; }
};

// `ids` must outlive the model.
std::unique_ptr<const Model> make_bpe(const nlohmann::json& model, const TokenIds& ids,
                                      const Merges& merges, const std::string& where);
std::unique_ptr<const Model> make_wordpiece(const nlohmann::json& model, const TokenIds& ids,
                                            const std::string& where);

// Unigram's model.vocab, [[piece, score], ...]: a piece's id is its index. Read before the
// tokenizer's table (TokenIds) exists, since the pieces are what that table is made of.
struct UnigramVocab {
  std::vector<std::string> pieces;
  std::vector<double> scores;
};
UnigramVocab read_unigram_vocab(const nlohmann::json& model, const std::string& where);
// The model keeps its own pieces (added tokens are not among them, as in the reference).
std::unique_ptr<const Model> make_unigram(const nlohmann::json& model, UnigramVocab vocab,
                                          const std::string& where);

}  // namespace mha::text
