#include "cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "analyze_command.hpp"
#include "inspect_command.hpp"
#include "mha/base/error.hpp"
#include "mha/base/large_array.hpp"
#include "mha/base/message.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/config/config.hpp"
#include "mha/config/weight_formats.hpp"
#include "mha/inspect/compare.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/output_set.hpp"
#include "mha/kernel/attention.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/fma_peak.hpp"
#include "mha/kernel/vexp.hpp"
#include "mha/run/bench.hpp"
#include "mha/run/model_job.hpp"
#include "mha/run/run.hpp"
#include "mha/run/run_json.hpp"
#include "model_command.hpp"
#include "one_shot.hpp"
#include "option_names.hpp"
#include "plot_command.hpp"
#include "run_progress.hpp"
#include "sweep_command.hpp"
#include "tokenize_command.hpp"
#include "view_command.hpp"

namespace mha::cli {
namespace {

constexpr int kExitInvalid = 2;
constexpr int kExitFailure = 1;

// Every config key becomes `--key VALUE` (option_names.hpp: `--ke-y` too); bool
// keys may also be given bare. Values stay text until Config::apply_flag checks them,
// so flags and files share one set of rules and messages.
struct RunArgs {
  ModelArgs model;
  std::string config_file;
  bool print_json = false;
  bool html = false;
  std::map<std::string, CLI::Option*> keys;
  std::map<std::string, std::string> values;
};

void add_run_command(CLI::App& app, RunArgs& args) {
  CLI::App* run = app.add_subcommand("run", "Run multi-head attention once and write its outputs");
  run->fallthrough();  // -v/-q may follow the subcommand
  run->footer(
      "Examples (from the repository root; tests/cli/test_examples.py runs them):\n"
      "  mha run --config configs/default.json\n"
      "  mha run --h 4 --d_model 64 --seq_len 16 --causal true --save_attention --out_dir "
      "out/causal\n"
      "  mha run --config configs/cross_attention.json --save_weights keras --out_dir out/cross\n"
      "Every config key is also a flag; docs/config.md lists them. The options under \"Model "
      "runs\" need --model; with it, those under \"Layer runs\" are refused (docs/cli.md).");
  run->get_help_ptr()->group(kEveryRunGroup);
  run->add_option("--config,-c", args.config_file,
                  "JSON config file (flags override it); one holding \"model\" is a model run "
                  "(docs/models.md)")
      ->group(kEveryRunGroup);
  run->add_flag("--json", args.print_json, "Also print run.json to stdout")->group(kEveryRunGroup);
  run->add_flag("--html", args.html,
                "Also write view.html, the attention viewer page (turns on save_attention)")
      ->group(kEveryRunGroup);
  // Every config key is a layer run's, but those the model runs' table shares
  // (model_options.hpp), whose help adds what they do with --model.
  for (const auto& key : config_keys()) {
    const ModelRunKey* shared = find_model_run_key(key.name);
    std::string help = key.help;
    if (shared && *shared->help) help += std::string("; ") + shared->help;
    CLI::Option* opt = run->add_option("--" + std::string(key.name), args.values[key.name], help);
    opt->type_name(key.value_hint)->group(run_group(shared ? shared->applies : RunKind::layer));
    if (key.is_bool) opt->expected(0, 1);
    args.keys[key.name] = opt;
  }
  add_model_options(*run, args.model);
}

struct ConvertArgs {
  std::string in, out, from = "auto", to;
  std::size_t h = 0;
  std::optional<std::string> keras_layer;
};

void add_weights_command(CLI::App& app, ConvertArgs& args) {
  CLI::App* weights = app.add_subcommand("weights", "Work with weights files");
  weights->require_subcommand(1);
  weights->fallthrough();  // -v/-q after `weights convert ...`
  CLI::App* convert =
      weights->add_subcommand("convert", "Convert weights between native, torch and keras layouts");
  convert->fallthrough();
  convert->footer(
      "Examples (after `mha run --config configs/cross_attention.json --save_weights keras "
      "--out_dir out/cross`):\n"
      "  mha weights convert out/cross/weights.npz --to native -o out/cross_native.npz\n"
      "  mha weights convert out/cross_native.npz --to keras --h 4 -o out/cross_keras.npz\n"
      "  mha weights convert out/cross_native.npz --to keras --h 4 -o out/cross.weights.h5\n"
      "Keras' own files (.h5, .weights.h5, .keras) are read as input; an output named\n"
      "NAME.weights.h5 is written as Keras 3's load_weights reads it (docs/conventions.md).");
  convert
      ->add_option("input", args.in,
                   "weights .npz, directory, .safetensors, or Keras .h5/.weights.h5/.keras")
      ->required();
  const std::vector<std::string> layouts{"native", "torch", "keras"};
  convert->add_option("--to", args.to, "layout to write")
      ->required()
      ->check(CLI::IsMember(layouts));
  convert->add_option("-o,--output", args.out, "output .npz, .safetensors or NAME.weights.h5")
      ->required();
  convert->add_option("--from", args.from, "layout of the input (default: detected)")
      ->check(CLI::IsMember({"auto", "native", "torch", "keras"}));
  convert->add_option("--h", args.h, "number of heads (needed to write keras from native/torch)")
      ->check(CLI::Range(1, 1 << 30));
  convert->add_option("--keras_layer", args.keras_layer,
                      "the MultiHeadAttention or encoder block to take from a Keras file");
}

struct CompareArgs {
  std::string a, b;
  AllClose tolerance;  // numpy.allclose's defaults
};

// numpy.allclose takes any tolerance; a negative, infinite or NaN one makes
// its answer meaningless, so the flags refuse them.
CLI::Validator tolerance_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(value) || value < 0)
          return "expected a finite number >= 0, got '" + text + "'";
        return std::string();
      },
      "TOL>=0");
}

