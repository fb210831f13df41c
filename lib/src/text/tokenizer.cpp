// Tokenizer: tokenizer.json read and wired (normalizer, pre-tokenizer, model, post-processor,
// added tokens), and encode's pipeline, step for step the reference's:
//   text → cut at the raw added tokens; each piece between them →
//     normalize → cut at the normalized added tokens; each piece between them →
//       pre-tokenize → model
//   then the post-processor's special tokens around it all, and each token's id.
#include "mha/text/tokenizer.hpp"
#include "mha/base/message.hpp"
#include "mha/io/json_file.hpp"

#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "added_tokens.hpp"
#include "decoder.hpp"
#include "json_fields.hpp"
#include "model.hpp"
#include "normalizer.hpp"
#include "post_processor.hpp"
#include "pre_tokenizer.hpp"
#include "tokenizer_json.hpp"
#include "unicode.hpp"

namespace mha::text {

struct TokenizerImpl {
  std::string kind;
  TokenIds ids;                                         // the vocabulary, added tokens over it
  std::unordered_map<std::string, std::int32_t> added;  // added contents (also normalized)
  std::vector<std::string> id_to_token;
  std::vector<bool> has_token;  // ids with a token (the vocabulary may have gaps)
  std::unique_ptr<const Normalizer> normalizer;
  std::unique_ptr<const PreTokenizer> pre_tokenizer;
  std::unique_ptr<const Model> model;
  SingleTemplate post;
  Decoder decoder;
  AddedTokenSplitter raw_splitter, normalized_splitter;
  std::optional<std::int32_t> pad_id;

