#include "view_command.hpp"

#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "mha/base/error.hpp"
#include "mha/draw/png.hpp"
#include "mha/io/output_set.hpp"
#include "mha/run/view_run.hpp"
#include "mha/view/attention_view.hpp"
#include "mha/view/sweep_view.hpp"
#include "option_names.hpp"

namespace mha::cli {
namespace {

namespace fs = std::filesystem;

// Writes `bytes` to `path` all-or-nothing (a temporary beside it, renamed).
void write_file(const std::string& path, const std::string& bytes) {
  const fs::path p(path);
  if (p.filename().empty() || p.filename() == "." || p.filename() == "..")
    fail_input(path + ": expected a file name to write");
  OutputSet out(p.parent_path().empty() ? "." : p.parent_path().string());
  out.stage_bytes(p.filename().string(), bytes);
  out.commit();
}

bool is_sweep_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "results.jsonl", ec);
}

}  // namespace

void add_view_command(CLI::App& app, ViewArgs& args) {
  CLI::App* view = app.add_subcommand(
      "view", "Write an interactive HTML page: a run's attention maps, or a sweep's charts");
  view->fallthrough();
  view->footer(
      "Examples (after the Quickstart's run and `mha sweep configs/sweeps/heads_vs_length.json`):\n"
      "  mha view out/default --labels data/tokens5.txt -o out/default/tokens.html\n"
      "  mha view out/sweeps/heads_vs_length --y attention_entropy --x seq_len --group h\n"
      "The page is one self-contained file: open it in any browser, offline.");
  view->add_option("path", args.path,
                   "a run's out_dir, an attention .npy (B, h, T, S), or a sweep's out_dir")
      ->required();
  view->add_option("-o,--output", args.output,
                   "HTML file to write (default: view.html in the run directory, FILE.html "
                   "beside a .npy, report.html in a sweep directory)");
  view->add_option("--labels", args.labels, "query token labels, one per line (T of them)");
  view->add_option("--key_labels", args.key_labels,
                   "key token labels, one per line (S of them; default: --labels when S = T)");
  view->add_option("--batch_index", args.batch_index,
                   "keep one batch element (pages hold at most 8 Mi weights)");
  view->add_option("--y", args.y, "sweeps: the results column to chart (default compute_ms)");
  view->add_option("--x", args.x, "sweeps: the swept key along x (default: the first numeric one)");
  view->add_option("--group", args.group,
                   "sweeps: one line per value of this swept key (default: the next one; none)");
  view->add_option("--mean", args.mean,
                   "sweeps: average the runs that differ only in this swept key (default: none, "
                   "each is its own line)");
  view->add_option("--png", args.png,
                   "sweeps: the chart as a PNG too (default report.png beside the HTML; "
                   "- for none)");
}

void write_attention_view(const ViewArgs& args, const std::string& html) {
  ViewOptions options;
  options.labels = args.labels;
  options.key_labels = args.key_labels;
  options.batch_index = args.batch_index;
  const std::string page = run_attention_page(args.path, options);
  write_file(html, page);
  spdlog::info("wrote {} ({:.1f} MB)", html, static_cast<double>(page.size()) / 1e6);
}

void write_sweep_report(const std::string& dir, const ViewArgs& args, const std::string& html,
                        const std::string& png) {
  const SweepView view = read_sweep_view(dir);
  const ChartChoice choice = choose_chart(view, {args.y, args.x, args.group, args.mean});
  const std::string page = sweep_page(view, choice);
  std::string png_bytes;
  if (!png.empty()) {
    const RenderedChart chart = render_line_chart(sweep_chart(view, choice));
    std::ostringstream os;
    write_png(os, chart.image, png);
    png_bytes = os.str();
  }
  write_file(html, page);
  spdlog::info("wrote {} ({} runs; {} against {}{})", html, view.rows.size(), choice.y, choice.x,
               choice.group.empty() ? "" : " for each " + choice.group);
  if (!png.empty()) {
    write_file(png, png_bytes);
    spdlog::info("wrote {}", png);
  }
}

int do_view(const ViewArgs& args) {
  std::error_code ec;
  if (is_sweep_dir(args.path)) {
    refuse_options(
        {{"labels", !args.labels.empty()},
         {"key_labels", !args.key_labels.empty()},
         {"batch_index", args.batch_index.has_value()}},
        args.path + " is a sweep directory (results.jsonl): ", " are for attention maps");
    const std::string html =
        args.output.empty() ? (fs::path(args.path) / "report.html").string() : args.output;
    std::string png = args.png;
    if (png.empty()) png = (fs::path(html).parent_path() / "report.png").string();
    if (png == "-") png.clear();
    write_sweep_report(args.path, args, html, png);
    return 0;
  }
  refuse_options(
      {{"y", !args.y.empty()},
       {"x", !args.x.empty()},
       {"group", !args.group.empty()},
       {"mean", !args.mean.empty()},
       {"png", !args.png.empty()}},
      args.path + " is not a sweep directory (no results.jsonl): ", " are for sweep reports");
  std::string html = args.output;
  if (html.empty()) {
    if (fs::is_directory(args.path, ec))
      html = (fs::path(args.path) / "view.html").string();
    else
      html = fs::path(args.path).replace_extension(".html").string();
  }
  write_attention_view(args, html);
  return 0;
}

}  // namespace mha::cli