void add_compare_command(CLI::App& app, CompareArgs& args) {
  CLI::App* compare = app.add_subcommand(
      "compare", "Compare two .npy arrays as numpy.allclose(A, B) does; exit 0 if close, 1 if not");
  compare->fallthrough();
  compare->footer(
      "Exit codes: 0 close, 1 not close, 2 bad input (including shapes that differ).\n"
      "Examples (after `mha run --config configs/default.json`):\n"
      "  mha run --config configs/default.json --threads 1 --out_dir out/one_thread\n"
      "  mha compare out/one_thread/output.npy out/default/output.npy --rtol 0 --atol 0");
  compare->add_option("A", args.a, "array to check")->required();
  compare->add_option("B", args.b, "reference array")->required();
  compare->add_option("--rtol", args.tolerance.rtol, "relative tolerance (default 1e-5)")
      ->check(tolerance_check());
  compare->add_option("--atol", args.tolerance.atol, "absolute tolerance (default 1e-8)")
      ->check(tolerance_check());
  compare->add_flag("--equal_nan", args.tolerance.equal_nan,
                    "count NaN in both arrays at the same index as close (default: NaN is never "
                    "close, as in numpy)");
}

struct BenchArgs {
  std::string config_file, shapes, dtypes = "float32";
  int threads = 0, repeat = 10;
  std::size_t block_q = 0, block_k = 0;
  bool json = false;
  bool one_shot = false;
};

