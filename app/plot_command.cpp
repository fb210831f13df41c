#include "plot_command.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "mha/base/error.hpp"
#include "mha/draw/heatmap.hpp"
#include "mha/draw/png.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/npy_reader.hpp"
#include "mha/io/out_dir.hpp"
#include "mha/io/output_set.hpp"
#include "mha/io/stream_input.hpp"
#include "mha/run/run_json.hpp"

namespace mha::cli {
namespace {

namespace fs = std::filesystem;

// "all", or comma-separated indices below h, each once.
std::vector<std::size_t> parse_heads(const std::string& text, std::size_t h, bool has_heads,
                                     const std::string& file, const std::string& shape) {
  std::vector<std::size_t> heads;
  if (text == "all") {
    for (std::size_t i = 0; i < h; ++i) heads.push_back(i);
    return heads;
  }
  if (!has_heads)
    fail_input("--head_indices " + text + ": " + file + " has no heads axis (shape " + shape +
               "); expected a (B, h, T, S) array");
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item.size() > 9 ||
        item.find_first_not_of("0123456789") != std::string::npos)
      fail_input("--head_indices '" + text +
                 "': expected all or comma-separated head indices such as 0,3,5");
    const std::size_t i = std::stoul(item);
    if (i >= h)
      fail_input("--head_indices " + text + ": head " + item + " is out of range; " + file +
                 " has h = " + std::to_string(h) + " heads (shape " + shape + "), indices 0 to " +
                 std::to_string(h - 1));
    if (std::find(heads.begin(), heads.end(), i) != heads.end())
      fail_input("--head_indices " + text + ": head " + item + " is listed twice");
    heads.push_back(i);
  }
  if (heads.empty() || text.back() == ',')
    fail_input("--head_indices '" + text +
               "': expected all or comma-separated head indices such as 0,3,5");
  return heads;
}

}  // namespace