  std::vector<std::string> tokens_of(std::string_view text) const;
  std::int32_t id_of(const std::string& token) const;
};

namespace {

json parse(std::string_view text, const std::string& name) {
  return parse_json(text, name, json_kind::tokenizer_config);
}

std::vector<AddedToken> read_added_tokens(const json& root, const std::string& where) {
  std::vector<AddedToken> out;
  const json* list = optional_field(root, "added_tokens");
  if (!list) return out;
  if (!list->is_array()) fail_at(where, "expected an array of added tokens");
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& t = object_at((*list)[i], at);
    AddedToken a;
    const json* id = optional_field(t, "id");
    if (!id) fail_at(at, "expected an \"id\"");
    a.id = id_value(*id, at + ".id");
    a.content = string_field(t, "content", at);
    if (a.content.empty()) fail_at(at + ".content", "expected a non-empty string");
    a.special = bool_field(t, "special", at, false);
    a.lstrip = bool_field(t, "lstrip", at, false);
    a.rstrip = bool_field(t, "rstrip", at, false);
    a.normalized = bool_field(t, "normalized", at, !a.special);
    out.push_back(std::move(a));
  }
  return out;
}

// tokenizer_config.json's pad_token: a string or {"content": ...}.
std::optional<std::string> config_pad_token(const json& config) {
  const json* pad = config.is_object() ? optional_field(config, "pad_token") : nullptr;
  if (!pad) return std::nullopt;
  if (pad->is_string()) return pad->get<std::string>();
  if (pad->is_object() && pad->contains("content") && (*pad)["content"].is_string())
    return (*pad)["content"].get<std::string>();
  return std::nullopt;
}

// The value of `key`, or null; a reference, never a copy.
const json& field_or_null(const json& j, const char* key) {
  static const json null;
  const json* v = optional_field(j, key);
  return v ? *v : null;
}

std::shared_ptr<const TokenizerImpl> build(TokenizerJson&& file, const std::string& name,
                                           const json& config) {
  const json& root = object_at(file.root, name);
  auto t = std::make_shared<TokenizerImpl>();
  const json* model = optional_field(root, "model");
  if (!model || !model->is_object()) fail_at(name, "expected an object \"model\"");
  const std::string mwhere = name + ": model";
  std::string type = optional_field(*model, "type") ? string_field(*model, "type", mwhere) : "";
  // As the reference guesses: a vocab array is Unigram's (the SAX reader left it in the DOM).
  if (type.empty())
    type = optional_field(*model, "vocab") && (*model)["vocab"].is_array() ? "Unigram"
           : model->contains("merges")                                     ? "BPE"
                                                                           : "WordPiece";
  if (type != "BPE" && type != "WordPiece" && type != "Unigram")
    fail_at(mwhere + ".type",
            "model " + echo(type) + " is not supported (expected BPE, WordPiece or Unigram)");

  UnigramVocab unigram;
  if (type == "Unigram") {
    unigram = read_unigram_vocab(*model, mwhere);
    t->ids.reserve(unigram.pieces.size());
    for (std::size_t i = 0; i < unigram.pieces.size(); ++i)
      if (!t->ids.emplace(unigram.pieces[i], static_cast<std::int32_t>(i)).second)
        fail_at(mwhere + ".vocab[" + std::to_string(i) + "]",
                "piece " + echo(unigram.pieces[i]) + " appears twice; each piece may appear once");
  } else {
    if (!file.has_vocab) fail_at(mwhere, "expected an object \"vocab\" of token: id");
    t->ids = std::move(file.vocab);
  }
  std::int32_t largest = -1;
  for (const auto& entry : t->ids) largest = std::max(largest, entry.second);

  t->normalizer = make_normalizer(field_or_null(root, "normalizer"), name + ": normalizer");
  t->pre_tokenizer =
      make_pre_tokenizer(field_or_null(root, "pre_tokenizer"), name + ": pre_tokenizer");

  // Added tokens go over the vocabulary before the model is built: the model sees them too.
  const std::vector<AddedToken> added = read_added_tokens(root, name + ": added_tokens");
  std::vector<AddedTokenSplitter::Entry> raw, normalized;
  for (const AddedToken& a : added) {
    t->ids[a.content] = a.id;
    t->added[a.content] = a.id;
    largest = std::max(largest, a.id);
    if (a.normalized && t->normalizer) {
      const std::string n = t->normalizer->normalize(a.content);
      t->added[n] = a.id;
      normalized.push_back({n, a.lstrip, a.rstrip});
    } else {
      raw.push_back({a.content, a.lstrip, a.rstrip});
    }
  }
  t->raw_splitter = AddedTokenSplitter(std::move(raw));
  t->normalized_splitter = AddedTokenSplitter(std::move(normalized));

  // Ids index a table: a few gaps are fine, an id far beyond the number of tokens is not.
  const std::size_t tokens = t->ids.size();
  if (static_cast<std::size_t>(largest) >= 2 * tokens + 65536)
    fail_at(name, "ids go up to " + std::to_string(largest) + " for " + std::to_string(tokens) +
                      " tokens (expected ids from 0 to about the number of tokens)");
  t->id_to_token.resize(static_cast<std::size_t>(largest) + 1);
  t->has_token.resize(t->id_to_token.size());
  for (const auto& [token, id] : t->ids) {
    t->id_to_token[id] = token;
    t->has_token[id] = true;
  }
  for (const AddedToken& a : added) t->id_to_token[a.id] = a.content;

  if (type == "BPE") {
    if (!file.has_merges)
      fail_at(mwhere, "expected an array \"merges\" of \"a b\" strings or [a, b] pairs");
    t->model = make_bpe(*model, t->ids, file.merges, mwhere);
    t->kind = t->pre_tokenizer && t->pre_tokenizer->byte_level() ? "byte-level BPE"
              : t->model->byte_fallback()                        ? "BPE with byte fallback"
                                                                 : "BPE";
  } else if (type == "WordPiece") {
    t->model = make_wordpiece(*model, t->ids, mwhere);
    t->kind = "WordPiece";
  } else {
    t->model = make_unigram(*model, std::move(unigram), mwhere);
    t->kind = t->model->byte_fallback() ? "Unigram with byte fallback" : "Unigram";
  }
  t->post =
      make_post_processor(field_or_null(root, "post_processor"), t->ids, name + ": post_processor");

  t->decoder = Decoder(field_or_null(root, "decoder"), name + ": decoder");

  if (const json* padding = optional_field(root, "padding")) {
    if (padding->is_object() && padding->contains("pad_id"))
      t->pad_id = id_value((*padding)["pad_id"], name + ": padding.pad_id");
  }
  if (!t->pad_id) {
    if (const auto pad = config_pad_token(config)) {
      const auto it = t->ids.find(*pad);
      if (it != t->ids.end()) t->pad_id = it->second;
    }
  }
  return t;
}

}  // namespace