void add_bench_command(CLI::App& app, BenchArgs& args) {
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Time the attention layer on named shapes against a large sgemm (docs/benchmarks.md)");
  bench->fallthrough();
  bench->footer(
      "Examples:\n"
      "  mha bench --shapes tutorial --repeat 3\n"
      "  mha bench --shapes tutorial:plain --repeat 3 --one_shot --json");
  bench->add_option("--config,-c", args.config_file, "also time the layer a run config describes");
  bench->add_option("--shapes", args.shapes,
                    "comma-separated shapes, each NAME or NAME:VARIANT (default: all)");
  bench->add_option("--threads", args.threads, "worker threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  bench->add_option("--repeat", args.repeat, "timed calls per case (default 10)")
      ->check(CLI::Range(1, 100000));
  bench->add_option("--dtype", args.dtypes,
                    "float32, bfloat16 (bfloat16 GEMM operands) or both, comma-separated: each "
                    "case runs in each (default float32)");
  bench->add_flag("--json", args.json, "print JSON instead of a table");
  bench->add_flag("--one_shot", args.one_shot,
                  "also time each case as `mha run` processes, --repeat of them, next to the "
                  "warm time (docs/benchmarks.md)");
  bench->add_option("--block_q", args.block_q, "query rows per kernel block (default: kernel's)")
      ->check(CLI::Range(1, 1 << 20));
  bench->add_option("--block_k", args.block_k, "keys per kernel block (default: kernel's)")
      ->check(CLI::Range(1, 1 << 20));
}

// What `mha bench` times: its shapes (the named ones, and the --config's as
// "config"), the (shape, variant) cases --shapes asks for, and the
// --config's keys for --one_shot.
struct BenchPlan {
  std::vector<BenchShape> shapes;
  std::vector<std::pair<std::string, std::string>> cases;  // (shape, variant)
  nlohmann::json base_config = nlohmann::json::object();
};

BenchPlan bench_plan(const BenchArgs& args) {
  BenchPlan plan;
  auto& shapes = plan.shapes;
  auto& cases = plan.cases;
  auto& base_config = plan.base_config;
  if (!args.config_file.empty()) {
    Config c;
    base_config = read_config_file(args.config_file);
    check_config_paths(base_config, args.config_file);
    c.apply(base_config, args.config_file);
    shapes.push_back({"config", resolve_dims(c, FileShapes{})});
    for (const auto& v : bench_variants()) cases.emplace_back("config", v);
  }
  for (const auto& s : bench_shapes()) shapes.push_back(s);
  std::string list = args.shapes;
  if (list.empty() && args.config_file.empty())
    for (const auto& s : bench_shapes()) list += (list.empty() ? "" : ",") + s.name;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto colon = item.find(':');
    const std::string name = item.substr(0, colon);
    bool known = false;
    for (const auto& s : shapes) known = known || s.name == name;
    if (!known) {
      std::string names;
      for (const auto& s : bench_shapes()) names += (names.empty() ? "" : ", ") + s.name;
      throw Error(ErrorKind::invalid_input,
                  "--shapes: unknown shape '" + name + "' (expected " + names + ")");
    }
    if (colon != std::string::npos) {
      cases.emplace_back(name, item.substr(colon + 1));
    } else {
      const BenchShape& shape = *std::find_if(shapes.begin(), shapes.end(),
                                              [&](const auto& s) { return s.name == name; });
      for (const auto& v : default_variants(shape)) cases.emplace_back(name, v);
    }
  }
  return plan;
}

// --dtype's list, one entry per dtype: whether its GEMM operands are bfloat16.
std::vector<bool> parse_bench_dtypes(const std::string& list) {
  std::vector<bool> bf16s;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    if (item != "float32" && item != "bfloat16")
      throw Error(ErrorKind::invalid_input,
                  "--dtype: unknown dtype '" + item + "' (expected float32 or bfloat16)");
    bf16s.push_back(item == "bfloat16");
  }
  if (bf16s.empty()) throw Error(ErrorKind::invalid_input, "--dtype: expected float32 or bfloat16");
  return bf16s;
}

// The table's lines above its rows: the machine's GEMM speeds, then the column names.
void print_bench_header(const BenchArgs& args, int threads, double sgemm,
                        std::optional<double> bf16_gemm, const std::vector<FmaPeak>& peaks) {
  std::cout << fmt::format(
      "sgemm 2048^3: {:.1f} GFLOP/s with {} thread(s); OpenBLAS {} kernels; direct GEMM {}, "
      "exp {}\n",
      sgemm, threads, blas_load().core, direct_gemm_isa(), vexp_isa());
  std::string peak_line;
  for (const FmaPeak& p : peaks)
    peak_line += fmt::format("{}{} {:.1f}", peak_line.empty() ? "" : ", ", p.isa, p.gflops);
  if (!peak_line.empty()) {
    std::cout << "FMA peak (registers only), GFLOP/s: " << peak_line << "; \"peak\" is of "
              << peaks.front().isa;
    if (bf16_gemm && std::string(bf16_gemm_backend()) == "avx512bf16")
      std::cout << " (float32 cases) and avx512bf16 (bfloat16 cases)";
    std::cout << "\n";
  }
  if (bf16_gemm)
    std::cout << fmt::format("bfloat16 GEMM 2048^3 ({}): {:.1f} GFLOP/s\n", bf16_gemm_backend(),
                             *bf16_gemm);
  std::cout << fmt::format("{:<12} {:<8} {:<8} {:>10} {:>10} {:>9} {:>7} {:>6} {:>10}", "shape",
                           "variant", "dtype", "ms median", "ms min", "GFLOP/s", "sgemm", "peak",
                           "peak RSS");
  if (args.one_shot)
    std::cout << fmt::format(" {:>11} {:>6} {:>10}", "1-shot comp", "ratio", "1-shot wall");
  std::cout << "\n";
}