void add_plot_command(CLI::App& app, PlotArgs& args) {
  CLI::App* plot = app.add_subcommand(
      "plot", "Draw the attention maps of a .npy file as a PNG: one heatmap per head");
  plot->fallthrough();
  plot->footer(
      "Examples (after `mha run --config configs/default.json`):\n"
      "  mha plot out/default/attention.npy --batch_index 1 --head_indices 0,1 -o out/heads.png\n"
      "  mha plot out/default/attention.npy --average_heads --color_scale log -o out/mean.png\n"
      "  mha plot out/default/attention.npy --color_range per_head -o out/per_head.png\n"
      "  mha plot out/default/attention.npy --vmin 0 --vmax 0.5 -o out/fixed.png");
  plot->add_option("file", args.file,
                   "attention .npy: (B, h, T, S), (B, T, S) or (T, S); or a run's out_dir")
      ->required();
  plot->add_option("-o,--output", args.output, "PNG to write (default: FILE with .png)");
  plot->add_option("--layer_index", args.layer,
                   "layer to plot from a Transformer stack's (layers, B, h, T, S) maps");
  plot->add_option("--batch_index", args.batch, "batch element to plot (default 0)");
  plot->add_option("--head_indices", args.heads,
                   "heads to plot: all (default) or a list such as 0,3,5");
  plot->add_flag("--average_heads", args.average, "one panel: the mean over the (selected) heads");
  plot->add_option("--color_scale", args.scale, "color scale: linear (default, from 0) or log")
      ->check(CLI::IsMember({"linear", "log"}));
  plot->add_option("--color_range", args.color_range,
                   "color range: shared (default, one for all panels) or per_head (each panel "
                   "its own, shown under its title)")
      ->check(CLI::IsMember({"shared", "per_head"}));
  plot->add_option("--vmin", args.vmin,
                   "fixed bottom of the color range (lower values take its color; default: "
                   "0 or the smallest value, log: the smallest positive value)");
  plot->add_option("--vmax", args.vmax,
                   "fixed top of the color range (higher values take its color; default: the "
                   "largest value)");
  plot->add_option("--labels", args.labels,
                   "token labels, one per line: T of them (and the keys' too when S = T)");
  plot->add_option("--key_labels", args.key_labels, "key token labels, one per line: S of them");
  plot->add_option("--cell", args.cell, "pixels per cell side (default: from the map's size)")
      ->check(CLI::Range(1, 64));
  plot->add_option("--reduce", args.reduce,
                   "how large maps are downsampled: block max (default) or mean")
      ->check(CLI::IsMember({"max", "mean"}));
  plot->add_option("--max_cells", args.max_cells,
                   "cells per panel side at most before downsampling (default 512)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{8192}));
}

// The element where layer `l` of a (layers, ...) array begins (self_attention.npy
// of Transformer layers), and the shape of one layer's maps.
std::uint64_t layer_offset(const NpyHeaderInfo& h, std::size_t l, const std::string& file,
                           std::vector<std::size_t>& shape) {
  if (h.shape.size() < 3)
    fail_input("--layer_index: " + file + " has shape " + shape_str(h.shape) +
               "; expected a layer axis first, (layers, B, h, T, S) or (layers, B, T, S)");
  if (l >= h.shape[0])
    fail_input("--layer_index " + std::to_string(l) + ": " + file + " holds " +
               std::to_string(h.shape[0]) + " layers (shape " + shape_str(h.shape) +
               "), indices 0 to " + std::to_string(h.shape[0] - 1));
  shape.assign(h.shape.begin() + 1, h.shape.end());
  return static_cast<std::uint64_t>(l) * (h.size() / h.shape[0]);
}

namespace {

// The sizes of an array of attention maps: (B, h, T, S), (B, T, S) or (T, S).
struct MapSizes {
  std::size_t rank = 0, B = 1, h = 1, T = 0, S = 0;
};

// The map sizes of `a` (a layer's already, with --layer_index), refusing
// arrays that are not attention maps and a --batch_index beyond B.
MapSizes map_sizes(DType dtype, const std::vector<std::size_t>& dims, const PlotArgs& args) {
  const std::string shape = shape_str(dims);
  if (!is_float(dtype))
    fail_input(args.file + ": " + dtype_name(dtype) + " array of shape " + shape +
               "; expected attention weights of dtype float16, float32 or float64");
  MapSizes m;
  m.rank = dims.size();
  if (m.rank == 5 && !args.layer)
    fail_input(args.file + ": shape " + shape +
               " holds the maps of several layers (layers, B, h, T, S); choose one with "
               "--layer_index");
  if (m.rank < 2 || m.rank > 4)
    fail_input(args.file + ": shape " + shape +
               "; expected attention weights (B, h, T, S), (B, T, S) or (T, S)");
  if (m.rank >= 3) m.B = dims[0];
  if (m.rank == 4) m.h = dims[1];
  m.T = dims[m.rank - 2], m.S = dims[m.rank - 1];
  if (m.B == 0 || m.h == 0 || m.T == 0 || m.S == 0)
    fail_input(args.file + ": shape " + shape + " is empty; expected at least one weight");
  if (args.batch >= m.B)
    fail_input("--batch_index " + std::to_string(args.batch) + ": " + args.file +
               (m.rank == 2 ? " is a single (T, S) map, batch 0"
                            : " holds B = " + std::to_string(m.B) + " batch elements (shape " +
                                  shape + "), indices 0 to " + std::to_string(m.B - 1)));
  return m;
}

// --labels and --key_labels; the query labels serve the keys of a square map.
void read_plot_labels(const PlotArgs& args, const MapSizes& m, PlotOptions& options) {
  const std::string queries = "T = " + std::to_string(m.T) + " query positions";
  const std::string keys = "S = " + std::to_string(m.S) + " key positions";
  if (!args.labels.empty()) options.query_labels = read_labels(args.labels, m.T, queries);
  if (!args.key_labels.empty()) {
    options.key_labels = read_labels(args.key_labels, m.S, keys);
  } else if (!args.labels.empty()) {
    if (m.S != m.T)
      fail_input("--labels " + args.labels + ": the map has " + queries + " but " + keys +
                 "; give the keys' labels with --key_labels");
    options.key_labels = options.query_labels;
  }
}

// -o, or FILE with .png: a file name that is not the input.
std::string plot_output_path(const PlotArgs& args) {
  const std::string out_path =
      !args.output.empty() ? args.output : fs::path(args.file).replace_extension(".png").string();
  std::error_code ec;
  if (fs::exists(out_path, ec) && fs::equivalent(out_path, args.file, ec))
    fail_input(out_path + ": the plot would overwrite its input; choose another -o");
  const fs::path out_file(out_path);
  if (out_file.filename().empty() || fs::is_directory(out_file, ec))
    fail_input("-o " + out_path + ": expected a file name for the PNG, not a directory");
  return out_path;
}

// The panels' cells from the batch element's maps, read from the file a
// block of rows at a time (`first`: where the plotted layer begins).
// `shown`: the queries and keys drawn, the first of each map's (a padded row's real ones).
void fill_panels(NpyReader& a, std::uint64_t first, const MapSizes& m, const MapSizes& shown,
                 const PlotOptions& options, bool mean, AttentionPanels& panels) {
  const std::size_t T = shown.T, S = m.S, n = mean ? 1 : options.heads.size();
  const std::size_t keys = shown.S;
  // Row chunks keep the converted copy small whatever the file's size.
  const std::size_t chunk = std::max<std::size_t>(1, (std::size_t{1} << 20) / S);
  std::vector<double> rows, sum;
  auto at = [&](std::size_t head, std::size_t t) {
    return first + ((options.batch * m.h + head) * m.T + t) * S;
  };
  // Rows of S weights to rows of the first `keys` (in place: row r moves left).
  const auto cut = [&](std::vector<double>& v, std::size_t count) {
    if (keys == S) return;
    for (std::size_t r = 0; r < count; ++r)
      std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(r * S), keys,
                  v.begin() + static_cast<std::ptrdiff_t>(r * keys));
  };
  for (std::size_t t0 = 0; t0 < T; t0 += chunk) {
    const std::size_t count = std::min(chunk, T - t0);
    rows.resize(count * S);
    if (mean) {
      sum.assign(count * S, 0.0);
      for (std::size_t head : options.heads) {
        a.read(at(head, t0), count * S, rows.data());
        for (std::size_t k = 0; k < rows.size(); ++k) sum[k] += rows[k];
      }
      for (double& x : sum) x /= static_cast<double>(options.heads.size());
      cut(sum, count);
      panels.add_rows(0, t0, count, sum.data());
      continue;
    }
    for (std::size_t p = 0; p < n; ++p) {
      a.read(at(options.heads[p], t0), count * S, rows.data());
      cut(rows, count);
      panels.add_rows(p, t0, count, rows.data());
    }
  }
}

std::vector<std::string> panel_titles(std::size_t rank, bool mean,
                                      const std::vector<std::size_t>& heads) {
  if (rank == 2) return {"attention"};
  if (rank == 3) return {"mean over heads"};
  if (mean) return {"mean over " + std::to_string(heads.size()) + " heads"};
  std::vector<std::string> titles;
  for (std::size_t i : heads) titles.push_back("head " + std::to_string(i));
  return titles;
}

// What was written: the image's size, its cells and color range, and any downsampling.
void log_plot(const std::string& out_path, const Plot& plot, const AttentionPanels& panels,
              const PlotOptions& options, const MapSizes& m,
              const std::vector<std::string>& titles) {
  const std::size_t n = titles.size();
  for (const auto& note : plot.notes) spdlog::warn("{}", note);
  const std::string cell = plot.cell_w == plot.cell_h
                               ? std::to_string(plot.cell_w)
                               : std::to_string(plot.cell_w) + "x" + std::to_string(plot.cell_h);
  spdlog::info(
      "wrote {} ({}x{} px: {} panel(s) of {}x{} cells at {} px; color {}{}, {:.3g} to {:.3g}{})",
      out_path, plot.image.width(), plot.image.height(), n, panels.rows(), panels.cols(), cell,
      to_string(options.scale), options.range == ColorRangeMode::per_head ? " per head" : "",
      plot.lo, plot.hi, options.range == ColorRangeMode::per_head ? " over all panels" : "");
  if (options.range == ColorRangeMode::per_head)
    for (std::size_t p = 0; p < n; ++p)
      spdlog::debug("{}: color {:.3g} to {:.3g}", titles[p], plot.panel_lo[p], plot.panel_hi[p]);
  if (panels.factor() > 1)
    spdlog::info("downsampled {}x{} to {}x{} cells by block {} ({}x{} weights per cell)", m.T, m.S,
                 panels.rows(), panels.cols(), to_string(options.reduce), panels.factor(),
                 panels.factor());
}

// The tokens of the plotted batch row of a model run's maps (tokens.json beside the file):
// its queries' and keys' display texts, as many as its real tokens (rows are padded on the
// right); an encoder-decoder's target on decoder_ and cross_ queries and decoder_ keys. Empty
// for other files, or when the row's lengths do not fit the maps.
struct RunRow {
  std::vector<std::string> queries, keys;
};
RunRow run_row(const PlotArgs& args, const MapSizes& m) {
  std::error_code ec;
  if (is_stream_input(args.file) || m.rank < 3) return {};
  const fs::path dir = fs::path(args.file).parent_path();
  const std::string run_json = (dir / "run.json").string();
  if (!fs::is_regular_file(run_json, ec) || !fs::is_regular_file(dir / "tokens.json", ec))
    return {};
  const std::optional<ModelRunView> run = read_model_run_view(run_json);
  if (!run) return {};
  const std::string name = fs::path(args.file).stem().string();
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  const bool target_queries = starts("decoder_") || starts("cross_"),
             target_keys = starts("decoder_");
  const auto& q = target_queries ? run->target_tokens : run->tokens;
  const auto& ql = target_queries ? run->target_lengths : run->lengths;
  const auto& k = target_keys ? run->target_tokens : run->tokens;
  const auto& kl = target_keys ? run->target_lengths : run->lengths;
  const std::size_t b = args.batch;
  if (q.size() != m.B || k.size() != m.B || ql.size() != m.B || kl.size() != m.B) return {};
  if (ql[b] == 0 || kl[b] == 0 || ql[b] > m.T || kl[b] > m.S || q[b].size() < ql[b] ||
      k[b].size() < kl[b])
    return {};
  RunRow row;
  row.queries.assign(q[b].begin(), q[b].begin() + static_cast<std::ptrdiff_t>(ql[b]));
  row.keys.assign(k[b].begin(), k[b].begin() + static_cast<std::ptrdiff_t>(kl[b]));
  return row;
}

// FILE, or a run's out_dir standing for the attention maps its run.json
// lists; a run's file is checked against its run.json.
std::string plot_input(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!is_stream_input(path)) check_run_output(path);
    return path;
  }
  const auto listed = listed_outputs(path);
  if (!listed)
    fail_input(path +
               ": a directory without run.json; expected an attention .npy file or a "
               "run's out_dir");
  for (const char* name : {"attention.npy", "self_attention.npy", "cross_attention.npy"})
    if (listed->count(name)) {
      const std::string file = (fs::path(path) / name).string();
      check_run_output(file);
      return file;
    }
  fail_input(path +
             "/run.json lists no attention.npy, self_attention.npy or "
             "cross_attention.npy; expected a run with save_attention");
}

}  // namespace

