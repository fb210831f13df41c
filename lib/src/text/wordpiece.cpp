// WordPiece (BERT): each word, greedily from its start, as the longest vocabulary token there,
// continuations spelled with the prefix ("##"); a word with any part not in the vocabulary, or
// longer than max_input_chars_per_word characters, is the unknown token as a whole.
#include "json_fields.hpp"
#include "mha/base/message.hpp"
#include "model.hpp"
#include "unicode.hpp"

namespace mha::text {
namespace {

class WordPiece : public Model {
 public:
  WordPiece(const json& model, const TokenIds& ids, const std::string& where) : ids_(ids) {
    unk_token_ = string_field(model, "unk_token", where, "[UNK]");
    const auto it = ids_.find(unk_token_);
    if (it == ids_.end())
      fail_at(where + ".unk_token", echo(unk_token_) + " is not in the vocabulary");
    unk_id_ = it->second;
    prefix_ = string_field(model, "continuing_subword_prefix", where, "##");
    const json* max = optional_field(model, "max_input_chars_per_word");
    if (max) {
      if (!max->is_number_unsigned())
        fail_at(where + ".max_input_chars_per_word", "expected a count, got " + describe(*max));
      max_chars_ = max->get<std::size_t>();
    }
  }

  void tokenize(const std::vector<std::string>& words,
                std::vector<std::string>& tokens) const override {
    std::vector<std::size_t> starts;  // byte offset of each character, and the end
    std::string candidate;
    for (const auto& w : words) {
      starts.clear();
      for (std::size_t i = 0; i < w.size();) {
        std::size_t n;
        decode_utf8(w, i, &n);
        starts.push_back(i);
        i += n;
      }
      const std::size_t chars = starts.size();
      starts.push_back(w.size());
      if (chars > max_chars_) {
        tokens.push_back(unk_token_);
        continue;
      }
      const std::size_t first = tokens.size();
      bool unknown = false;
      for (std::size_t start = 0; start < chars && !unknown;) {
        std::size_t end = chars;
        for (; end > start; --end) {
          candidate.assign(start > 0 ? prefix_ : std::string());
          candidate.append(w, starts[start], starts[end] - starts[start]);
          if (ids_.count(candidate)) break;
        }
        if (end == start) {
          unknown = true;
        } else {
          tokens.push_back(candidate);
          start = end;
        }
      }
      if (unknown) {
        tokens.resize(first);
        tokens.push_back(unk_token_);
      }
    }
  }

  std::optional<std::int32_t> unk_id() const override { return unk_id_; }

 private:
  const TokenIds& ids_;
  std::string unk_token_, prefix_;
  std::int32_t unk_id_ = 0;
  std::size_t max_chars_ = 100;
};

}  // namespace

std::unique_ptr<const Model> make_wordpiece(const json& model, const TokenIds& ids,
                                            const std::string& where) {
  return std::make_unique<WordPiece>(model, ids, where);
}

}  // namespace mha::text