// The case's GFLOP/s over the peak of what ran it: VDPBF16PS's for bfloat16
// through the native kernel, else the widest float32 ISA's (0 without one).
double peak_fraction(const BenchResult& r, const std::vector<FmaPeak>& peaks) {
  std::string isa = peaks.empty() ? "" : peaks.front().isa;
  if (r.dtype == "bfloat16" && std::string(bf16_gemm_backend()) == "avx512bf16") isa = "avx512bf16";
  for (const FmaPeak& p : peaks)
    if (p.isa == isa && p.gflops > 0) return r.gflops / p.gflops;
  return 0.0;
}

nlohmann::json bench_result_json(const BenchResult& r, const std::optional<OneShot>& one,
                                 const std::vector<FmaPeak>& peaks) {
  const Dims& d = r.dims;
  nlohmann::json j = {{"shape", r.shape},
                      {"variant", r.variant},
                      {"dtype", r.dtype},
                      {"B", d.B},
                      {"T", d.T},
                      {"S", d.S},
                      {"d_model", d.d_model},
                      {"h", d.h},
                      {"flops", r.flops},
                      {"ms_median", r.ms_median},
                      {"ms_min", r.ms_min},
                      {"gflops", r.gflops},
                      {"sgemm_fraction", r.sgemm_fraction},
                      {"fma_peak_fraction", peak_fraction(r, peaks)},
                      {"peak_rss_bytes", r.peak_rss_bytes}};
  if (r.layers) {
    j["layers"] = r.layers;
    j["d_ff"] = r.d_ff;
  }
  if (one) {
    j["one_shot"] = one->to_json();
    j["one_shot"]["compute_over_warm"] = one->compute_ms / r.ms_median;
  }
  return j;
}

void print_bench_row(const BenchResult& r, const std::optional<OneShot>& one,
                     const std::vector<FmaPeak>& peaks) {
  std::cout << fmt::format(
      "{:<12} {:<8} {:<8} {:>10.3f} {:>10.3f} {:>9.1f} {:>6.0f}% {:>5.0f}% {:>7.0f} MiB", r.shape,
      r.variant, r.dtype, r.ms_median, r.ms_min, r.gflops, 100 * r.sgemm_fraction,
      100 * peak_fraction(r, peaks), r.peak_rss_bytes / 1048576.0);
  if (one)
    std::cout << fmt::format(" {:>11.3f} {:>5.2f}x {:>10.3f}", one->compute_ms,
                             one->compute_ms / r.ms_median, one->wall_ms);
  std::cout << std::endl;
}

