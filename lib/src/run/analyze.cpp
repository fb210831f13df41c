#include "mha/run/analyze.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/base/utf8.hpp"
#include "mha/checkpoint/attention_analysis.hpp"
#include "mha/checkpoint/forward.hpp"
#include "mha/checkpoint/lens.hpp"
#include "mha/inspect/attention_stats.hpp"
#include "mha/io/dir_lock.hpp"
#include "mha/io/json_file.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/out_dir.hpp"
#include "mha/io/output_set.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/model/memory.hpp"
#include "mha/run/model_job.hpp"
#include "mha/run/run_json.hpp"

namespace mha {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

bool wants(const AnalyzeConfig& c, const char* method) {
  return std::find(c.methods.begin(), c.methods.end(), method) != c.methods.end();
}

// The summary's "a 0.412, b 0.120, c 0.051": the `n` largest of `values` (NaN
// skipped), each after its label.
std::string top_entries(const std::vector<double>& values,
                        const std::function<std::string(std::size_t)>& label, std::size_t n = 3) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isnan(values[i])) order.push_back(i);
  n = std::min(n, order.size());
  if (std::all_of(order.begin(), order.end(), [&](std::size_t i) { return values[i] == 0; }))
    return "all 0";
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](std::size_t a, std::size_t b) { return values[a] > values[b]; });
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    char v[32];
    std::snprintf(v, sizeof v, " %.3g", values[order[i]]);
    out += (i ? ", " : "") + label(order[i]) + v;
  }
  return out;
}

std::string head_name(std::size_t layer, std::size_t head) {
  return "L" + std::to_string(layer) + "H" + std::to_string(head);
}

// Rows a summary lists, one line each; the arrays hold them all.
constexpr std::size_t kSummaryRows = 4;

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

// Bytes of an array of `shape` in `itemsize`-byte elements.
std::uint64_t bytes_of(std::initializer_list<std::size_t> shape, std::uint64_t itemsize = 4) {
  std::uint64_t n = itemsize;
  for (std::size_t v : shape) n *= v;
  return n;
}

