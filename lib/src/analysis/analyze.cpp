// The loop over the registry (mha/analysis/analyze.hpp): the methods' checks,
// the memory plan (the pass's and the sum of the methods' estimates), the
// one shared pass with what each method asks of it, the methods' own passes,
// and the outputs: files all-or-nothing (run_analyze) or arrays in memory
// (analyze_input, mha.Model).
#include "mha/analysis/analyze.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <type_traits>
#include <variant>

#include "mha/analysis/analysis.hpp"
#include "mha/analysis/options.hpp"
#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/base/utf8.hpp"
#include "mha/config/memory.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/out_dir.hpp"
#include "mha/io/output_set.hpp"
#include "mha/pipeline/seq2seq.hpp"
#include "mha/run/run_json.hpp"
#include "outputs.hpp"

namespace mha {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// "loss, logit_lens, ... or corpus" (`last`: " or ", or ", ") from the registry.
std::string method_list(const char* last) {
  std::string s;
  const auto& all = analyses();
  for (std::size_t i = 0; i < all.size(); ++i)
    s += (i == 0 ? "" : i + 1 == all.size() ? last : ", ") + std::string(all[i]->name);
  return s;
}

// The methods given, in the registry's order; unknown or repeated ones refused.
std::vector<const Analysis*> methods_of(const AnalyzeConfig& config) {
  if (config.methods.empty()) fail_input("--method: expected one or more of " + method_list(", "));
  std::set<std::string> seen;
  for (const std::string& m : config.methods) {
    if (!find_analysis(m)) fail_input("--method " + echo(m) + ": expected " + method_list(" or "));
    if (!seen.insert(m).second) fail_input("--method " + m + ": given twice");
  }
  std::vector<const Analysis*> out;
  for (const Analysis* a : analyses())
    if (seen.count(a->name)) out.push_back(a);
  return out;
}

bool reads_rows(const std::vector<const Analysis*>& methods) {
  return std::any_of(methods.begin(), methods.end(),
                     [](const Analysis* a) { return a->input == AnalysisInput::rows; });
}

bool has(const std::vector<const Analysis*>& methods, AnalysisInput input) {
  return std::any_of(methods.begin(), methods.end(),
                     [&](const Analysis* a) { return a->input == input; });
}

// Every check of the options that needs no model: the methods' own, then
// which input the methods take.
void check_flags(const AnalyzeConfig& config, const std::vector<const Analysis*>& methods,
                 bool rows_given, bool images) {
  for (const Analysis* a : methods)
    if (a->check_options) a->check_options(config);
  if (!has(methods, AnalysisInput::corpus) && config.texts_file)
    fail_input("--texts: used by --method corpus only");
  if (!has(methods, AnalysisInput::patching) && (config.clean || config.corrupt))
    fail_input("--clean/--corrupt: used by --method patching only");
  for (const std::string& t : config.texts) check_utf8(t, "--text");
  for (const std::string& t : config.target_texts) check_utf8(t, "--target_text");
  for (const auto& [flag, text] : {std::pair{"--clean", &config.clean},
                                   {"--corrupt", &config.corrupt},
                                   {"--target", &config.target},
                                   {"--foil", &config.foil}})
    if (*text) check_utf8(**text, flag);
  if (config.tokens && !config.texts.empty())
    fail_input("--tokens and --text: give one of them, not both");
  if (!config.images.empty() && (config.tokens || !config.texts.empty()))
    fail_input("--image and --text/--tokens: give images or text, not both");
  if (images)
    for (const Analysis* a : methods)
      if (!a->images)
        fail_input(std::string("--method ") + a->name +
                   ": not with --image; an image model's analyses are rollout, flow, norms and "
                   "ablation (an image model has no token ids to read, nor a next token to "
                   "predict)");
  if (reads_rows(methods) && !rows_given)
    fail_input(
        "--model: expected the input as --text \"...\" (repeatable), --tokens FILE.npy or "
        "--image FILE");
  metric_of(config.metric, config.target, config.foil);
}

// A causal LM's predictions (or, for images, a classifier's: the method's own
// check); an encoder-decoder's methods and its target's predictions.
void check_model(const AnalyzeConfig& config, const ModelConfig& c,
                 const std::vector<const Analysis*>& methods, bool images, bool two_stacks) {
  for (const Analysis* a : methods)
    if (two_stacks && !a->encoder_decoder)
      fail_input(std::string("--method ") + a->name + ": not for an encoder-decoder (" +
                 c.model_type + "); its analyses are loss, rollout, norms and ablation");
  for (const Analysis* a : methods)
    if (a->lm_head && !(images && a->images) && !c.has_lm_head())
      fail_input(config.model + ": a " + c.model_type +
                 (two_stacks ? " has no LM head; loss and ablation need the target's predictions"
                             : " has no LM head; loss, logit_lens, ablation and patching need a "
                               "causal LM's next-token predictions"));
  for (const Analysis* a : methods)
    if (a->check_model) a->check_model(config, c);
}

// An encoder-decoder's teacher-forced batch over both sides (`sides` outlives it) and its
// stacks' sizes, for the entries.
void set_stacks(AnalysisRun& run, const Seq2SeqSides& sides, PassInput& batch) {
  const ModelInput &source = sides.source, &labels = sides.target.labels,
                   &decoder = sides.target.decoder;
  batch.ids = source.ids.data();
  batch.B = source.B, batch.T = source.T, batch.target_T = labels.T;
  batch.lengths = source.lengths;
  batch.target_lengths = decoder.lengths;
  batch.decoder_ids = decoder.ids.data();
  batch.labels = labels.ids.data();
  run.seq2seq = &batch;
  const std::vector<std::size_t>& layers = run.call.map_layers;
  const auto chosen = [&](std::size_t n) {
    return std::size_t(std::lower_bound(layers.begin(), layers.end(), n) - layers.begin());
  };
  AnalysisStacks& st = run.stacks;
  st.S = source.T, st.T = labels.T;
  st.Le = run.c().num_layers, st.Ld = run.c().num_decoder_layers;
  st.Les = chosen(st.Le), st.Lds = chosen(st.Ld);
}

// An encoder-decoder's: the pass over both stacks, one layer's maps of each kind and their
// value norms (the methods reading maps), the vocabulary's logits (the target's predictions),
// and each method's share.
std::uint64_t estimate_stacks(const AnalysisRun& run, const std::vector<const Analysis*>& methods,
                              AnalysisSizes& s) {
  const ModelConfig& c = run.c();
  const std::uint64_t B = s.B, S = run.stacks.S, T = run.stacks.T;
  s.T = T;
  s.stacks = &run.stacks;
  std::uint64_t need = seq2seq_memory(c, run.model().layer_float32_bytes(), B, S, T, run.threads);
  bool maps = false, lm = false;
  for (const Analysis* a : methods) {
    if (a->memory) need += a->memory(s);
    maps = maps || a->reads_maps;
    lm = lm || a->lm_head;
  }
  if (maps) need += 4 * B * c.h * (S * S + T * T + T * S) + 8 * B * c.h * (S + T + S);
  if (lm) need += 4 * std::uint64_t(std::min<std::uint64_t>(B * T, 256)) * c.vocab_size;
  return need;
}

// The plan's estimate: the forward over the longest rows (of at least 2:
// patching's), its hidden states and values, and each method's share.
std::uint64_t estimate(const AnalysisRun& run, const std::vector<const Analysis*>& methods,
                       bool in_memory) {
  const ModelConfig& c = run.c();
  const ModelInput& in = run.in;
  AnalysisSizes s;
  s.B = in.B, s.L = c.num_layers, s.h = c.h, s.d = c.d_model, s.head_dim = c.head_dim;
  s.T = std::max(in.T, run.patching_rows ? run.patching_rows->T : 0);
  s.Ls = run.call.map_layers.size(), s.Hs = run.call.map_heads.size();
  s.in_memory = in_memory;
  s.threads = run.threads;
  if (run.seq2seq) return estimate_stacks(run, methods, s);
  const std::size_t Bmax = std::max<std::size_t>(s.B, 2);
  std::uint64_t need = forward_memory(c, run.model().layer_float32_bytes(), Bmax, s.T, run.threads);
  need +=
      bytes_of({s.L + 1, Bmax, s.T, s.d}) * 2 + bytes_of({s.L, Bmax, s.T, s.h * s.head_dim}) * 2;
  bool maps = false;
  for (const Analysis* a : methods) {
    if (a->memory) need += a->memory(s);
    maps = maps || a->reads_maps;
  }
  if (maps) need += bytes_of({s.B, s.h, s.T, s.T}) * 2;  // a layer's maps, held once for all
  if (!in.pixels.empty()) need += 4 * (in.pixels.size() + s.B * s.T * s.d) + in.images.size();
  return need;
}

// The methods' checks once the input is read, the interventions' options,
// and the estimate against max_memory.
void plan(AnalysisRun& run, const std::vector<const Analysis*>& methods, bool in_memory) {
  for (const Analysis* a : methods)
    if (a->check) a->check(run);
  run.io = intervention_options(run.whole, run.call, run.config.metric, run.config.target,
                                run.config.foil);
  run.need = estimate(run, methods, in_memory);
  if (run.need > run.max_memory)
    fail_input(run.config.model + ": the analysis needs about " + format_bytes(run.need) +
               ", over max_memory " + format_bytes(run.max_memory));
}

// The shared pass over the rows: an encoder-decoder's over both stacks, or a
// one-stack model's with the hidden states kept when a method asks for them.
void run_pass(AnalysisRun& run, AnalysisPass& pass) {
  ModelInput& in = run.in;
  const std::size_t n = in.B * in.T * run.c().d_model;
  if (pass.hidden_states) {
    pass.hidden.resize((run.c().num_layers + 1) * n);
    pass.options.hidden_sink = [&](std::size_t i, const float* x) {
      std::copy(x, x + n, pass.hidden.begin() + static_cast<std::ptrdiff_t>(i * n));
    };
  }
  // each finished layer's arrays on their way to disk, as `mha run`'s maps
  pass.options.layer_done = [&](std::size_t l) {
    for (const auto& done : pass.layer_done) done(l);
  };
  // An image model's pass starts from its patch embeddings.
  const std::vector<float> embeddings = input_embeddings(run.model(), in);
  if (!embeddings.empty()) pass.options.embeddings = embeddings.data();
  pass.result = analyze_maps(run.model(), run.input(), pass.options);
}

// The one pass the rows methods share, each asking what it needs of it, then
// each one's finish, then the methods that run passes of their own.
void compute(AnalysisRun& run, const std::vector<const Analysis*>& methods) {
  if (reads_rows(methods)) {
    AnalysisPass pass;
    pass.options.layers = run.call.map_layers;
    pass.options.heads = run.call.map_heads;
    pass.options.threads = run.threads;
    std::vector<AnalysisFinish> finish;
    for (const Analysis* a : methods)
      if (a->ask) finish.push_back(a->ask(run, pass));
    run_pass(run, pass);
    check_finite_output(pass.result.forward, run.config.model);
    if (!run.seq2seq && run.in.tokens.empty()) run.whole.name_tokens(run.in);
    for (const AnalysisFinish& f : finish) f(run, pass);
  }
  for (const Analysis* a : methods)
    if (a->run) a->run(run);
}

// run.json's keys of every analysis, then the outputs committed (commit_analysis).
json run_json(const AnalysisRun& run, const ImageProcessor& processor) {
  const ModelConfig& c = run.c();
  const ModelInput& in = run.in;
  json j;
  j["mode"] = "analyze";
  j["version"] = MHA_VERSION;
  j["model"] = {{"dir", run.config.model},
                {"model_type", c.model_type},
                {"num_layers", c.num_layers},
                {"d_model", c.d_model},
                {"h", c.h},
                {"head_dim", c.head_dim},
                {"vocab_size", c.vocab_size}};
  if (c.classifier) j["model"]["num_labels"] = c.num_labels;
  if (run.seq2seq) {
    j["model"]["encoder_decoder"] = true;
    j["model"]["num_decoder_layers"] = c.num_decoder_layers;
  }
  j["methods"] = run.config.methods;
  j["config"] = to_json(run.config);
  j["input"] = {{"batch", in.B}, {"seq_len", in.T}, {"lengths", in.lengths}};
  if (run.seq2seq) {
    j["input"]["target_len"] = run.stacks.T;
    j["input"]["target_lengths"] = run.seq2seq->target_lengths;
  }
  if (!in.image_sources.empty()) {
    j["input"].update(image_input_json(in, c));
    j["preprocessing"] = preprocessing_json(processor);
  }
  j.update(run.extra);
  j["layers"] = run.call.map_layers;
  j["heads"] = run.call.map_heads;
  j["arrays"] = run.arrays;
  j["summary"] = run.summary;
  j["threads"] = run.threads;
  return j;
}

// tokens.json (and images.npy): of the rows, or of patching's clean and corrupt.
void write_tokens(AnalysisRun& run, OutputSet& out, bool rows, const Seq2SeqSides* sides) {
  ModelInput& in = run.in;
  if (sides) {  // both sides of an encoder-decoder
    if (in.tokens.empty()) run.whole.name_tokens(in);
    out.stage_bytes(
        "tokens.json",
        dump_json(seq2seq_tokens_json(in, sides->target.decoder, sides->target.labels)) + "\n");
    run.outputs.insert(run.outputs.begin(), "tokens.json");
    return;
  }
  const ModelInput* tokens = rows ? &in : run.patching_rows.get();
  if (!tokens) return;
  if (rows && in.tokens.empty()) run.whole.name_tokens(in);
  out.stage_bytes("tokens.json", dump_json(tokens_json(*tokens)) + "\n");
  run.outputs.insert(run.outputs.begin(), "tokens.json");
  if (rows && !in.images.empty()) {  // what the model saw, for the view's overlay
    const ModelConfig& c = run.c();
    out.stage_npy("images.npy", in.images.data(),
                  {in.B, c.image_height, c.image_width, std::size_t{3}});
    run.outputs.push_back("images.npy");
  }
}

}  // namespace

