// Post-processors: the special tokens around one encoded text (TemplateProcessing's single
// template, BertProcessing's and RobertaProcessing's [CLS] … [SEP]; ByteLevel changes no id).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model.hpp"

namespace mha::text {

// The tokens of a text with the special tokens placed: each item a special token, or nullopt
// for the text's own tokens.
struct SingleTemplate {
  std::vector<std::optional<std::string>> items{std::nullopt};
  std::vector<std::string> apply(std::vector<std::string> tokens) const;
};

// The identity template for a null post-processor. Special tokens must be in `ids`.
SingleTemplate make_post_processor(const nlohmann::json& config, const TokenIds& ids,
                                   const std::string& where, int depth = 0);

}  // namespace mha::text
