// GGUF tokenizer metadata → the tokenizer.json Hugging Face has for the same vocabulary.
//
// The keys are llama.cpp's (gguf-py constants.Keys.Tokenizer); what is made of them follows
// what llama.cpp's llama-vocab.cpp does with them, spelled in tokenizer.json's pieces:
//
//   "gpt2"   BPE over byte-level text: model.vocab = tokens, model.merges = merges split at
//            the first space after the first byte (llama-vocab.cpp: word.find(' ', 1)), the
//            regexes of llm_tokenizer_bpe for tokenizer.ggml.pre as Split pre-tokenizers
//            before a ByteLevel one.
//   "llama"  SentencePiece BPE: llama.cpp merges the adjacent pair whose concatenation has the
//            highest score; as BPE merges ranked by that score (transformers'
//            convert_slow_tokenizer.py generate_merges, which made the LLaMA tokenizer.json
//            files) it is the same, with byte fallback through the <0xXX> tokens and
//            Prepend("▁") + Replace(" ", "▁") for add_space_prefix.
#include "mha/text/gguf_tokenizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/io/gguf.hpp"
#include "unicode.hpp"

namespace mha {
namespace {

using json = nlohmann::json;

const std::string kPrefix = "tokenizer.ggml.";
const std::string kModel = kPrefix + "model", kPre = kPrefix + "pre", kTokens = kPrefix + "tokens",
                  kTypes = kPrefix + "token_type", kScores = kPrefix + "scores",
                  kMerges = kPrefix + "merges";

// llama_token_type (gguf-py TokenType); 0 and values past 6 are read as normal, as llama.cpp
// reads them (no attribute that matters here).
enum TokenType : std::int64_t { unknown = 2, control = 3, user_defined = 4 };

[[noreturn]] void refuse(const GgufFile& f, const std::string& key, const std::string& what) {
  fail_input(f.path() + ": " + key + ": " + what);
}

struct Vocab {
  std::vector<std::string> tokens;                    // by id
  std::vector<std::int64_t> types;                    // by id (1, normal, without the key)
  std::unordered_map<std::string, std::int32_t> ids;  // the last id of a token, as llama.cpp's
                                                      // token_to_id keeps it

  bool stands(std::size_t id) const { return ids.at(tokens[id]) == static_cast<std::int32_t>(id); }
};

Vocab read_vocab(const GgufFile& f) {
  Vocab v;
  v.tokens = f.get_array_strings(kTokens);  // the reader bounds the count by the file's bytes
  const std::size_t n = v.tokens.size();
  if (n == 0) refuse(f, kTokens, "expected at least one token");
  if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    refuse(f, kTokens, std::to_string(n) + " tokens; expected at most 2^31 - 1");
  for (std::size_t i = 0; i < n; ++i)
    if (text::valid_utf8(v.tokens[i]) != v.tokens[i])
      refuse(f, kTokens + "[" + std::to_string(i) + "]", "expected UTF-8 text");
  if (f.find(kTypes)) {
    v.types = f.get_array_i64(kTypes);
    if (v.types.size() != n)
      refuse(f, kTypes,
             std::to_string(v.types.size()) + " types for " + std::to_string(n) +
                 " tokens; expected one per token of " + kTokens);
  } else {
    v.types.assign(n, 1);
  }
  v.ids.reserve(n);
  for (std::size_t i = 0; i < n; ++i) v.ids[v.tokens[i]] = static_cast<std::int32_t>(i);
  return v;
}

// A token id key, checked against the token count; `fallback` (llama.cpp's default) when
// absent.
std::optional<std::int32_t> token_id(const GgufFile& f, const Vocab& v, const std::string& key,
                                     std::optional<std::int32_t> fallback) {
  if (!f.find(key)) return fallback;
  const std::uint64_t id = f.get_u64(key);
  if (id >= v.tokens.size())
    refuse(f, key,
           "token id " + std::to_string(id) + " is out of range (the file has " +
               std::to_string(v.tokens.size()) + " tokens)");
  return static_cast<std::int32_t>(id);
}

bool flag(const GgufFile& f, const std::string& key, bool fallback) {
  return f.find(key) ? f.get_bool(key) : fallback;
}

json vocab_json(const Vocab& v) {
  json vocab = json::object();
  for (std::size_t i = 0; i < v.tokens.size(); ++i)
    if (v.stands(i)) vocab[v.tokens[i]] = i;
  return vocab;
}

// CONTROL and UNKNOWN tokens are special, USER_DEFINED ones not; all are matched in the raw
// text, as llama.cpp's tokenizer_st_partition matches them.
json added_tokens_json(const Vocab& v) {
  json added = json::array();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    const std::int64_t type = v.types[i];
    if ((type != control && type != unknown && type != user_defined) || v.tokens[i].empty() ||
        !v.stands(i))
      continue;
    added.push_back({{"id", i},
                     {"content", v.tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type != user_defined}});
  }
  return added;
}

// add_bos_token / add_eos_token as the template `[bos] $A [eos]`.
json post_processor_json(const GgufFile& f, const Vocab& v, bool add_bos, bool add_eos,
                         std::int32_t bos_fallback, std::int32_t eos_fallback) {
  const auto bos = token_id(f, v, kPrefix + "bos_token_id", std::nullopt);
  const auto eos = token_id(f, v, kPrefix + "eos_token_id", std::nullopt);
  if (!add_bos && !add_eos) return nullptr;
  json single = json::array(), special = json::object();
  auto add = [&](std::optional<std::int32_t> id, std::int32_t fallback, const std::string& key) {
    const std::int32_t t = id ? *id : fallback;
    if (t < 0 || static_cast<std::size_t>(t) >= v.tokens.size())
      refuse(f, key,
             "absent, and llama.cpp's default " + std::to_string(t) +
                 " is out of range (the file has " + std::to_string(v.tokens.size()) + " tokens)");
    const std::string& token = v.tokens[t];
    single.push_back({{"SpecialToken", {{"id", token}, {"type_id", 0}}}});
    special[token] = {{"id", token}, {"ids", json::array({t})}, {"tokens", json::array({token})}};
  };
  if (add_bos) add(bos, bos_fallback, kPrefix + "bos_token_id");
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) add(eos, eos_fallback, kPrefix + "eos_token_id");
  return {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special}};
}

