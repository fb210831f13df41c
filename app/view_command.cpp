#include "view_command.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

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

// A headless Chromium to render a page with: $MHA_CHROMIUM, else the first of
// the usual names on PATH; empty when there is none.
std::string find_chromium() {
  if (const char* env = std::getenv("MHA_CHROMIUM"); env && *env)
    return ::access(env, X_OK) == 0 ? env : "";
  const char* path = std::getenv("PATH");
  if (!path) return {};
  for (const char* name :
       {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      if (dir.empty()) continue;
      const std::string exe = (fs::path(dir) / name).string();
      if (::access(exe.c_str(), X_OK) == 0) return exe;
    }
  }
  return {};
}

// The page at `html` as Chromium draws it, `width` x `height` CSS pixels, as
// PNG bytes. --virtual-time-budget lets the page's asynchronous start (it
// inflates its data with DecompressionStream) finish before the capture: a
// plain --screenshot is often taken of the page before it has drawn.
std::string render_page_png(const std::string& chromium, const std::string& html, int width,
                            int height) {
  char tmpl[] = "/tmp/mha_view_png_XXXXXX";
  if (!::mkdtemp(tmpl))
    fail_runtime(std::string("--png: cannot make a temporary directory: ") + std::strerror(errno));
  const fs::path tmp(tmpl);
  const std::string shot = (tmp / "page.png").string();
  std::vector<std::string> args = {
      chromium,
      "--headless",
      "--disable-gpu",
      "--hide-scrollbars",
      "--no-first-run",
      "--user-data-dir=" + (tmp / "profile").string(),
      "--window-size=" + std::to_string(width) + "," + std::to_string(height),
      "--virtual-time-budget=30000",
      "--screenshot=" + shot,
      "file://" + fs::absolute(html).string()};
  if (::geteuid() == 0) args.insert(args.begin() + 1, "--no-sandbox");  // refused as root without
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, chromium.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  std::error_code ec;
  if (err != 0) {
    fs::remove_all(tmp, ec);
    fail_runtime("--png: cannot start " + chromium + ": " + std::strerror(err));
  }
  // At most a minute: a browser that hangs is stopped, not waited for.
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      fs::remove_all(tmp, ec);
      fail_runtime("--png: " + chromium + " did not finish the screenshot within 60 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ifstream in(shot, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  fs::remove_all(tmp, ec);
  if (bytes.str().size() < 8 || bytes.str().compare(0, 4, "\x89PNG") != 0)
    fail_runtime("--png: " + chromium + " wrote no screenshot of " + html + " (exit " +
                 (WIFEXITED(status) ? std::to_string(WEXITSTATUS(status)) : "by a signal") + ")");
  return bytes.str();
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
                   "- for none); attention pages: the page as headless Chromium draws it");
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
       {"mean", !args.mean.empty()}},
      args.path + " is not a sweep directory (no results.jsonl): ", " are for sweep reports");
  // --png FILE: the page's first view through headless Chromium, found before
  // anything is written.
  std::string chromium;
  if (!args.png.empty() && args.png != "-") {
    chromium = find_chromium();
    if (chromium.empty())
      fail_input("--png " + args.png +
                 ": no Chromium to draw the page with (chromium, chromium-browser or "
                 "google-chrome on PATH, or MHA_CHROMIUM); expected one installed, or leave "
                 "--png out");
  }
  std::string html = args.output;
  if (html.empty()) {
    if (fs::is_directory(args.path, ec))
      html = (fs::path(args.path) / "view.html").string();
    else
      html = fs::path(args.path).replace_extension(".html").string();
  }
  write_attention_view(args, html);
  if (!chromium.empty()) {
    write_file(args.png, render_page_png(chromium, html, 1400, 1000));
    spdlog::info("wrote {} (the page as {} draws it)", args.png, chromium);
  }
  return 0;
}

}  // namespace mha::cli