std::vector<std::string> TokenizerImpl::tokens_of(std::string_view text) const {
  std::vector<std::string> tokens;
  const auto sections = raw_splitter.split(text);
  for (std::size_t index = 0; index < sections.size(); ++index) {
    const auto& section = sections[index];
    if (section.text.empty()) continue;
    if (section.token || added.count(section.text)) {
      tokens.push_back(section.text);
      continue;
    }
    std::string normal = normalizer ? normalizer->normalize(section.text) : section.text;
    if (normal.empty()) continue;
    for (auto& sub : normalized_splitter.split(normal)) {
      if (sub.text.empty()) continue;
      if (sub.token || added.count(sub.text)) {
        tokens.push_back(std::move(sub.text));
        continue;
      }
      std::vector<std::string> words{std::move(sub.text)};
      if (pre_tokenizer) words = pre_tokenizer->split(std::move(words), index);
      model->tokenize(words, tokens);
    }
  }
  return tokens;
}

std::int32_t TokenizerImpl::id_of(const std::string& token) const {
  if (const auto a = added.find(token); a != added.end()) return a->second;
  if (const auto v = ids.find(token); v != ids.end()) return v->second;
  if (const auto unk = model->unk_id()) return *unk;
  fail_runtime("token " + echo(token) + " has no id and the tokenizer has no unknown token");
}

}  // namespace mha::text

namespace mha {

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json) {
  const std::string text = read_json_text(tokenizer_json, json_kind::tokenizer_json);
  const std::filesystem::path config_path =
      std::filesystem::path(tokenizer_json).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  std::string config;
  if (std::filesystem::is_regular_file(config_path, ec))
    config = read_json_text(config_path.string(), json_kind::tokenizer_config);
  const text::json cfg = config.empty() ? text::json() : text::parse(config, config_path.string());
  return Tokenizer(
      text::build(text::read_tokenizer_json(text, tokenizer_json), tokenizer_json, cfg));
}

Tokenizer Tokenizer::from_json_text(std::string_view tokenizer_json, const std::string& name,
                                    std::string_view tokenizer_config_json) {
  const text::json cfg = tokenizer_config_json.empty()
                             ? text::json()
                             : text::parse(tokenizer_config_json, name + " (tokenizer_config)");
  return Tokenizer(text::build(text::read_tokenizer_json(tokenizer_json, name), name, cfg));
}

Encoding Tokenizer::encode(std::string_view utf8_text, bool add_special_tokens) const {
  const std::string text = text::valid_utf8(utf8_text);
  Encoding e;
  e.tokens = impl_->tokens_of(text);
  if (add_special_tokens) e.tokens = impl_->post.apply(std::move(e.tokens));
  e.ids.reserve(e.tokens.size());
  for (const auto& t : e.tokens) e.ids.push_back(impl_->id_of(t));
  return e;
}

std::size_t Tokenizer::vocab_size() const {
  return impl_->id_to_token.size();
}

bool Tokenizer::has_token(std::int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->id_to_token.size() &&
         impl_->has_token[id];
}

const std::string& Tokenizer::token(std::int32_t id) const {
  if (!has_token(id))
    fail_input("token id " + std::to_string(id) + " is not in the vocabulary (of " +
               std::to_string(impl_->id_to_token.size()) + " ids)");
  return impl_->id_to_token[id];
}

std::string Tokenizer::decode_token(std::int32_t id) const {
  const std::string& piece = token(id);
  return impl_->decoder.decode(piece, impl_->added.count(piece) > 0);
}

std::string Tokenizer::display_token(std::int32_t id) const {
  // Decoded as a token after others, so that a SentencePiece word start keeps its space
  // (▁the → ␣the) as a byte-level one does (Ġthe → ␣the).
  const std::string& piece = token(id);
  const std::string bytes = impl_->decoder.decode(piece, impl_->added.count(piece) > 0, false);
  return bytes.empty() ? token(id) : visible_text(bytes);
}

std::optional<std::int32_t> Tokenizer::pad_id() const {
  return impl_->pad_id;
}

std::string Tokenizer::kind() const {
  return impl_->kind;
}

}  // namespace mha