int do_bench(const BenchArgs& args) {
  const BenchPlan plan = bench_plan(args);
  const auto& shapes = plan.shapes;
  const std::vector<bool> bf16s = parse_bench_dtypes(args.dtypes);
  const bool any_bf16 = std::find(bf16s.begin(), bf16s.end(), true) != bf16s.end();
  const int threads = resolve_threads(args.threads);
  const double sgemm = sgemm_gflops(threads, 5);
  const double bf16_gemm = any_bf16 ? bf16_gemm_gflops(threads, 5) : 0.0;
  const std::vector<FmaPeak> peaks = fma_peaks(threads);
  nlohmann::json results = nlohmann::json::array();
  if (!args.json)
    print_bench_header(args, threads, sgemm, any_bf16 ? std::optional(bf16_gemm) : std::nullopt,
                       peaks);
  std::vector<std::tuple<std::string, std::string, bool>> runs;  // each case in each dtype
  for (const auto& [name, variant] : plan.cases)
    for (const bool bf16 : bf16s) runs.emplace_back(name, variant, bf16);
  for (const auto& [name, variant, bf16] : runs) {
    const std::string& wanted = name;  // a lambda cannot capture a structured binding in C++17
    const BenchShape& shape = *std::find_if(shapes.begin(), shapes.end(),
                                            [&](const auto& s) { return s.name == wanted; });
    const BenchResult r =
        bench_case(shape, variant, threads, args.repeat, sgemm, args.block_q, args.block_k, bf16);
    std::optional<OneShot> one;
    if (args.one_shot) {
      nlohmann::json config = one_shot_config(
          shape, variant, threads, name == "config" ? plan.base_config : nlohmann::json());
      if (bf16) config["dtype"] = "bfloat16";
      one = time_one_shot(std::filesystem::read_symlink("/proc/self/exe").string(), config,
                          args.repeat);
    }
    results.push_back(bench_result_json(r, one, peaks));
    if (!args.json) print_bench_row(r, one, peaks);
  }
  if (args.json) {
    nlohmann::json fma_json = nlohmann::json::object();
    for (const FmaPeak& p : peaks) fma_json[p.isa] = p.gflops;
    nlohmann::json out = {{"tool", "mha"},
                          {"version", MHA_VERSION},
                          {"threads", threads},
                          {"repeat", args.repeat},
                          {"sgemm_gflops", sgemm},
                          {"fma_peak_gflops", fma_json},
                          {"results", results},
                          {"blas", to_json(blas_load())},
                          {"kernels", to_json(KernelReport{direct_gemm_isa(), vexp_isa()})}};
    if (any_bf16) {
      out["bf16_gemm_gflops"] = bf16_gemm;
      out["bf16_gemm_backend"] = bf16_gemm_backend();
    }
    std::cout << dump_json(out, 2) << std::endl;
  }
  return 0;
}

WeightsFormat layout(const std::string& name) {
  if (name == "native") return WeightsFormat::native;
  if (name == "torch") return WeightsFormat::torch;
  if (name == "keras") return WeightsFormat::keras;
  return WeightsFormat::auto_detect;
}

int do_convert(const ConvertArgs& args) {
  std::optional<std::size_t> h;
  if (args.h) h = args.h;
  WeightsFormat from = convert_weights_file(args.in, layout(args.from), layout(args.to), h,
                                            args.out, args.keras_layer);
  spdlog::info("wrote {} ({} layout, read {} as {})", args.out, args.to, args.in, to_string(from));
  return 0;
}

int do_compare(const CompareArgs& args) {
  const Comparison c = compare(read_npy(args.a), read_npy(args.b), args.tolerance, args.a, args.b);
  if (!c.same_shape)  // numpy.allclose would broadcast; equal shapes are what a check means
    throw Error(ErrorKind::invalid_input,
                args.a + " and " + args.b + " cannot be compared: shapes " +
                    shape_str(read_npy(args.a).shape) + " vs " + shape_str(read_npy(args.b).shape) +
                    " (expected equal shapes)");
  std::cout << fmt::format("{} vs {}: {} elements, {} outside rtol={:g} atol={:g}{}\n", args.a,
                           args.b, c.count, c.mismatches, args.tolerance.rtol, args.tolerance.atol,
                           args.tolerance.equal_nan ? " equal_nan" : "");
  std::cout << fmt::format("max abs diff {:.6g}, max rel diff {:.6g}\n", c.max_abs_diff,
                           c.max_rel_diff);
  if (!c.worst_index.empty())
    std::cout << fmt::format("worst index {}: {:.9g} vs {:.9g}\n", shape_str(c.worst_index),
                             c.worst_a, c.worst_b);
  const std::uint64_t nan_pairs = (c.nan_a + c.nan_b - c.nan_mismatches) / 2;
  std::cout << fmt::format(
      "NaN: {} in A, {} in B, {} at different positions{}\n", c.nan_a, c.nan_b, c.nan_mismatches,
      nan_pairs && !args.tolerance.equal_nan ? " (NaN is not close to NaN without --equal_nan)"
                                             : "");
  std::cout << "allclose: " << (c.close ? "yes" : "no") << std::endl;
  return c.close ? 0 : 1;
}

