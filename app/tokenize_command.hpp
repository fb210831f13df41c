// `mha tokenize TOKENIZER`: texts → token ids and tokens with a tokenizer.json
// (lib/include/mha/text/tokenizer.hpp), one JSON line per text.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mha::cli {

struct TokenizeArgs {
  std::string tokenizer;           // a tokenizer.json, or a directory holding one
  std::vector<std::string> texts;  // --text, in order
  std::string texts_file;          // --texts: a JSON array of strings
  bool no_special_tokens = false;
  bool vocab = false;  // --vocab: every id's token and piece
};

void add_tokenize_command(CLI::App& app, TokenizeArgs& args);

// Exit codes: 0 every text tokenized, 2 a missing or malformed tokenizer or texts file (one
// stderr line naming the file and what was expected), 1 anything else.
int do_tokenize(const TokenizeArgs& args);

}  // namespace mha::cli