std::vector<std::string> analysis_methods() {
  std::vector<std::string> out;
  for (const Analysis* a : analyses()) out.push_back(a->name);
  return out;
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

AnalyzeReport run_analyze(const AnalyzeConfig& config) {
  const auto start = Clock::now();
  const std::vector<const Analysis*> methods = methods_of(config);
  const bool rows = reads_rows(methods), images = !config.images.empty();
  check_flags(config, methods, config.tokens || !config.texts.empty() || images, images);
  const std::optional<DirLock> lock = lock_out_dir(config.out_dir, config.model, config.check_only);
  const Model whole(config.model, config.dtype);
  const ModelConfig& c = whole.config();
  const std::uint64_t max_memory = config.max_memory ? *config.max_memory : default_max_memory();
  // An encoder-decoder, or a target given to any model (refused there by name).
  const bool two_stacks = c.encoder_decoder || config.target_tokens || !config.target_texts.empty();
  std::unique_ptr<Seq2SeqSides> sides;
  ModelInput in;
  ModelCall call;
  if (two_stacks) {
    const Seq2SeqFlags flags{config.texts, config.tokens, config.target_texts, config.target_tokens,
                             images};
    check_seq2seq_flags(whole, config.model, flags);
    check_model(config, c, methods, false, true);
    // Layer indices name a layer of both stacks, as `mha run`'s; unset, every layer of each.
    call = check_seq2seq_call(c, {true, config.layers, config.heads, config.top_k, config.threads});
    sides = std::make_unique<Seq2SeqSides>(read_seq2seq_sides(whole, flags));
  } else {
    check_model(config, c, methods, images, false);
    call = check_model_call(c, {true, config.layers, config.heads, config.top_k, config.threads});
    if (rows && images) {
      if (!c.image_input()) whole.encode_images({}, {});  // refused by name before reading any
      in = read_image_input(whole, config.images, max_memory);
    } else if (rows) {
      in = config.tokens ? read_token_ids(whole, *config.tokens) : whole.encode(config.texts);
    }
  }
  InterventionOptions io;
  FileOutputs out(config.out_dir);
  AnalysisRun run(config, whole, call, sides ? sides->source : in, io, max_memory, out);
  run.threads = resolve_threads(call.threads);
  PassInput batch;
  if (sides) set_stacks(run, *sides, batch);
  plan(run, methods, false);
  if (config.check_only) return {};
  compute(run, methods);
  OutputSet& set = out.set();
  write_tokens(run, set, rows, sides.get());
  AnalyzeReport report;
  report.outputs = run.outputs;
  report.summary = run.lines;
  commit_analysis(config, run_json(run, whole.image_processor()), set, report, run.need, max_memory,
                  start);
  return report;
}

AnalysisResult analyze_input(const Model& whole, const AnalyzeConfig& config, ModelInput in,
                             std::uint64_t max_memory) {
  const std::vector<const Analysis*> methods = methods_of(config);
  const bool images = !in.pixels.empty();
  check_flags(config, methods, true, images);
  check_model(config, whole.config(), methods, images, false);
  const ModelCall call = check_model_call(
      whole.config(), {true, config.layers, config.heads, config.top_k, config.threads});
  InterventionOptions io;
  MemoryOutputs out;
  AnalysisRun run(config, whole, call, in, io, max_memory, out);
  run.threads = resolve_threads(call.threads);
  plan(run, methods, true);
  compute(run, methods);
  return {std::move(out.arrays), std::move(run.summary)};
}

AnalysisResult analyze_seq2seq_input(const Model& whole, const AnalyzeConfig& config,
                                     Seq2SeqSides sides, std::uint64_t max_memory) {
  const std::vector<const Analysis*> methods = methods_of(config);
  check_flags(config, methods, true, false);
  check_model(config, whole.config(), methods, false, true);
  const ModelCall call = check_seq2seq_call(
      whole.config(), {true, config.layers, config.heads, config.top_k, config.threads});
  InterventionOptions io;
  MemoryOutputs out;
  AnalysisRun run(config, whole, call, sides.source, io, max_memory, out);
  run.threads = resolve_threads(call.threads);
  PassInput batch;
  set_stacks(run, sides, batch);
  plan(run, methods, true);
  compute(run, methods);
  return {std::move(out.arrays), std::move(run.summary)};
}

void check_model_job(const ModelJob& job) {
  std::visit(
      [](auto c) {
        c.check_only = true;
        using C = decltype(c);
        if constexpr (std::is_same_v<C, AnalyzeConfig>)
          run_analyze(c);
        else
          run_model(c);
      },
      job);
}

}  // namespace mha
