// Fuzz target for the tokenizers: the bytes as a tokenizer.json (mha::Tokenizer::from_json_text;
// an accepted one then encodes a few texts and the bytes themselves), and the bytes as text
// for three fixed tokenizers (byte-level BPE with a Split regex, SentencePiece-style BPE with
// byte fallback and Metaspace, BERT's WordPiece). Refusals must be mha::Error (invalid_input);
// every encoding has one id per token, each id a token of the vocabulary.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/text/tokenizer.hpp"

namespace {

void check(const mha::Tokenizer& t, std::string_view text) {
  for (const bool special : {true, false}) {
    const mha::Encoding e = t.encode(text, special);
    FUZZ_CHECK(e.ids.size() == e.tokens.size());
    for (const std::int32_t id : e.ids) {
      FUZZ_CHECK(id >= 0 && static_cast<std::size_t>(id) < t.vocab_size());
      t.token(id);  // must not throw
    }
  }
}

const char* const kByteLevel = R"({
  "added_tokens": [{"id": 9, "content": "<|end|>", "special": true, "lstrip": true}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "post_processor": {"type": "ByteLevel"},
  "model": {"type": "BPE", "ignore_merges": true,
            "vocab": {"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u0120ab": 4, "1": 5, "11": 6, "'": 7, "s": 8},
            "merges": [["a", "b"], ["\u0120", "ab"], ["1", "1"]]}})";

const char* const kByteFallback = R"({
  "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
  "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
            "vocab": {"<unk>": 0, "<s>": 1, "\u2581": 2, "a": 3, "\u2581a": 4, "<0x41>": 5, "<0xC3>": 6, "<0xA9>": 7},
            "merges": ["\u2581 a"]}})";

const char* const kWordPiece = R"({
  "added_tokens": [{"id": 1, "content": "[UNK]", "special": true}, {"id": 2, "content": "[CLS]", "special": true},
                   {"id": 3, "content": "[SEP]", "special": true}],
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 2], "sep": ["[SEP]", 3]},
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 20,
            "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "##b": 5, "ab": 6, "\u4e2d": 7}}})";

const std::vector<mha::Tokenizer>& fixed() {
  static const std::vector<mha::Tokenizer> t = {
      mha::Tokenizer::from_json_text(kByteLevel, "byte_level.json"),
      mha::Tokenizer::from_json_text(kByteFallback, "byte_fallback.json"),
      mha::Tokenizer::from_json_text(kWordPiece, "wordpiece.json")};
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const mha::Tokenizer& t : fixed()) check(t, bytes);
  try {
    const mha::Tokenizer t = mha::Tokenizer::from_json_text(bytes, "fuzz.json");
    for (const char* text : {"", "a", "Hello world", " ab  ab\n", "\xc3\xa9\xe4\xb8\xad"})
      check(t, text);
    check(t, bytes);
  } catch (const mha::Error& e) {
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
  }
  return 0;
}
