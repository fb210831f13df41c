// Reading tokenizer.json: model.vocab (up to ~150,000 entries) and model.merges (up to
// ~300,000) go straight into the tokenizer's tables through nlohmann's SAX interface, without
// the DOM's ordered maps; everything else becomes a DOM as usual (model.vocab and model.merges
// are null there).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "json_fields.hpp"
#include "model.hpp"

namespace mha::text {

struct TokenizerJson {
  json root;
  bool has_vocab = false, has_merges = false;
  TokenIds vocab;
  Merges merges;
};

// Throws mha::Error naming `name` for text that is not JSON or a vocab or merges entry that is
// not what tokenizer.json holds there.
TokenizerJson read_tokenizer_json(std::string_view text, const std::string& name);

}  // namespace mha::text