NpyArray int_array(DType dtype, std::vector<std::size_t> shape, const void* data,
                   std::size_t count) {
  NpyArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data.resize(count * itemsize(dtype));
  std::memcpy(a.data.data(), data, a.data.size());
  return a;
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

const std::vector<std::string>& analysis_methods() {
  static const std::vector<std::string> m = {"loss",     "logit_lens", "rollout",
                                             "norms",    "detectors",  "ablation",
                                             "patching", "corpus",     "flow"};
  return m;
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

AnalyzeReport run_analyze(const AnalyzeConfig& config) {
  const auto start = Clock::now();
  // Plan: every check before any weight is read.
  if (config.methods.empty())
    fail_input(
        "--method: expected one or more of loss, logit_lens, rollout, flow, norms, detectors, "
        "ablation, patching, corpus");
  std::set<std::string> seen;
  for (const std::string& m : config.methods) {
    const auto& all = analysis_methods();
    if (std::find(all.begin(), all.end(), m) == all.end())
      fail_input(
          "--method " + echo(m) +
          ": expected loss, logit_lens, rollout, flow, norms, detectors, ablation, patching or "
          "corpus");
    if (!seen.insert(m).second) fail_input("--method " + m + ": given twice");
  }
  const bool patching = wants(config, "patching");
  const bool corpus = wants(config, "corpus");
  const bool others = config.methods.size() > (patching ? 1u : 0u) + (corpus ? 1u : 0u);
  if (corpus && !config.texts_file)
    fail_input("--method corpus: expected --texts FILE (one text a line, or JSON Lines)");
  if (!corpus && config.texts_file) fail_input("--texts: used by --method corpus only");
  if (config.batch < 1 || config.batch > 1024)
    fail_input("--batch: expected 1 to 1024 texts per pass, got " + std::to_string(config.batch));
  for (const std::string& t : config.texts) check_utf8(t, "--text");
  for (const std::string& t : config.target_texts) check_utf8(t, "--target_text");
  for (const auto& [flag, text] : {std::pair{"--clean", &config.clean},
                                   {"--corrupt", &config.corrupt},
                                   {"--target", &config.target},
                                   {"--foil", &config.foil}})
    if (*text) check_utf8(**text, flag);
  std::vector<std::size_t> corpus_lines;
  const std::vector<std::string> corpus_texts =
      corpus ? read_corpus(*config.texts_file, &corpus_lines) : std::vector<std::string>{};
  if (patching && (!config.clean || !config.corrupt))
    fail_input("--method patching: expected --clean TEXT and --corrupt TEXT");
  if (!patching && (config.clean || config.corrupt))
    fail_input("--clean/--corrupt: used by --method patching only");
  if (config.tokens && !config.texts.empty())
    fail_input("--tokens and --text: give one of them, not both");
  const bool images = !config.images.empty();
  if (images && (config.tokens || !config.texts.empty()))
    fail_input("--image and --text/--tokens: give images or text, not both");
  if (images)
    for (const std::string& m : config.methods)
      if (m != "rollout" && m != "flow" && m != "norms" && m != "ablation")
        fail_input("--method " + m +
                   ": not with --image; an image model's analyses are rollout, flow, norms and "
                   "ablation (the others read token ids or predict the next token)");
  if (others && !config.tokens && config.texts.empty() && !images)
    fail_input(
        "--model: expected the input as --text \"...\" (repeatable), --tokens FILE.npy or "
        "--image FILE");
  if (config.ablation != "zero" && config.ablation != "mean")
    fail_input("--ablation " + echo(config.ablation) + ": expected zero or mean");
  const Metric metric = metric_of(config.metric, config.target, config.foil);
  const std::optional<DirLock> lock = lock_out_dir(config.out_dir, config.model, config.check_only);
  const Model whole(config.model, config.dtype);
  const Checkpoint& model = whole.checkpoint();
  const ModelConfig& c = model.config();
  if (c.encoder_decoder || config.target_tokens || !config.target_texts.empty())
    return run_analyze_seq2seq(config, whole);
  // Ablation on images measures an image classifier's classes, not next tokens.
  const bool lm_methods = wants(config, "loss") || wants(config, "logit_lens") ||
                          (wants(config, "ablation") && !images) || patching;
  if (images && wants(config, "ablation") && c.image_input()) check_intervention_head(model);
  if (lm_methods && !c.has_lm_head())
    fail_input(config.model + ": a " + c.model_type +
               " has no LM head; loss, logit_lens, ablation and patching need a causal LM's "
               "next-token predictions");
  const ModelCall call =
      check_model_call(c, {true, config.layers, config.heads, config.top_k, config.threads});
  const int threads = resolve_threads(call.threads);
  ModelInput in;
  if (others && images) {
    if (!c.image_input()) whole.encode_images({}, {});  // refused by name before reading any
    in = read_image_input(whole, config.images,
                          config.max_memory ? *config.max_memory : default_max_memory());
  } else if (others) {
    in = config.tokens ? read_token_ids(whole, *config.tokens) : whole.encode(config.texts);
    if (wants(config, "flow") && in.T > kMaxFlowTokens)
      fail_input("--method flow: " + std::to_string(in.T) +
                 " tokens; attention flow takes T^2 "
                 "max-flow problems on a graph of layers x T^2 edges, so it is run up to " +
                 std::to_string(kMaxFlowTokens) + " tokens (rollout has no limit)");
  }
  ModelInput clean_in, corrupt_in;
  if (patching) {
    clean_in = whole.encode({*config.clean});
    corrupt_in = whole.encode({*config.corrupt});
    if (clean_in.T != corrupt_in.T)
      fail_input("--clean and --corrupt: " + std::to_string(clean_in.T) + " and " +
                 std::to_string(corrupt_in.T) + " tokens; expected texts of equal token length");
  }
  InterventionOptions io =
      intervention_options(whole, call, config.metric, config.target, config.foil);

  // Memory: the forward, what the methods keep, and every layer's weights
  // when the interventions (many partial passes) can hold them.
  const std::size_t B = in.B, T = std::max(in.T, clean_in.T), L = c.num_layers, h = c.h,
                    d = c.d_model;
  const std::size_t Bmax = std::max<std::size_t>(B, 2);
  std::uint64_t need = forward_memory(c, model.layer_float32_bytes(), Bmax, T, threads);
  need += bytes_of({L + 1, Bmax, T, d}) * 2 + bytes_of({L, Bmax, T, h * c.head_dim}) * 2;
  if (wants(config, "rollout")) need += bytes_of({B, T, T}, 8) * 2 + bytes_of({B, T, T});
  if (wants(config, "norms")) need += bytes_of({B, h, T}, 8) + bytes_of({T, T});
  if (wants(config, "rollout") || wants(config, "norms") || wants(config, "detectors"))
    need += bytes_of({B, h, T, T}) * 2;
  if (images) need += 4 * (in.pixels.size() + B * T * d) + in.images.size();
  const std::uint64_t max_memory = config.max_memory ? *config.max_memory : default_max_memory();
  if (need > max_memory)
    fail_input(config.model + ": the analysis needs about " + format_bytes(need) +
               ", over max_memory " + format_bytes(max_memory));
  // The corpus: every text's length first (the statistics' maps are as wide as the longest).
  const std::size_t N = corpus_texts.size(), per = static_cast<std::size_t>(config.batch);
  std::size_t corpus_T = 1, corpus_tokens = 0;
  std::uint64_t corpus_need = 0;
  if (corpus) {
    for (std::size_t i = 0; i < N; i += per) {
      const std::vector<std::string> part(
          corpus_texts.begin() + static_cast<std::ptrdiff_t>(i),
          corpus_texts.begin() + static_cast<std::ptrdiff_t>(std::min(N, i + per)));
      // Each text named by its file and line, as the reader's messages name them.
      std::vector<std::string> names;
      for (std::size_t k = i; k < i + part.size(); ++k)
        names.push_back(*config.texts_file + (corpus_lines.empty()
                                                  ? ": element " + std::to_string(k)
                                                  : ": line " + std::to_string(corpus_lines[k])));
      const ModelInput b = whole.encode(part, names);
      corpus_T = std::max(corpus_T, b.T);
      for (std::size_t n : b.lengths) corpus_tokens += n;
    }
    corpus_need = forward_memory(c, model.layer_float32_bytes(), per, corpus_T, threads) +
                  bytes_of({per, h, corpus_T, corpus_T}) * 2 + bytes_of({corpus_T, corpus_T});
    if (corpus_need > max_memory)
      fail_input(*config.texts_file + ": a batch of " + std::to_string(per) + " texts of up to " +
                 std::to_string(corpus_T) + " tokens needs about " + format_bytes(corpus_need) +
                 ", over max_memory " + format_bytes(max_memory) + "; lower --batch");
  }
  if (config.check_only) return {};
  const std::uint64_t layers_bytes = model.layer_float32_bytes() * L;
  std::vector<TransformerLayer<float>> resident;
  const bool interventions = wants(config, "ablation") || patching;
  if (interventions && need + layers_bytes <= max_memory) {
    resident = read_layers(model, threads);
    io.layers_read = &resident;
  }

  OutputSet out(config.out_dir);
  json arrays = json::object();
  json summary = json::object();
  AnalyzeReport report;
  auto add = [&](const std::string& name, std::vector<std::size_t> shape, const std::string& what) {
    arrays[name] = {{"shape", shape}, {"meaning", what}};
    report.outputs.push_back(name);
  };

  // One pass for the methods that read the maps and the residual stream.
  const bool maps_needed = wants(config, "rollout") || wants(config, "norms") ||
                           wants(config, "detectors") || wants(config, "flow");
  if (others && (maps_needed || wants(config, "loss") || wants(config, "logit_lens"))) {
    std::vector<float> hidden(wants(config, "logit_lens") ? (L + 1) * B * T * d : 0);
    const std::size_t Ls = call.map_layers.size(), Hs = call.map_heads.size();
    // Rollout and norms go to disk layer by layer, as the maps of `mha run` do.
    const OutputSet::NpyStream* rollout = nullptr;
    const OutputSet::NpyStream* norms = nullptr;
    if (wants(config, "rollout"))
      rollout = &out.stage_npy_stream("rollout.npy", DType::f4, {L, B, T, T});
    if (wants(config, "norms"))
      norms = &out.stage_npy_stream("attention_norms.npy", DType::f4, {Ls, B, Hs, T, T});
    MapAnalysisOptions mo;
    mo.rollout = wants(config, "rollout");
    mo.norms = wants(config, "norms");
    mo.detectors = wants(config, "detectors");
    mo.flow = wants(config, "flow");
    mo.layers = call.map_layers;
    mo.heads = call.map_heads;
    mo.threads = threads;
    // The summary's figures: what reaches each row's last token through every layer, and
    // each chosen head's mean norm over its real query rows.
    std::vector<std::vector<double>> reach(B);
    std::vector<double> norm_sum(Ls * Hs, 0.0);
    std::size_t real_rows = 0;
    for (std::size_t b = 0; b < B; ++b) real_rows += in.lengths[b];
    if (rollout)
      mo.rollout_sink = [&](std::size_t l, std::size_t b, const float* R) {
        rollout->write_elements((l * B + b) * T * T, R, T * T);
        if (l + 1 == L && in.lengths[b] > 0) {
          const float* row = R + (in.lengths[b] - 1) * T;
          reach[b].assign(row, row + in.lengths[b]);
        }
      };
    if (norms)
      mo.norms_sink = [&](std::size_t slot, std::size_t b, std::size_t hs, const float* v) {
        norms->write_elements(((slot * B + b) * Hs + hs) * T * T, v, T * T);
        double sum = 0;  // over the row's real queries and keys
        for (std::size_t i = 0; i < in.lengths[b]; ++i)
          for (std::size_t j = 0; j < in.lengths[b]; ++j) sum += v[i * T + j];
        norm_sum[slot * Hs + hs] += sum;
      };
    // each finished layer's arrays to disk in the background, as `mha run`'s maps
    mo.layer_done = [&](std::size_t l) {
      if (rollout) rollout->start_writeback(l * B * T * T, B * T * T);
      const auto it = std::find(call.map_layers.begin(), call.map_layers.end(), l);
      if (norms && it != call.map_layers.end())
        norms->start_writeback(std::size_t(it - call.map_layers.begin()) * B * Hs * T * T,
                               B * Hs * T * T);
    };
    if (!hidden.empty())
      mo.hidden_sink = [&](std::size_t i, const float* x) {
        std::copy(x, x + B * T * d, hidden.begin() + static_cast<std::ptrdiff_t>(i * B * T * d));
      };
    // An image model's pass starts from its patch embeddings.
    const std::vector<float> embeddings = input_embeddings(model, in);
    if (!embeddings.empty()) mo.embeddings = embeddings.data();
    const MapAnalysisResult ma = analyze_maps(model, in.ids.data(), B, T, in.lengths, mo);
    const ForwardResult& r = ma.forward;
    check_finite_output(r, config.model);
    if (in.tokens.empty()) whole.name_tokens(in);
    // "row b, to 'tok': a 0.41, b 0.12, ..." for the first rows of a (B, ...) summary.
    const auto per_row = [&](const char* method,
                             const std::function<std::vector<double>(std::size_t)>& row_of) {
      for (std::size_t b = 0; b < std::min(B, kSummaryRows); ++b) {
        if (in.lengths[b] == 0) continue;
        const std::vector<std::string>& tok = in.tokens[b];
        report.summary.push_back(
            std::string(method) + ": row " + std::to_string(b) + ", into " +
            echo(tok[in.lengths[b] - 1], 20) + " from " +
            top_entries(row_of(b), [&](std::size_t j) { return echo(tok[j], 20); }));
      }
    };
    const std::vector<double>& scores = ma.head_scores;
    const auto& dets = all_detectors();
    if (wants(config, "loss")) {
      const TokenLoss loss =
          token_loss(model, r.output.data(), in.ids.data(), B, T, in.lengths, threads);
      out.stage_npy("loss.npy", loss.loss.data(), {B, T});
      add("loss.npy", {B, T},
          "cross-entropy (nats) of token t + 1 given tokens 0..t; NaN past each row's last "
          "predicted token");
      summary["loss"] = {
          {"mean", loss.mean_loss}, {"perplexity", loss.perplexity}, {"tokens", loss.tokens}};
      report.summary.push_back("loss: " + std::to_string(loss.mean_loss) + " nats over " +
                               std::to_string(loss.tokens) + " tokens, perplexity " +
                               std::to_string(loss.perplexity));
    }
    if (wants(config, "logit_lens")) {
      const std::size_t k = static_cast<std::size_t>(std::max<std::int64_t>(1, config.top_k));
      const LogitLens lens =
          logit_lens(model, hidden.data(), B, T, in.ids.data(), in.lengths, k, threads);
      const std::size_t S = lens.states;
      out.stage_npy("logit_lens_p_next.npy", lens.p_next.data(), {S, B, T});
      std::vector<double> rank(lens.rank_next.begin(), lens.rank_next.end());
      out.stage_npy("logit_lens_rank.npy", rank.data(), {S, B, T});
      out.stage_npy("logit_lens_top_p.npy", lens.top_p.data(), {S, B, T, lens.k});
      out.stage_bytes("logit_lens_top_ids.npy",
                      encode_npy(int_array(DType::i4, {S, B, T, lens.k}, lens.top_ids.data(),
                                           lens.top_ids.size())));
      json top = json::array();  // [state][b][t]: the top tokens' strings
      for (std::size_t s = 0; s < S; ++s) {
        json rows = json::array();
        for (std::size_t b = 0; b < B; ++b) {
          json row = json::array();
          for (std::size_t t = 0; t < in.lengths[b]; ++t) {
            json tokens = json::array();
            for (std::size_t j = 0; j < lens.k; ++j)
              tokens.push_back(whole.token_name(lens.top_ids[((s * B + b) * T + t) * lens.k + j]));
            row.push_back(tokens);
          }
          rows.push_back(row);
        }
        top.push_back(rows);
      }
      out.stage_bytes("logit_lens.json", dump_json(json{{"top_tokens", top}}) + "\n");
      add("logit_lens_p_next.npy", {S, B, T},
          "state s (the input of layer s; s = layers: the output) through the final norm and the "
          "LM head: the probability of token t + 1 at position t; NaN where there is none");
      add("logit_lens_rank.npy", {S, B, T},
          "its rank among the vocabulary (0 = most likely); -1 "
          "where there is none");
      add("logit_lens_top_p.npy", {S, B, T, lens.k}, "the k most likely tokens' probabilities");
      add("logit_lens_top_ids.npy", {S, B, T, lens.k}, "their ids (int32)");
      add("logit_lens.json", {S, B, T, lens.k}, "their token strings, rows cut at each length");
      // How often each state ranks the actual next token first.
      std::vector<double> agree(S, 0.0);
      std::size_t n = 0;
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t t = 0; t + 1 < in.lengths[b]; ++t, ++n)
          for (std::size_t st = 0; st < S; ++st)
            agree[st] += lens.rank_next[(st * B + b) * T + t] == 0;
      for (double& a : agree) a = n ? a / double(n) : 0.0;
      summary["logit_lens"] = {{"top1_accuracy_last_state", agree[L]},
                               {"top1_accuracy_per_state", agree}};
      std::string line = "logit_lens: the next token ranked first, state 0 (embeddings) to " +
                         std::to_string(L) + " (output):";
      for (const double a : agree) {
        char v[16];
        std::snprintf(v, sizeof v, " %.2f", a);
        line += v;
      }
      report.summary.push_back(line);
    }
    if (wants(config, "flow")) {
      out.stage_npy("flow.npy", ma.flow.data(), {B, T, T});
      add("flow.npy", {B, T, T},
          "attention flow to the last layer: the max flow from input token j to position i "
          "through the layers' graph of 0.5 A + 0.5 I (heads' mean, rows renormalised); 0 "
          "beyond each row's tokens");
      per_row("flow", [&](std::size_t b) {
        const float* row = ma.flow.data() + (b * T + in.lengths[b] - 1) * T;
        return std::vector<double>(row, row + in.lengths[b]);
      });
    }
    if (wants(config, "rollout")) {
      add("rollout.npy", {L, B, T, T},
          "attention rollout up to layer l: the product of 0.5 A + 0.5 I (heads' mean, rows "
          "renormalised) from layer 0 to l; row i: how much of each input token reaches "
          "position i");
      per_row("rollout", [&](std::size_t b) { return reach[b]; });
    }
    if (wants(config, "norms")) {
      add("attention_norms.npy", {Ls, B, Hs, T, T},
          "||a_ij f_h(x_j)||, f_h(x) = (x W_V^h + b_V^h) W_O^h: each head's weight times the "
          "norm of what key j sends (layers and heads as chosen)");
      for (double& v : norm_sum) v /= double(std::max<std::size_t>(1, real_rows));
      report.summary.push_back(
          "norms: the heads whose weighted values are largest (sum over keys, mean over real "
          "queries): " +
          top_entries(norm_sum, [&](std::size_t i) {
            return head_name(call.map_layers[i / Hs], call.map_heads[i % Hs]);
          }));
    }
    if (wants(config, "detectors")) {
      out.stage_npy("head_scores.npy", scores.data(), {dets.size(), Ls, Hs});
      json names = json::array();
      for (Detector det : dets) names.push_back(to_string(det));
      add("head_scores.npy", {dets.size(), Ls, Hs},
          "TransformerLens's detect_head scores (mul): sum(A * P) / sum(A) per head, the mean over "
          "rows; detectors in the order of run.json's \"detectors\"");
      summary["detectors"] = names;
      for (std::size_t k = 0; k < dets.size(); ++k) {
        const std::vector<double> of(
            scores.begin() + static_cast<std::ptrdiff_t>(k * Ls * Hs),
            scores.begin() + static_cast<std::ptrdiff_t>((k + 1) * Ls * Hs));
        report.summary.push_back(std::string("detectors: ") + to_string(dets[k]) + ": " +
                                 top_entries(of, [&](std::size_t i) {
                                   return head_name(call.map_layers[i / Hs],
                                                    call.map_heads[i % Hs]);
                                 }));
      }
    }
  }
  if (wants(config, "ablation")) {
    const Ablation kind = config.ablation == "mean" ? Ablation::mean : Ablation::zero;
    const auto t0 = Clock::now();
    // An image model's passes start from its patch embeddings.
    const std::vector<float> embeddings = input_embeddings(model, in);
    if (!embeddings.empty()) io.embeddings = embeddings.data();
    const AblationResult a = head_ablation(model, in.ids.data(), B, in.T, in.lengths, kind, io);
    out.stage_npy("ablation.npy", a.effect.data(), {B, a.layers.size(), a.heads.size()});
    // An image classifier's metric is on its classes (the CLS token through the classifier).
    const std::string of = c.classifier ? " of the classes" : " of the next token";
    add("ablation.npy", {B, a.layers.size(), a.heads.size()},
        std::string("per row, each chosen head's output replaced by ") +
            (kind == Ablation::zero ? "zero" : "its mean over the row's positions") + ": " +
            (metric == Metric::kl ? "KL(clean || ablated)" + of
                                  : std::string(to_string(metric)) + "(ablated) - " +
                                        to_string(metric) + "(clean)") +
            (c.classifier && metric == Metric::loss
                 ? ", loss being the cross-entropy of the class the clean run predicts "
                   "(summary.ablation.predicted)"
             : c.classifier && metric == Metric::logit_diff
                 ? ", logit_diff being the classifier's logit(target) - logit(foil)"
                 : ""));
    summary["ablation"] = {{"kind", to_string(kind)},
                           {"metric", to_string(metric)},
                           {"clean", a.clean},
                           {"passes", a.passes},
                           {"layer_passes", a.layer_passes},
                           {"ms", ms_since(t0)},
                           {"weights_held", io.layers_read != nullptr}};
    if (c.classifier) {  // the clean run's class per row, and the classes logit_diff names
      json predicted = json::array();
      for (const std::int32_t k : a.predicted)
        predicted.push_back({{"id", k}, {"label", c.labels.at(std::size_t(k))}});
      summary["ablation"]["predicted"] = predicted;
      if (metric == Metric::logit_diff) {
        summary["ablation"]["target"] = c.labels.at(std::size_t(io.target));
        summary["ablation"]["foil"] = c.labels.at(std::size_t(io.foil));
      }
    }
    report.summary.push_back("ablation: " + std::to_string(a.layers.size() * a.heads.size()) +
                             " heads in " + std::to_string(a.passes) + " partial forwards of " +
                             std::to_string(a.layer_passes) + " head-layer passes, " +
                             std::to_string(ms_since(t0)) + " ms");
  }
  if (patching) {
    const auto t0 = Clock::now();
    const PatchingResult p =
        activation_patching(model, clean_in.ids.data(), corrupt_in.ids.data(), clean_in.T, io);
    out.stage_npy("patch_heads.npy", p.heads_patched.data(), {p.layers.size(), p.heads.size()});
    out.stage_npy("patch_resid.npy", p.resid_patched.data(), {p.layers.size(), clean_in.T});
    add("patch_heads.npy", {p.layers.size(), p.heads.size()},
        "each head's output copied from the clean run into the corrupt one: (metric - corrupt) "
        "/ (clean - corrupt)");
    add("patch_resid.npy", {p.layers.size(), clean_in.T},
        "layer l's input at position t copied from the clean run: the same normalised metric");
    summary["patching"] = {{"metric", to_string(metric)},
                           {"clean", p.clean},
                           {"corrupt", p.corrupt},
                           {"ms", ms_since(t0)}};
    const std::vector<double> restored(p.heads_patched.begin(), p.heads_patched.end());
    report.summary.push_back(
        "patching: " + std::string(to_string(metric)) + " clean " + std::to_string(p.clean) +
        ", corrupt " + std::to_string(p.corrupt) +
        "; the heads that restore most: " + top_entries(restored, [&](std::size_t i) {
          return head_name(p.layers[i / p.heads.size()], p.heads[i % p.heads.size()]);
        }));
  }
  if (corpus) {
    // Many passes: every layer's weights read once when they fit beside a batch.
    std::vector<TransformerLayer<float>> corpus_layers;
    if (corpus_need + layers_bytes <= max_memory) corpus_layers = read_layers(model, threads);
    std::vector<std::unique_ptr<AttentionStats>> stats;
    for (std::size_t l = 0; l < L; ++l)
      stats.push_back(std::make_unique<AttentionStats>(h, corpus_T, corpus_T));
    const auto& dets = all_detectors();
    std::vector<double> det_sum(dets.size() * L * h, 0.0);
    std::vector<float> padded(corpus_T * corpus_T, 0.0f);
    std::vector<std::size_t> all_layers(L), all_heads(h);
    for (std::size_t i = 0; i < L; ++i) all_layers[i] = i;
    for (std::size_t i = 0; i < h; ++i) all_heads[i] = i;
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < N; i += per) {
      const std::vector<std::string> part(
          corpus_texts.begin() + static_cast<std::ptrdiff_t>(i),
          corpus_texts.begin() + static_cast<std::ptrdiff_t>(std::min(N, i + per)));
      const ModelInput b = whole.encode(part);
      MapAnalysisOptions mo;
      mo.detectors = true;
      mo.layers_read = corpus_layers.empty() ? nullptr : &corpus_layers;
      mo.layers = all_layers;
      mo.heads = all_heads;
      mo.threads = threads;
      mo.maps_sink = [&](std::size_t l, std::size_t row, std::size_t head, const float* A) {
        const std::size_t n = b.lengths[row];  // its real query rows, keys zero-padded to corpus_T
        for (std::size_t t = 0; t < n; ++t)
          std::copy_n(A + t * b.T, b.T, padded.data() + t * corpus_T);
        stats[l]->add_rows(head, 0, n, padded.data());
      };
      const MapAnalysisResult r = analyze_maps(model, b.ids.data(), b.B, b.T, b.lengths, mo);
      check_finite_output(r.forward, config.model);
      for (std::size_t k = 0; k < det_sum.size(); ++k)  // the batch's mean, weighted by its texts
        det_sum[k] += r.head_scores[k] * double(b.B);
      if (config.progress) config.progress(std::min(N, i + per), N);
    }
    const std::vector<std::string> names = {"entropy",  "distance",       "first_token",
                                            "diagonal", "previous_token", "duplicate_token",
                                            "induction"};
    std::vector<double> heads_out(names.size() * L * h);
    std::string csv = "layer,head";
    for (const std::string& n : names) csv += "," + n;
    csv += "\n";
    for (std::size_t l = 0; l < L; ++l)
      for (std::size_t head = 0; head < h; ++head) {
        const HeadStats st = stats[l]->head(head);
        const double v[] = {st.entropy,
                            st.distance,
                            st.first_key,
                            st.diagonal,
                            det_sum[(0 * L + l) * h + head] / double(N),
                            det_sum[(1 * L + l) * h + head] / double(N),
                            det_sum[(2 * L + l) * h + head] / double(N)};
        csv += std::to_string(l) + "," + std::to_string(head);
        for (std::size_t k = 0; k < names.size(); ++k) {
          heads_out[(k * L + l) * h + head] = v[k];
          char cell[32];
          std::snprintf(cell, sizeof cell, ",%.9g", v[k]);
          csv += cell;
        }
        csv += "\n";
      }
    json per_layer = json::object();  // each statistic's mean over a layer's heads
    for (std::size_t k = 0; k < names.size(); ++k) {
      std::vector<double> means(L, 0.0);
      for (std::size_t l = 0; l < L; ++l) {
        for (std::size_t head = 0; head < h; ++head) means[l] += heads_out[(k * L + l) * h + head];
        means[l] /= double(h);
      }
      per_layer[names[k]] = means;
    }
    out.stage_npy("corpus_heads.npy", heads_out.data(), {names.size(), L, h});
    out.stage_bytes("corpus_heads.csv", csv);
    add("corpus_heads.npy", {names.size(), L, h},
        "per head over every text's real query rows: mean entropy (nats), mean attended "
        "distance, mean weight on the first token, on the query's own token; then "
        "TransformerLens's detector scores, the mean over texts; statistics in the order of "
        "summary.corpus.statistics");
    add("corpus_heads.csv", {L * h, names.size() + 2}, "the same, a row per head");
    summary["corpus"] = {{"file", *config.texts_file}, {"texts", N},
                         {"tokens", corpus_tokens},    {"batch", per},
                         {"statistics", names},        {"per_layer", per_layer},
                         {"ms", ms_since(t0)}};
    report.summary.push_back("corpus: " + std::to_string(N) + " texts, " +
                             std::to_string(corpus_tokens) + " tokens, " +
                             std::to_string(ms_since(t0)) + " ms");
  }
  if (others) {
    if (in.tokens.empty()) whole.name_tokens(in);
    out.stage_bytes("tokens.json", dump_json(tokens_json(in)) + "\n");
    report.outputs.insert(report.outputs.begin(), "tokens.json");
    if (!in.images.empty()) {  // what the model saw, for the view's overlay
      out.stage_npy("images.npy", in.images.data(),
                    {B, c.image_height, c.image_width, std::size_t{3}});
      report.outputs.push_back("images.npy");
    }
  } else if (patching) {  // the clean and corrupt rows label the page's tables
    ModelInput both;
    both.B = 2, both.T = clean_in.T;
    both.ids = clean_in.ids;
    both.ids.insert(both.ids.end(), corrupt_in.ids.begin(), corrupt_in.ids.end());
    both.lengths = {clean_in.T, corrupt_in.T};
    both.tokens = {clean_in.tokens.at(0), corrupt_in.tokens.at(0)};
    both.pieces = {clean_in.pieces.at(0), corrupt_in.pieces.at(0)};
    out.stage_bytes("tokens.json", dump_json(tokens_json(both)) + "\n");
    report.outputs.insert(report.outputs.begin(), "tokens.json");
  }
  json run;
  run["mode"] = "analyze";
  run["version"] = MHA_VERSION;
  run["model"] = {{"dir", config.model},
                  {"model_type", c.model_type},
                  {"num_layers", c.num_layers},
                  {"d_model", c.d_model},
                  {"h", c.h},
                  {"head_dim", c.head_dim},
                  {"vocab_size", c.vocab_size}};
  if (c.classifier) run["model"]["num_labels"] = c.num_labels;
  run["methods"] = config.methods;
  run["config"] = to_json(config);
  run["input"] = {{"batch", B}, {"seq_len", in.T}, {"lengths", in.lengths}};
  if (!in.image_sources.empty()) {
    run["input"].update(image_input_json(in, c));
    run["preprocessing"] = preprocessing_json(whole.image_processor());
  }
  if (patching) run["patching"] = {{"clean", clean_in.ids}, {"corrupt", corrupt_in.ids}};
  run["layers"] = call.map_layers;
  run["heads"] = call.map_heads;
  run["arrays"] = arrays;
  run["summary"] = summary;
  run["threads"] = threads;
  commit_analysis(config, std::move(run), out, report, need, max_memory, start);
  return report;
}

void commit_analysis(const AnalyzeConfig& config, json run, OutputSet& out, AnalyzeReport& report,
                     std::uint64_t need, std::uint64_t max_memory, Clock::time_point start) {
  run["dtype"] = to_string(config.dtype);
  run.update(compute_json(config.dtype));
  run["memory"] = {{"estimate_bytes", need}, {"max_memory", max_memory}};
  json outputs = json::object();  // what a later run in out_dir removes, and readers check
  for (const std::string& name : report.outputs) {
    const FileChecksum sum = out.checksum(name);
    outputs[name] = {{"bytes", sum.bytes}, {"crc32", crc32_hex(sum.crc32)}};
  }
  run["outputs"] = outputs;
  run["total_ms"] = ms_since(start);
  report.outputs.push_back("run.json");
  out.stage_bytes("run.json", dump_json(run, 2) + "\n");
  out.remove_on_commit(earlier_run_outputs(out.dir(), [&](const std::string& p) {
    std::error_code ec;
    return (config.tokens && std::filesystem::equivalent(*config.tokens, p, ec)) ||
           (config.target_tokens && std::filesystem::equivalent(*config.target_tokens, p, ec));
  }));
  out.commit();
  report.run = std::move(run);
}

}  // namespace mha