// `file`: the --config file's JSON, read once (it may be a pipe).
Config build_config(const RunArgs& args, const nlohmann::json& file) {
  Config config;
  if (!args.config_file.empty()) config.apply(file, args.config_file);
  for (const auto& [name, opt] : args.keys) {
    if (opt->count() == 0) continue;
    std::string text = opt->results().empty() ? std::string() : opt->results().front();
    // A bare bool flag (`--save_attention`) means true; other keys need a value.
    const std::string& key = name;  // a lambda cannot capture a structured binding in C++17
    const bool is_bool =
        std::any_of(config_keys().begin(), config_keys().end(),
                    [&](const ConfigKey& k) { return k.is_bool && key == k.name; });
    if (is_bool && (opt->results().empty() || text.empty())) text = "true";
    if (opt->results().empty() && !is_bool)
      throw Error(ErrorKind::invalid_input, "--" + name + ": expected a value");
    config.apply_flag(name, text);
  }
  return config;
}

void setup_logging(int verbosity) {
  spdlog::drop("mha");  // a sweep worker sets up logging once per run
  auto logger = spdlog::stderr_logger_st("mha");
  logger->set_pattern("mha: %l: %v");
  logger->set_level(verbosity > 0   ? spdlog::level::debug
                    : verbosity < 0 ? spdlog::level::err
                                    : spdlog::level::info);
  spdlog::set_default_logger(logger);
}

// `mha run --config FILE` where FILE holds a model job (run/model_job.hpp):
// the file gives the run; of the flags, only --out_dir, --threads and
// --max_memory (which do not change results) and --json are taken.
int do_model_job_run(const RunArgs& args, nlohmann::json file) {
  std::string flags;
  for (const auto& [name, opt] : args.keys) {
    if (!opt->count()) continue;
    if (name != "out_dir" && name != "threads" && name != "max_memory") {
      flags += (flags.empty() ? "--" : ", --") + name;
      continue;
    }
    // Checked as the flag (its message names --name), then given to the file's key.
    const ModelRunKey& key = *find_model_run_key(name);
    const nlohmann::json value = model_flag_value(key, opt->results());
    ModelRunConfig checked;
    key.set(checked, value, "--" + name);
    file[name] = value;
  }
  for (const std::string& name : args.model.given_names())
    flags += (flags.empty() ? "" : ", ") + name;
  if (args.html) flags += flags.empty() ? "--html" : ", --html";
  if (!flags.empty())
    throw Error(ErrorKind::invalid_input,
                args.config_file +
                    ": holds a model run (\"model\"), which gives its options; expected no other "
                    "flag than --out_dir, --threads, --max_memory and --json (got " +
                    flags + ")");
  const ModelJob job = model_job_from_json(file, args.config_file);
  if (std::holds_alternative<AnalyzeConfig>(job))
    throw Error(ErrorKind::invalid_input,
                args.config_file +
                    ": holds an analysis (\"method\"); run it with `mha analyze "
                    "--config " +
                    args.config_file + "`");
  use_one_run_heap();
  return run_model_job(std::get<ModelRunConfig>(job), args.print_json);
}

// A model run's out_dir: --out_dir's value (checked by the run), else the default.
std::string out_dir_flag(const RunArgs& args) {
  const CLI::Option* opt = args.keys.at("out_dir");
  return opt->count() && !opt->results().empty() ? opt->results().back() : ModelRunConfig().out_dir;
}

// --html: the same page `mha view OUT_DIR` writes, from the files just committed.
void write_view_page(const std::string& out_dir) {
  ViewArgs view;
  view.path = out_dir;
  try {
    write_attention_view(view, (std::filesystem::path(out_dir) / "view.html").string());
  } catch (const Error& e) {
    throw Error(e.kind(),
                std::string("the run's outputs are written, view.html is not: ") + e.what());
  }
}