json split(const char* regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

// llm_tokenizer_bpe's regexes (llama-vocab.cpp), in the form the tokenizer.json files they come
// from spell them: (?i:...) folds ASCII letters only, as llama.cpp's expanded form does.
const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct BpePre {
  json normalizer, pre_tokenizer;
  bool ignore_merges = false, add_bos = false;  // llama.cpp's defaults for the name
};

BpePre bpe_pre(const GgufFile& f) {
  // No key: llama.cpp warns and takes "default".
  const std::string pre = f.find(kPre) ? f.get_string(kPre) : "default";
  BpePre p;
  if (pre == "gpt-2") {
    p.pre_tokenizer = byte_level(true);  // GPT-2's own regex
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    p.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers", {split(kLlama3Regex), byte_level(false)}}};
    p.ignore_merges = p.add_bos = true;
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    p.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers", {split(kQwen2Regex), byte_level(false)}}};
    // Qwen's tokenizer.json (and Qwen2Tokenizer) compose to NFC first; llama.cpp does not.
    // mha follows the tokenizer the model was trained with.
    p.normalizer = {{"type", "NFC"}};
  } else if (pre == "default") {
    p.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers",
                        {split(R"([\p{P}\$\+<=>\^~\|]+)"), split(kGpt2Regex), split(R"(\p{N}+)"),
                         split("[0-9][0-9][0-9]"), byte_level(false)}}};
  } else {
    refuse(f, kPre,
           echo(pre) +
               " is not a pre-tokenizer mha knows (expected gpt-2, llama-bpe, llama3, llama-v3, "
               "qwen2, deepseek-r1-qwen or default)");
  }
  return p;
}

json gpt2_json(const GgufFile& f, const Vocab& v) {
  const BpePre pre = bpe_pre(f);
  const std::vector<std::string> lines = f.get_array_strings(kMerges);
  json merges = json::array();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const std::string at = kMerges + "[" + std::to_string(i) + "]";
    const std::size_t space = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
    if (space == std::string::npos) refuse(f, at, "expected \"left right\", got " + echo(line));
    std::string left = line.substr(0, space), right = line.substr(space + 1);
    for (const std::string& token : {left, right, left + right})
      if (!v.ids.count(token)) refuse(f, at, "token " + echo(token) + " is not in " + kTokens);
    merges.push_back({std::move(left), std::move(right)});
  }
  json model = {{"type", "BPE"},          {"dropout", nullptr},
                {"unk_token", nullptr},   {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", pre.ignore_merges},
                {"vocab", vocab_json(v)}, {"merges", std::move(merges)}};
  json root = {
      {"version", "1.0"},
      {"added_tokens", added_tokens_json(v)},
      {"normalizer", pre.normalizer},
      {"pre_tokenizer", pre.pre_tokenizer},
      {"post_processor", post_processor_json(f, v, flag(f, kPrefix + "add_bos_token", pre.add_bos),
                                             flag(f, kPrefix + "add_eos_token", false), 11,
                                             11)},  // llama.cpp's BPE defaults
      {"decoder", byte_level(true)},
      {"model", std::move(model)}};
  return root;
}

