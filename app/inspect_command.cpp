#include "inspect_command.hpp"

#include <cmath>
#include <filesystem>
#include <iostream>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "mha/base/error.hpp"
#include "mha/inspect/inspect.hpp"
#include "mha/io/out_dir.hpp"
#include "mha/io/stream_input.hpp"
#include "mha/run/run_json.hpp"

namespace mha::cli {
namespace {

// A statistic for the text report; "-" where there is none (NaN, null).
std::string num(double x, const char* format = "{:.6g}") {
  return std::isnan(x) ? "-" : fmt::format(fmt::runtime(format), x);
}
std::string num(const nlohmann::json& v) {
  if (v.is_number_float()) return num(v.get<double>());
  return v.is_null() ? "-" : v.dump();  // integers exactly
}

std::string describe_header(const NpyHeaderInfo& h) {
  const char* order = itemsize(h.dtype) == 1 ? "no byte order"
                      : h.big_endian         ? "big-endian"
                                             : "little-endian";
  return fmt::format(".npy {}.{}, '{}': {}, {}, {} order; data at byte {} ({} bytes)", h.major,
                     h.minor, h.descr, dtype_name(h.dtype), order,
                     h.fortran_order ? "Fortran" : "C", h.header_bytes, h.data_bytes);
}

std::string describe_detection(const std::string& by, const std::string& file) {
  if (by == "name") return "named " + std::filesystem::path(file).filename().string();
  if (by == "forced") return "--attention";
  return "detected: every row is a distribution or fully masked";
}

void print_report(const InspectResult& r) {
  const TensorStats& s = r.stats;
  std::cout << r.file << "\n"
            << "  header      " << describe_header(r.header) << "\n"
            << fmt::format("  shape       {}, {} elements\n", shape_str(r.header.shape), s.count)
            << fmt::format("  values      min {}, max {}, mean {}, std {} (of {} finite, ddof 0)\n",
                           num(s.min), num(s.max), num(s.mean), num(s.std), s.finite)
            << fmt::format("  non-finite  {} NaN, {} +Inf, {} -Inf; {} zeros\n", s.nan, s.posinf,
                           s.neginf, s.zeros);
  if (!r.attention) {
    std::cout << "  attention   no\n";
    return;
  }
  const AttentionInfo& a = *r.attention;
  const AttentionStats& st = *a.stats;
  std::cout << fmt::format("  attention   {} = {}, {} ({})\n", a.layout, shape_str(r.header.shape),
                           a.heads_axis ? std::to_string(st.heads()) + " heads" : "one head, all",
                           describe_detection(a.detected_by, r.file))
            << fmt::format("  rows        {} distributions, {} fully masked, {} other{}\n\n",
                           a.distribution_rows, a.masked_rows, a.other_rows,
                           a.batch_axis ? fmt::format("; {} rows of padding left out, and padded "
                                                      "keys (tokens.json's lengths)",
                                                      a.padded_rows)
                                        : std::string());
  const auto line = [](const std::string& label, const HeadStats& h) {
    const char* f = "{:.4f}";
    return fmt::format("  {:<5} {:>14} {:>14} {:>11} {:>10} {:>9} {:>10} {:>7}  {}\n", label,
                       num(h.entropy, f), num(h.entropy_fraction, f), num(h.max_weight, f),
                       num(h.distance, f), num(h.diagonal, f), num(h.first_key, f),
                       h.rows ? (h.causal ? "yes" : "no") : "-", h.rows);
  };
  std::cout << fmt::format("  {:<5} {:>14} {:>14} {:>11} {:>10} {:>9} {:>10} {:>7}  {}\n", "head",
                           "entropy (nats)", "entropy/log S", "max weight", "distance", "diagonal",
                           "first key", "causal", "rows");
  for (std::size_t i = 0; i < st.heads(); ++i)
    std::cout << line(a.heads_axis ? std::to_string(i) : "all", st.head(i));
  if (st.heads() > 1) std::cout << line("mean", st.mean());
}

// The files to inspect: a run's out_dir stands for the .npy and .npz outputs
// its run.json lists; each file of a run is checked against its run.json.
std::vector<std::string> run_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
      if (!is_stream_input(path)) check_run_output(path);
      files.push_back(path);
      continue;
    }
    const auto listed = listed_outputs(path);
    if (!listed)
      fail_input(path +
                 ": a directory without run.json; expected .npy or .npz files, or a "
                 "run's out_dir");
    std::size_t found = 0;
    for (const auto& [name, _] : *listed) {
      const std::string ext = std::filesystem::path(name).extension().string();
      if (ext != ".npy" && ext != ".npz") continue;
      const std::string file = (std::filesystem::path(path) / name).string();
      check_run_output(file);
      files.push_back(file);
      ++found;
    }
    if (!found) fail_input(path + "/run.json lists no .npy or .npz output to inspect");
  }
  return files;
}