int do_run(const RunArgs& args) {
  nlohmann::json file;
  if (!args.config_file.empty()) {
    file = read_config_file(args.config_file);  // once: it may be a pipe
    if (file.is_object() && file.contains("model")) return do_model_job_run(args, file);
    std::vector<std::string> flags;
    for (const auto& [name, opt] : args.keys)
      if (opt->count()) flags.push_back(name);
    check_config_paths(file, args.config_file, flags);
  }
  // Any option of the model runs' table (model_options.hpp) makes a model run.
  if (!args.model.given_names().empty()) {
    // A model run frees each layer's buffers and allocates the next layer's of the same
    // sizes: malloc keeps them, so every layer after the first reuses memory already touched,
    // and the first layer's memory comes in huge pages.
    use_one_run_heap();
    if (!args.config_file.empty() && args.model.given("model"))
      throw Error(ErrorKind::invalid_input,
                  "--config: not used with --model (a config file holding \"model\" gives a "
                  "model run's options: docs/models.md)");
    const int code = do_model_run(args.model, args.keys, args.html, args.print_json);
    if (code == 0 && args.html) write_view_page(out_dir_flag(args));
    return code;
  }
  Config config = build_config(args, file);
  // One run per process: its memory is all touched for the first time, so
  // large arrays get huge pages (large_array.hpp).
  set_huge_page_arrays(true);
  if (args.html) config.save_attention = true;
  spdlog::debug("config: {}", dump_json(config.to_json()));
  StageProgress progress;
  RunProgressLine line(progress, ::isatty(STDERR_FILENO) == 1 &&
                                     spdlog::default_logger()->should_log(spdlog::level::info));
  RunResult result = mha::run(
      config,
      [&line](const std::string& w) {
        line.clear_for_message();
        spdlog::warn("{}", w);
      },
      &progress);
  line.stop();
  const RunReport& r = result.report;
  for (const auto& path : result.files) spdlog::info("wrote {}", path);
  const auto png = r.outputs.find("attention.png");
  if (png != r.outputs.end() && png->second.plot) {
    const PlotFile& p = *png->second.plot;
    if (p.downsample > 1)
      spdlog::info("attention.png: batch 0 downsampled {}x{} to {}x{} cells by block {}", r.dims.T,
                   r.dims.S, p.cells[0], p.cells[1], p.reduce);
  }
  if (r.stack)
    spdlog::info(
        "{}-layer {}, B={} T={} h={} d_model={} d_ff={}: {:.3f} ms compute, {:.2f} GFLOP/s",
        r.stack->num_layers, to_string(r.stack->kind), r.dims.B, r.dims.T, r.dims.h, r.dims.d_model,
        r.stack->d_ff, r.timings.compute_ms, r.gflops_per_s);
  else
    spdlog::info(
        "{} attention, B={} T={} S={} h={} d_k={} d_v={}: {:.3f} ms compute, {:.2f} GFLOP/s",
        r.dims.key_is_query ? "self" : "cross", r.dims.B, r.dims.T, r.dims.S, r.dims.h, r.dims.d_k,
        r.dims.d_v, r.timings.compute_ms, r.gflops_per_s);
  if (const auto& t = r.timings.compute_repeat)
    spdlog::info(
        "compute repeated {} times after a warm call: median {:.3f} ms (min {:.3f}, max "
        "{:.3f})",
        t->samples.size(), t->median, t->min, t->max);
  if (args.html) write_view_page(config.out_dir);
  if (args.print_json) std::cout << dump_json(to_json(r), 2) << std::endl;
  return 0;
}

// CLI11 lists unexpected arguments; name the first and suggest a key. `args`
// are already normalized (underscores), `known` every long option name.
std::string explain_extras(const CLI::ExtrasError& e, const std::vector<std::string>& args,
                           const std::set<std::string>& known) {
  for (const auto& a : args) {
    if (a.rfind("--", 0) != 0) continue;
    std::string name =
        a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
    if (known.count(name)) continue;
    std::string hint = nearest_key(name);
    return "unknown option " + a + (hint.empty() ? "" : " (did you mean --" + hint + "?)");
  }
  // A second value after an option that takes one per use (--text a b): say how to give a batch.
  std::set<std::string> one_each;
  for (const ModelRunKey& key : model_run_keys())
    if (key.value == FlagValue::texts) one_each.insert(std::string("--") + key.name);
  for (std::size_t i = 0; i + 2 < args.size(); ++i) {
    if (!one_each.count(args[i]) || args[i + 2].rfind("-", 0) == 0) continue;
    return args[i] + " takes one value, got " + echo(args[i + 1]) + " then " + echo(args[i + 2]) +
           "; repeat " + args[i] + " for each element of a batch (quote a value with spaces)";
  }
  // A stray value: usually the option before it took no value, or one too many.
  return std::string(e.what()) + " (is an option before it missing its value?)";
}

}  // namespace

