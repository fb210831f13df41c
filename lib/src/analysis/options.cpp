// The analyses' shared options (mha/analysis/options.hpp): corpora, metrics,
// the interventions' target and foil.
#include "mha/analysis/options.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/base/utf8.hpp"
#include "mha/io/json_file.hpp"
#include "mha/io/json_text.hpp"

#include <nlohmann/json.hpp>

namespace mha {

namespace {

// A text that must be one token (--target, --foil), as the tokenizer gives
// it without special tokens.
std::int32_t one_token(const Model& model, const std::string& text, const char* flag) {
  const std::optional<Tokenizer>& tok = model.tokenizer();
  if (!tok)
    fail_input(std::string("--") + flag + ": " + model.checkpoint().dir() + " has no " +
               (model.checkpoint().gguf() ? "tokenizer metadata" : "tokenizer.json") +
               " to tokenize " + echo(text));
  const Encoding e = tok->encode(text, false);
  if (e.ids.size() != 1)
    fail_input(std::string("--") + flag + " " + echo(text) + ": is " +
               std::to_string(e.ids.size()) +
               " tokens; expected exactly one (mind a leading space: \" Paris\")");
  return e.ids[0];
}

// An image classifier's class named by its label (--target, --foil), or by
// its id where no label is that text (ImageNet's labels repeat: "crane").
std::int32_t one_label(const Checkpoint& model, const std::string& text, const char* flag) {
  check_intervention_head(model);  // a ViTModel has no classes to name
  const std::vector<std::string>& labels = model.config().labels;
  std::vector<std::size_t> hits;
  for (std::size_t i = 0; i < labels.size(); ++i)
    if (labels[i] == text) hits.push_back(i);
  if (hits.size() > 1)
    fail_input(std::string("--") + flag + " " + echo(text) + ": is the label of classes " +
               std::to_string(hits[0]) + " and " + std::to_string(hits[1]) +
               (hits.size() > 2 ? " (and more)" : "") + "; give the class's id instead");
  if (hits.size() == 1) return static_cast<std::int32_t>(hits[0]);
  std::size_t id = 0, used = 0;
  try {
    id = std::stoul(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (!text.empty() && used == text.size() && std::isdigit(static_cast<unsigned char>(text[0])) &&
      id < labels.size())
    return static_cast<std::int32_t>(id);
  std::string known;  // as many as fit the line; the message is cut at kMessageChars
  std::size_t shown = 0;
  for (; shown < labels.size() && known.size() < 120; ++shown)
    known += (shown ? ", " : "") + echo(labels[shown], 24);
  if (shown < labels.size()) known += ", ... (" + std::to_string(labels.size()) + " labels)";
  fail_input(std::string("--") + flag + " " + echo(text) +
             ": is not a label of the classifier; expected one of " + known + ", or a class id");
}

}  // namespace

Metric metric_of(const std::string& name, const std::optional<std::string>& target,
                 const std::optional<std::string>& foil) {
  Metric metric = target || foil ? Metric::logit_diff : Metric::loss;
  if (!name.empty()) {
    if (name == "loss")
      metric = Metric::loss;
    else if (name == "logit_diff")
      metric = Metric::logit_diff;
    else if (name == "kl")
      metric = Metric::kl;
    else
      fail_input("--metric " + echo(name) + ": expected loss, logit_diff or kl");
  }
  if (metric == Metric::logit_diff && (!target || !foil))
    fail_input(
        "--metric logit_diff: expected --target TEXT and --foil TEXT (one token each; an image "
        "classifier's labels)");
  return metric;
}

InterventionOptions intervention_options(const Model& model, const ModelCall& call,
                                         const std::string& metric,
                                         const std::optional<std::string>& target,
                                         const std::optional<std::string>& foil) {
  InterventionOptions io;
  io.metric = metric_of(metric, target, foil);
  io.layers = call.map_layers;
  io.heads = call.map_heads;
  io.threads = resolve_threads(call.threads);
  // An image model's --target and --foil name its classifier's classes.
  const bool image = model.config().image_input();
  if (target)
    io.target = image ? one_label(model.checkpoint(), *target, "target")
                      : one_token(model, *target, "target");
  if (foil)
    io.foil =
        image ? one_label(model.checkpoint(), *foil, "foil") : one_token(model, *foil, "foil");
  return io;
}

std::vector<std::string> read_corpus(const std::string& path, std::vector<std::size_t>* lines) {
  const std::string text = read_json_text(path, json_kind::text_list);
  const auto ends_with = [&](const char* ext) {
    const std::size_t n = std::strlen(ext);
    return path.size() > n && path.compare(path.size() - n, n, ext) == 0;
  };
  const bool jsonl = ends_with(".jsonl");
  std::vector<std::string> out;
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  // A JSON array by its content, or a .json file's whole: one text an element.
  if (!jsonl && ((first != std::string::npos && text[first] == '[') || ends_with(".json"))) {
    const nlohmann::json j = parse_json(text, path, json_kind::text_list);
    if (!j.is_array())
      fail_input(path + ": expected a JSON array of strings, got " + j.type_name());
    for (std::size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_string())
        fail_input(path + ": element " + std::to_string(i) + " is " + j[i].type_name() +
                   ", expected a string");
      out.push_back(j[i].get<std::string>());
    }
    if (out.empty()) fail_input(path + ": holds no text; expected at least one");
    return out;
  }
  std::size_t at = 0, line = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string row = text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (!row.empty() && row.back() == '\r') row.pop_back();
    if (row.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string at_line = path + ": line " + std::to_string(line);
    if (lines) lines->push_back(line);
    if (!jsonl) {
      check_utf8(row, at_line + ":");
      out.push_back(row);
      continue;
    }
    nlohmann::json j;
    try {
      j = parse_json(row, at_line, json_kind::text_list);
    } catch (const Error& e) {
      check_utf8(row, at_line + ":");
      fail_input(at_line +
                 ": not JSON; expected {\"text\": \"...\"} on each line of a .jsonl file");
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail_input(at_line + ": expected an object with a \"text\" string, got " +
                 one_line(j.dump(), kEchoChars));
    out.push_back(j["text"].get<std::string>());
  }
  if (out.empty()) fail_input(path + ": holds no text; expected one text a line (or JSON Lines)");
  return out;
}

}  // namespace mha
