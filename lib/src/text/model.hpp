// The model: words → vocabulary tokens. BPE (bpe.cpp) and WordPiece (wordpiece.cpp) read their
// settings from tokenizer.json's "model"; both look tokens up in one table, the vocabulary with
// the added tokens over it (as the reference does), that the tokenizer builds first.
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

}  // namespace mha::text