// A model run's padded batch: the real queries and keys of each row of `file`'s maps, from
// the tokens.json beside it (an encoder-decoder's target on decoder_ and cross_ queries and
// decoder_ keys, its source elsewhere); none for other files.
void padded_lengths(const std::string& file, InspectOptions& options) {
  namespace fs = std::filesystem;
  options.query_lengths.clear();
  options.key_lengths.clear();
  std::error_code ec;
  if (is_stream_input(file) || fs::path(file).extension() != ".npy") return;
  const fs::path dir = fs::path(file).parent_path();
  const std::string run_json = (dir / "run.json").string();
  if (!fs::is_regular_file(run_json, ec) || !fs::is_regular_file(dir / "tokens.json", ec)) return;
  const std::optional<ModelRunView> run = read_model_run_view(run_json);
  if (!run) return;
  const std::string name = fs::path(file).stem().string();
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  const bool target_queries = starts("decoder_") || starts("cross_"),
             target_keys = starts("decoder_");
  options.query_lengths = target_queries ? run->target_lengths : run->lengths;
  options.key_lengths = target_keys ? run->target_lengths : run->lengths;
}

}  // namespace

void add_inspect_command(CLI::App& app, InspectArgs& args) {
  CLI::App* inspect = app.add_subcommand(
      "inspect", "Print the header and statistics of .npy/.npz arrays, per head for attention");
  inspect->fallthrough();
  inspect->footer(
      "Examples (after `mha run --config configs/default.json`):\n"
      "  mha inspect out/default/attention.npy\n"
      "  mha inspect data/tokens.npy out/default/output.npy --json");
  inspect->add_option("files", args.files, ".npy or .npz files, or a run's out_dir")->required();
  inspect->add_flag("--json", args.json, "print JSON (one object, or an array for several)");
  CLI::Option* on =
      inspect->add_flag("--attention", args.attention,
                        "treat every float array of rank >= 2 as attention (..., T, S)");
  CLI::Option* off =
      inspect->add_flag("--no_attention", args.no_attention, "never treat arrays as attention");
  on->excludes(off);
  inspect->add_option_function<long>(
      "--head_axis", [&args](const long& axis) { args.heads_axis = axis; },
      "axis of attention arrays that holds heads (default: 1 for (B, h, T, S), else none)");
}

int do_inspect(const InspectArgs& args) {
  InspectOptions options;
  options.attention = args.attention      ? InspectOptions::Attention::on
                      : args.no_attention ? InspectOptions::Attention::off
                                          : InspectOptions::Attention::detect;
  options.heads_axis = args.heads_axis;
  const auto warn = [](const std::string& w) { spdlog::warn("{}", w); };
  // JSON is printed once everything was read, so a bad file leaves stdout
  // empty; the text reports go out file by file, as long files take a while.
  nlohmann::json all = nlohmann::json::array();
  bool first = true;
  for (const auto& path : run_files(args.files)) {
    padded_lengths(path, options);
    for (const InspectResult& r : inspect_file(path, options, warn)) {
      if (args.json) {
        all.push_back(r.to_json());
        continue;
      }
      if (!first) std::cout << "\n";
      first = false;
      print_report(r);
      std::cout << std::flush;
    }
  }
  if (!args.json) return 0;
  // Top-level keys in the documented order; nested objects keep nlohmann's sorted keys.
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& j : all) {
    nlohmann::ordered_json o;
    for (const char* key : {"file", "header", "stats", "attention"})
      if (j.contains(key)) o[key] = j[key];
    out.push_back(std::move(o));
  }
  std::cout << (out.size() == 1 ? out[0] : out).dump(2) << std::endl;
  return 0;
}

}  // namespace mha::cli
