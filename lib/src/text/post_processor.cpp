#include "post_processor.hpp"

#include "json_fields.hpp"

namespace mha::text {
namespace {

std::string known_token(const std::string& token, const TokenIds& ids, const std::string& where) {
  if (!ids.count(token)) fail_at(where, "special token \"" + token + "\" is not in the vocabulary");
  return token;
}

// BertProcessing and RobertaProcessing spell their tokens as [token, id].
std::string pair_token(const json& config, const char* key, const TokenIds& ids,
                       const std::string& where) {
  const json* v = optional_field(config, key);
  if (!v || !v->is_array() || v->size() != 2 || !(*v)[0].is_string())
    fail_at(where, std::string("expected \"") + key + "\" as [token, id]");
  return known_token((*v)[0].get<std::string>(), ids, where + "." + key);
}

// `inner` placed where `outer` has the sequence.
SingleTemplate compose(const SingleTemplate& outer, const SingleTemplate& inner) {
  SingleTemplate out;
  out.items.clear();
  for (const auto& item : outer.items) {
    if (item)
      out.items.push_back(item);
    else
      out.items.insert(out.items.end(), inner.items.begin(), inner.items.end());
  }
  return out;
}

}  // namespace

std::vector<std::string> SingleTemplate::apply(std::vector<std::string> tokens) const {
  if (items.size() == 1 && !items[0]) return tokens;
  std::vector<std::string> out;
  out.reserve(tokens.size() + items.size());
  for (const auto& item : items) {
    if (item)
      out.push_back(*item);
    else
      for (auto& t : tokens) out.push_back(std::move(t));  // the template has one sequence
  }
  return out;
}

SingleTemplate make_post_processor(const json& config, const TokenIds& ids,
                                   const std::string& where, int depth) {
  SingleTemplate t;
  if (config.is_null()) return t;
  object_at(config, where);
  if (depth > kMaxNesting)
    fail_at(where, "nested deeper than " + std::to_string(kMaxNesting) + " sequences");
  const std::string type = string_field(config, "type", where);
  if (type == "ByteLevel") return t;
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    t.items = {pair_token(config, "cls", ids, where), std::nullopt,
               pair_token(config, "sep", ids, where)};
    return t;
  }
  if (type == "Sequence") {
    const json* list = optional_field(config, "processors");
    if (!list || !list->is_array()) fail_at(where, "expected an array \"processors\"");
    for (std::size_t i = 0; i < list->size(); ++i)
      t = compose(make_post_processor((*list)[i], ids,
                                      where + ".processors[" + std::to_string(i) + "]", depth + 1),
                  t);
    return t;
  }
  if (type == "TemplateProcessing") {
    const json* single = optional_field(config, "single");
    if (!single || !single->is_array())
      fail_at(where, "expected an array \"single\" of SpecialToken and Sequence items");
    t.items.clear();
    bool sequence = false;
    for (std::size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      const std::string at = where + ".single[" + std::to_string(i) + "]";
      if (item.is_object() && item.contains("SpecialToken") && item["SpecialToken"].is_object()) {
        t.items.push_back(
            known_token(string_field(item["SpecialToken"], "id", at + ".SpecialToken"), ids, at));
      } else if (item.is_object() && item.contains("Sequence") && item["Sequence"].is_object()) {
        const std::string id = string_field(item["Sequence"], "id", at + ".Sequence");
        if (id != "A" || sequence)
          fail_at(at, "expected the single template to hold sequence A once");
        sequence = true;
        t.items.push_back(std::nullopt);
      } else {
        fail_at(at, "expected {\"SpecialToken\": {...}} or {\"Sequence\": {...}}");
      }
    }
    if (!sequence) fail_at(where + ".single", "expected the single template to hold sequence A");
    return t;
  }
  fail_at(where + ".type", "post-processor \"" + type +
                               "\" is not supported (expected TemplateProcessing, "
                               "BertProcessing, RobertaProcessing, ByteLevel or Sequence)");
}

}  // namespace mha::text