int do_plot(const PlotArgs& given) {
  PlotArgs args = given;
  args.file = plot_input(given.file);
  PlotOptions options;
  options.scale = args.scale == "log" ? ColorScale::log : ColorScale::linear;
  options.range =
      args.color_range == "per_head" ? ColorRangeMode::per_head : ColorRangeMode::shared;
  options.vmin = args.vmin, options.vmax = args.vmax;
  check_color_limits(options, "--");
  if (args.output.empty() && is_stream_input(args.file))
    fail_input(args.file + ": a pipe or device has no directory to put the PNG beside; give -o");
  // The header now, the rows as they are drawn: memory stays at a block of
  // rows and the panels' cells whatever the file's size.
  NpyReader a(args.file);
  std::vector<std::size_t> dims = a.header().shape;
  const std::uint64_t first =
      args.layer ? layer_offset(a.header(), *args.layer, args.file, dims) : 0;
  const MapSizes m = map_sizes(a.header().dtype, dims, args);
  options.batch = args.batch;
  options.heads = parse_heads(args.heads, m.h, m.rank == 4, args.file, shape_str(dims));
  options.average = args.average;
  options.reduce = args.reduce == "mean" ? Reduce::mean : Reduce::max;
  options.cell = args.cell;
  read_plot_labels(args, m, options);
  // A model run's batch row: its real tokens only (the padding cut), labelled with them.
  MapSizes shown = m;
  const RunRow row = args.labels.empty() && args.key_labels.empty() ? run_row(args, m) : RunRow{};
  if (!row.queries.empty()) {
    shown.T = row.queries.size(), shown.S = row.keys.size();
    options.query_labels = row.queries, options.key_labels = row.keys;
  }
  const std::string out_path = plot_output_path(args);

  // Panels: the chosen heads, or their mean as one.
  const bool mean = options.average && m.rank == 4;
  const std::size_t n = mean ? 1 : options.heads.size();
  options.max_cells = args.max_cells ? args.max_cells : default_max_cells(n);
  AttentionPanels panels(n, shown.T, shown.S, options.max_cells, options.reduce);
  fill_panels(a, first, m, shown, options, mean, panels);
  const std::vector<std::string> titles = panel_titles(m.rank, mean, options.heads);
  const std::string name = fs::path(args.file).filename().string();
  std::string subject = m.rank == 2 ? name : name + ", batch " + std::to_string(args.batch);
  if (shown.T < m.T || shown.S < m.S)
    subject +=
        " (" + std::to_string(shown.T) + " of " + std::to_string(m.T) + " tokens, padding cut)";
  const Plot plot = render_attention(panels, titles, options, subject);

  const fs::path out_file(out_path);
  OutputSet out(out_file.has_parent_path() ? out_file.parent_path().string() : ".");
  out.stage(out_file.filename().string(),
            [&](std::ostream& os) { write_png(os, plot.image, out_path); });
  out.commit();
  log_plot(out_path, plot, panels, options, m, titles);
  return 0;
}

}  // namespace mha::cli