std::size_t code_points(const std::string& s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// transformers' generate_merges(vocab, vocab_scores): for each piece, each split into two
// pieces of the vocabulary (ordered by their ids) is a merge with the piece's score; then all,
// stably, by (score, left length, right length) from the highest, lengths in code points.
json spm_merges(const GgufFile& f, const Vocab& v) {
  const std::vector<double> scores = f.get_array_f64(kScores);
  if (scores.size() != v.tokens.size())
    refuse(f, kScores,
           std::to_string(scores.size()) + " scores for " + std::to_string(v.tokens.size()) +
               " tokens; expected one per token of " + kTokens);
  struct Merge {
    std::int32_t left, right;
    double score;
    std::size_t left_length, right_length;
  };
  std::vector<Merge> merges, local;
  for (std::size_t id = 0; id < v.tokens.size(); ++id) {
    if (!std::isfinite(scores[id]))
      refuse(f, kScores + "[" + std::to_string(id) + "]", "expected a finite number");
    if (!v.stands(id)) continue;  // a repeated piece: its last id stands, as in a dict
    const std::string& piece = v.tokens[id];
    local.clear();
    for (std::size_t k = 1; k < piece.size(); ++k) {
      if ((piece[k] & 0xC0) == 0x80) continue;  // inside a code point
      const std::string left = piece.substr(0, k), right = piece.substr(k);
      const auto l = v.ids.find(left), r = v.ids.find(right);
      if (l == v.ids.end() || r == v.ids.end()) continue;
      local.push_back({l->second, r->second, scores[id], code_points(left), code_points(right)});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_length != b.left_length) return a.left_length > b.left_length;
    return a.right_length > b.right_length;
  });
  json out = json::array();
  for (const Merge& m : merges) out.push_back({v.tokens[m.left], v.tokens[m.right]});
  return out;
}

// LLaMA-2's tokenizer.json, as transformers' LlamaConverter writes it (legacy: "▁" prepended
// to each section between added tokens, as llama.cpp prepends a space after each special one).
json spm_json(const GgufFile& f, const Vocab& v) {
  const std::string space = "\xE2\x96\x81";  // ▁
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}};
  const json normalizer =
      flag(f, kPrefix + "add_space_prefix", true)
          ? json{{"type", "Sequence"},
                 {"normalizers", {{{"type", "Prepend"}, {"prepend", space}}, replace}}}
          : replace;
  const auto unk = token_id(f, v, kPrefix + "unknown_token_id", 0);  // llama.cpp's SPM default
  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", unk && v.stands(*unk) ? json(v.tokens[*unk]) : json(nullptr)},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"ignore_merges", false},
                {"vocab", vocab_json(v)},
                {"merges", spm_merges(f, v)}};
  json decoder = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  return {{"version", "1.0"},
          {"added_tokens", added_tokens_json(v)},
          {"normalizer", normalizer},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           post_processor_json(f, v, flag(f, kPrefix + "add_bos_token", true),
                               flag(f, kPrefix + "add_eos_token", false), 1, 2)},  // SPM defaults
          {"decoder", std::move(decoder)},
          {"model", std::move(model)}};
}

}  // namespace

bool gguf_has_tokenizer(const GgufFile& f) {
  return f.find(kModel) && f.get_string(kModel) != "none";
}

std::string gguf_tokenizer_json(const GgufFile& f) {
  const std::string model = f.get_string(kModel);
  if (model != "gpt2" && model != "llama")
    refuse(
        f, kModel,
        echo(model) + " is not supported (expected gpt2, byte-level BPE, or llama, SentencePiece)");
  const Vocab v = read_vocab(f);
  const json pad = [&]() -> json {
    const auto id = token_id(f, v, kPrefix + "padding_token_id", std::nullopt);
    return id ? json{{"pad_id", *id}} : json(nullptr);
  }();
  json root = model == "gpt2" ? gpt2_json(f, v) : spm_json(f, v);
  root["padding"] = pad;
  root["truncation"] = nullptr;
  return root.dump();  // every token checked as UTF-8 above: dump cannot throw
}

std::optional<Tokenizer> gguf_tokenizer(const GgufFile& f) {
  if (!gguf_has_tokenizer(f)) return std::nullopt;
  return Tokenizer::from_json_text(gguf_tokenizer_json(f), f.path());
}

std::optional<Tokenizer> gguf_tokenizer(const std::string& gguf_path) {
  const GgufFile f(gguf_path);
  return gguf_tokenizer(f);
}

}  // namespace mha
