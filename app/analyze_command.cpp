#include "analyze_command.hpp"

#include <iostream>
#include <memory>
#include <set>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "mha/analysis/analyze.hpp"
#include "mha/base/error.hpp"
#include "mha/base/large_array.hpp"
#include "mha/config/config.hpp"
#include "mha/config/memory.hpp"
#include "mha/io/json_text.hpp"
#include "mha/run/model_job.hpp"
#include "model_command.hpp"
#include "progress.hpp"

namespace mha::cli {

void add_analyze_command(CLI::App& app, AnalyzeArgs& args) {
  CLI::App* a = app.add_subcommand(
      "analyze",
      "Analyses of attention inside a whole model: loss, logit lens, rollout, attention flow, "
      "value-weighted norms, head detectors, head ablation, activation patching, corpus "
      "statistics");
  a->fallthrough();
  a->footer(
      "Examples:\n"
      "  mha analyze --model models/gpt2 --text \"The Eiffel Tower is in\" --method loss "
      "--method logit_lens --method rollout\n"
      "  mha analyze --model models/gpt2 --text \"The Eiffel Tower is in\" --method ablation "
      "--target \" Paris\" --foil \" Rome\"\n"
      "  mha analyze --model models/gpt2 --method patching --clean \"The Eiffel Tower is in\" "
      "--corrupt \"The Colosseum is in\" --target \" Paris\" --foil \" Rome\"\n"
      "  mha analyze --model models/t5-small --text \"translate English to German: The house\" "
      "--target_text \"Das Haus\" --method rollout --method ablation\n"
      "docs/analyses.md gives each method's formula, outputs and conventions.");
  args.command = a;
  a->add_option("--model", args.model, "a checkpoint directory (docs/models.md)")->type_name("DIR");
  a->add_option("--config,-c", args.config_file,
                "a JSON file of these options, as a sweep's runs are written (docs/sweeps.md)")
      ->type_name("FILE");
  std::string methods;  // the registry's names (mha/analysis/analysis.hpp)
  for (const std::string& m : analysis_methods()) methods += (methods.empty() ? "" : ", ") + m;
  a->add_option("--method", args.methods, methods + " (repeatable)")->type_name("NAME");
  a->add_option("--text", args.texts, "a text to tokenize (repeat for a batch)")
      ->type_name("TEXT")
      ->allow_extra_args(false);
  a->add_option("--tokens", args.tokens, ".npy of token ids, (T) or (B, T)")->type_name("PATH");
  a->add_option("--image", args.images,
                "a PNG or JPEG file for an image model (vit; repeat for a batch): rollout, flow, "
                "norms and (an image classifier) ablation")
      ->type_name("FILE")
      ->allow_extra_args(false);
  a->add_option("--target_text", args.target_texts,
                "an encoder-decoder's target, teacher-forced (t5, bart; one per --text): loss, "
                "rollout, norms and ablation")
      ->type_name("TEXT")
      ->allow_extra_args(false);
  a->add_option("--target_tokens", args.target_tokens,
                ".npy of the target's token ids, (T) or (B, T)")
      ->type_name("PATH");
  a->add_option("--out_dir", args.out_dir, "where the arrays and run.json go (default out)")
      ->type_name("DIR");
  a->add_option("--layer_indices", args.layers, "layers analysed, e.g. 3,5 (default all)")
      ->type_name("LIST");
  a->add_option("--head_indices", args.heads, "heads analysed, e.g. 0,2 (default all)")
      ->type_name("LIST");
  a->add_option("--top_k", args.top_k, "logit_lens: tokens listed per layer and position (5)")
      ->type_name("INT");
  a->add_option("--threads", args.threads, "threads (0 = all cores)")->type_name("INT");
  a->add_option("--dtype", args.dtype,
                "float32, or bfloat16: every GEMM on bfloat16 operands (default float32)")
      ->type_name("DTYPE");
  a->add_option("--max_memory", args.max_memory, "refuse analyses needing more, e.g. 8GiB")
      ->type_name("SIZE");
  a->add_option("--ablation", args.ablation, "ablation: zero or mean (default zero)")
      ->type_name("KIND");
  a->add_option("--metric", args.metric,
                "ablation, patching: loss, logit_diff or kl (default logit_diff with "
                "--target/--foil, else loss)")
      ->type_name("NAME");
  a->add_option("--target", args.target,
                "logit_diff: the token expected, e.g. \" Paris\" (with --image: a class's label)")
      ->type_name("TEXT");
  a->add_option("--foil", args.foil,
                "logit_diff: the token compared with it, e.g. \" Rome\" (with --image: a label)")
      ->type_name("TEXT");
  a->add_option("--clean", args.clean, "patching: the clean text")->type_name("TEXT");
  a->add_option("--corrupt", args.corrupt, "patching: the corrupt text (as many tokens)")
      ->type_name("TEXT");
  a->add_option("--texts", args.texts_file,
                "corpus: a file of texts: a JSON array of strings, one text a line, or .jsonl "
                "({\"text\": ...} a line), as mha tokenize --texts")
      ->type_name("FILE");
  a->add_option("--batch", args.batch, "corpus: texts per pass (default 8)")->type_name("INT");
  a->add_flag("--json", args.json, "print run.json on stdout");
}

namespace {

// The analysis run and logged (summary lines on stdout, run.json with
// `print_json`), with a progress bar over a corpus.
int run_analysis(AnalyzeConfig& config, bool print_json);

// --config FILE: the analysis a model job file describes; of the other
// options only --out_dir, --threads and --max_memory (which do not change
// results) and --json are taken.
AnalyzeConfig analysis_of_file(const AnalyzeArgs& args) {
  std::string flags;
  const std::set<std::string> taken = {"--config",     "--json",    "--out_dir", "--threads",
                                       "--max_memory", "--verbose", "--quiet",   "--help"};
  for (const CLI::Option* opt : args.command->get_options())
    if (opt->count() && !taken.count(opt->get_name()))
      flags += (flags.empty() ? "" : ", ") + opt->get_name();
  if (!flags.empty())
    throw Error(ErrorKind::invalid_input,
                "--config " + args.config_file +
                    ": the file gives the analysis's options; expected no other flag than "
                    "--out_dir, --threads, --max_memory and --json (got " +
                    flags + ")");
  nlohmann::json file = read_config_file(args.config_file);
  const auto given = [&](const char* name) { return args.command->count(name) > 0; };
  if (file.is_object()) {
    if (given("--out_dir")) file["out_dir"] = args.out_dir;
    if (given("--threads")) file["threads"] = args.threads;
    if (given("--max_memory")) file["max_memory"] = args.max_memory;
  }
  const ModelJob job = model_job_from_json(file, args.config_file);
  if (!std::holds_alternative<AnalyzeConfig>(job))
    throw Error(ErrorKind::invalid_input,
                args.config_file +
                    ": holds a model run without \"method\"; run it with `mha run --config " +
                    args.config_file + "`, or give \"method\"");
  return std::get<AnalyzeConfig>(job);
}

}  // namespace

int do_analyze(const AnalyzeArgs& args) {
  if (!args.config_file.empty()) {
    AnalyzeConfig c = analysis_of_file(args);
    return run_analysis(c, args.json);
  }
  if (args.model.empty())
    throw Error(ErrorKind::invalid_input,
                "--model: expected a checkpoint directory (or --config FILE)");
  AnalyzeConfig c;
  c.model = args.model;
  c.texts = args.texts;
  c.images = args.images;
  c.target_texts = args.target_texts;
  c.target_tokens = args.target_tokens;
  if (!args.tokens.empty()) c.tokens = args.tokens;
  c.methods = args.methods;
  c.out_dir = args.out_dir;
  if (args.layers) c.layers = index_list(*args.layers, "layer_indices");
  if (args.heads) c.heads = index_list(*args.heads, "head_indices");
  c.top_k = args.top_k;
  c.threads = args.threads;
  if (!args.max_memory.empty()) c.max_memory = parse_byte_size(args.max_memory, "--max_memory");
  c.ablation = args.ablation;
  c.metric = args.metric;
  c.target = args.target;
  c.foil = args.foil;
  c.clean = args.clean;
  c.corrupt = args.corrupt;
  c.texts_file = args.texts_file;
  c.batch = args.batch;
  c.dtype = parse_model_dtype(args.dtype);
  return run_analysis(c, args.json);
}

namespace {

int run_analysis(AnalyzeConfig& c, bool print_json) {
  // A one-run process, as `mha run --model`: layers' buffers reuse memory
  // already touched, the first layer's in huge pages (large_array.hpp).
  use_one_run_heap();
  std::size_t shown = 0;  // corpus texts the bar has counted
  std::unique_ptr<Progress> bar;
  if (c.texts_file)
    c.progress = [&](std::size_t done, std::size_t total) {
      if (!bar) bar = std::make_unique<Progress>(total, 0);
      while (bar && done > shown) bar->finished("texts", true, ""), ++shown;
    };
  const AnalyzeReport r = run_analyze(c);
  if (bar) bar->done();
  for (const std::string& f : r.outputs) spdlog::info("wrote {}/{}", c.out_dir, f);
  for (const std::string& line : r.summary) std::cout << line << "\n";
  if (print_json) std::cout << dump_json(r.run, 2) << std::endl;
  return 0;
}

}  // namespace

}  // namespace mha::cli
