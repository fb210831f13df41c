// Tokenizers read from a Hugging Face tokenizer.json: byte-level BPE (GPT-2, LLaMA-3, Qwen),
// SentencePiece-style BPE with byte fallback (LLaMA-2, Mistral), WordPiece (BERT) and
// SentencePiece's Unigram (T5, ALBERT, XLNet), with their normalizers (SentencePiece's
// precompiled character map among them), pre-tokenizers, added tokens and post-processors. encode()
// gives the ids and tokens the reference implementation gives (docs/tokenizers.md says which one
// and what is supported).
//
//   mha::Tokenizer t = mha::Tokenizer::from_file("models/llama3/tokenizer.json");
//   mha::Encoding e = t.encode("Hello world");  // e.ids: {9906, 1917}, e.tokens: {"Hello",
//   "Ġworld"}
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mha {

struct Encoding {
  std::vector<std::int32_t> ids;
  std::vector<std::string> tokens;  // the vocabulary's token strings, as tokenizer.json spells them
};

// Decoded bytes made readable: a space as ␣, a newline as ↵, a tab as ⇥, another control
// character (U+0000-U+001F, U+007F-U+009F) as \xNN, and each run of bytes that are no whole
// UTF-8 character as their hex in ‹›, e.g. ‹e2 9c›; everything else as it is.
std::string visible_text(std::string_view bytes);

namespace text {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // Reads a tokenizer.json (and tokenizer_config.json in the same directory when present);
  // throws mha::Error (invalid_input) with one line naming the file and what was expected, for
  // anything unsupported or malformed.
  static Tokenizer from_file(const std::string& tokenizer_json);
  // The same from the file's text; `name` is what messages call it.
  static Tokenizer from_json_text(std::string_view tokenizer_json, const std::string& name,
                                  std::string_view tokenizer_config_json = {});

  // Thread-safe: a Tokenizer may encode from several threads at once.
  Encoding encode(std::string_view utf8_text, bool add_special_tokens = true) const;
  std::size_t vocab_size() const;                   // largest id + 1, added tokens included
  const std::string& token(std::int32_t id) const;  // throws for an id out of range
  bool has_token(std::int32_t id) const;            // whether token(id) has a token
  // The tokenizer.json decoder's bytes for `id` alone, as the reference's decode([id]) gives
  // them ("Ġcat" → " cat", "<0x0A>" → "\n"); part of a UTF-8 character for some byte-level
  // or byte-fallback pieces. An added token is itself; without a (supported) decoder, the piece.
  std::string decode_token(std::int32_t id) const;
  // What outputs show for `id`: visible_text of its bytes decoded as a token after others, so
  // that a word start shows as ␣ for every tokenizer (GPT-2 "Ġcat", LLaMA-2 "▁cat" and T5
  // "▁cat" all → "␣cat", where decode([id]) drops the SentencePiece space); the piece when
  // the decoder leaves nothing. docs/tokenizers.md.
  std::string display_token(std::int32_t id) const;
  std::optional<std::int32_t> pad_id() const;  // the padding token if the tokenizer has one
  // "byte-level BPE", "BPE with byte fallback", "BPE", "WordPiece", "Unigram" or "Unigram with
  // byte fallback".
  std::string kind() const;

 private:
  explicit Tokenizer(std::shared_ptr<const text::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const text::TokenizerImpl> impl_;  // immutable: copies share it
};

}  // namespace mha