int main(const std::vector<std::string>& argv) {
  // `run` and `bench` compute: OpenBLAS loads on a background thread while
  // the arguments, config and inputs are read (blas_preload).
  if (!argv.empty() && (argv[0] == "run" || argv[0] == "bench" || argv[0] == "analyze"))
    blas_preload();
  if (argv.size() == 1 && argv[0] == "sweep-worker") return do_sweep_worker();
  remove_temporaries_on_signal();
  CLI::App app{"mha: multi-head attention on the CPU", "mha"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("mha ") + MHA_VERSION);
  int verbose = 0, quiet = 0;
  app.add_flag("-v,--verbose", verbose, "Log debug messages");
  app.add_flag("-q,--quiet", quiet, "Log errors only");
  RunArgs run_args;
  add_run_command(app, run_args);
  ConvertArgs convert_args;
  add_weights_command(app, convert_args);
  CompareArgs compare_args;
  add_compare_command(app, compare_args);
  BenchArgs bench_args;
  add_bench_command(app, bench_args);
  SweepArgs sweep_args;
  add_sweep_command(app, sweep_args);
  InspectArgs inspect_args;
  add_inspect_command(app, inspect_args);
  PlotArgs plot_args;
  add_plot_command(app, plot_args);
  ViewArgs view_args;
  add_view_command(app, view_args);
  TokenizeArgs tokenize_args;
  add_tokenize_command(app, tokenize_args);
  AnalyzeArgs analyze_args;
  add_analyze_command(app, analyze_args);

  const std::set<std::string> known = long_option_names(app);
  std::vector<std::string> args = argv;
  const std::vector<std::string> deprecations = normalize_option_names(args, known);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << std::endl;
    return 0;
  } catch (const CLI::ExtrasError& e) {
    std::cerr << "mha: error: " << explain_extras(e, args, known) << std::endl;
    return kExitInvalid;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // CLI11 words a repeated option as a count; say what happened.
    const auto repeated = what.find(": At Most 1 required but received");
    if (repeated != std::string::npos) what = what.substr(0, repeated) + ": given more than once";
    std::cerr << "mha: error: " << what << " (see mha --help)" << std::endl;
    return kExitInvalid;
  }
  setup_logging(verbose - quiet);
  for (const auto& w : deprecations) spdlog::warn("{}", w);

  try {
    if (app.got_subcommand("run")) return do_run(run_args);
    if (app.got_subcommand("weights")) return do_convert(convert_args);
    if (app.got_subcommand("compare")) return do_compare(compare_args);
    if (app.got_subcommand("bench")) return do_bench(bench_args);
    if (app.got_subcommand("sweep")) return do_sweep(sweep_args);
    if (app.got_subcommand("inspect")) return do_inspect(inspect_args);
    if (app.got_subcommand("plot")) return do_plot(plot_args);
    if (app.got_subcommand("view")) return do_view(view_args);
    if (app.got_subcommand("tokenize")) return do_tokenize(tokenize_args);
    if (app.got_subcommand("analyze")) return do_analyze(analyze_args);
  } catch (const Error& e) {
    spdlog::error("{}", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    // run and sweep estimate their memory first (max_memory); what is left is the input files.
    spdlog::error(app.got_subcommand("run") || app.got_subcommand("sweep")
                      ? "out of memory (the estimate before the run fitted max_memory; try a "
                        "smaller batch or seq_len, or a lower max_memory to refuse such runs)"
                      : "out of memory reading the input files");
    return kExitFailure;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kExitFailure;
  }
  return kExitFailure;
}

}  // namespace mha::cli
