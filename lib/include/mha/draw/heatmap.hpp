// Attention maps as a picture: one heatmap per head of a (T, S) map, queries
// t down and keys s across, tiled in a near-square grid with the head above
// each, a viridis color bar with its range, tick numbers or token labels on
// both axes and a caption (batch, color range, downsampling, NaN).
//
// The maps arrive as the kernel's attention sink hands them out: blocks of
// rows of one head, from any thread, in any order. AttentionPanels keeps only
// a downsampled grid per head, so a 4096 x 4096 map costs 512 x 512 cells:
//
//   mha::AttentionPanels panels(h, T, S);   // max_cells 512, reduce by block max
//   options.sink = [&](std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
//                      const float* block) {
//     if (b == 0) panels.add_rows(head, t0, rows, block);
//   };
//   mha::attention_layer<float>(...);
//   mha::Plot plot = mha::render_attention(panels, {"head 0", "head 1"}, mha::PlotOptions{},
//                                          "batch 0");
//   out.stage("attention.png", [&](std::ostream& os) { mha::write_png(os, plot.image, path); });
//
// Downsampling: with f = ceil(max(T, S) / max_cells), cell (i, j) of a panel
// holds the max (or mean) of the map's rows [i f, (i+1) f) and columns
// [j f, (j+1) f), clipped to (T, S); a cell with any NaN is NaN. f = 1 keeps
// every weight.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "mha/draw/image.hpp"

namespace mha {

enum class Reduce { max, mean };
enum class ColorScale { linear, log };
// One color range for all panels, or one per panel (each panel's own
// extremes, shown under its title).
enum class ColorRangeMode { shared, per_head };

const char* to_string(Reduce r);          // "max", "mean"
const char* to_string(ColorScale s);      // "linear", "log"
const char* to_string(ColorRangeMode m);  // "shared", "per_head"

// Everything `mha plot` and `mha run --plot` can choose about a plot.
struct PlotOptions {
  // What to plot; read by whoever feeds the panels.
  std::size_t batch = 0;
  std::vector<std::size_t> heads;  // heads to plot, in this order; empty: all
  bool average = false;            // one panel: the mean over those heads
  // How to draw it (render_attention).
  ColorScale scale = ColorScale::linear;
  ColorRangeMode range = ColorRangeMode::shared;
  // Fixed ends of the color range, in values (not their log): they replace
  // the ends found in the data, for every panel when per_head; values beyond
  // them take the end colors. Finite, vmin < vmax, and positive on a log
  // scale (check_color_limits).
  std::optional<double> vmin, vmax;
  std::vector<std::string> query_labels;  // T token labels for the query axis, or none
  std::vector<std::string> key_labels;    // S token labels for the key axis, or none
  int cell = 0;                           // pixels per cell side, 1..64; 0: automatic
  // How to downsample (AttentionPanels).
  Reduce reduce = Reduce::max;
  std::size_t max_cells = 0;  // cells per panel side at most; 0: default_max_cells
};

// The plot's size limit: no side longer than this many pixels.
constexpr int kMaxPlotSide = 8192;

// 512, or fewer when `panels` panels of 512 x 512 one-pixel cells would not
// fit in kMaxPlotSide (more than about 200 heads).
std::size_t default_max_cells(std::size_t panels);

// Accumulates `panels` maps of shape (T, S), each downsampled to rows() x
// cols() cells (see the top of this file). Memory: panels * rows * cols
// doubles. Thread-safe: a block is reduced locally, then merged under its
// panel's lock. Each map row is to be fed exactly once.
class AttentionPanels {
 public:
  // Throws mha::Error (invalid_input) if any size is 0.
  AttentionPanels(std::size_t panels, std::size_t T, std::size_t S, std::size_t max_cells = 512,
                  Reduce reduce = Reduce::max);
  AttentionPanels(const AttentionPanels&) = delete;
  AttentionPanels& operator=(const AttentionPanels&) = delete;

  // Rows [t0, t0 + rows) of panel `panel`: a C-order (rows, S) block of float
  // or double. Throws mha::Error (runtime) if it lies outside (panels, T, S).
  template <class V>
  void add_rows(std::size_t panel, std::size_t t0, std::size_t rows, const V* block);

  std::size_t panels() const { return panels_; }
  std::size_t T() const { return T_; }
  std::size_t S() const { return S_; }
  std::size_t factor() const { return factor_; }  // f: map rows and columns per cell side
  std::size_t rows() const { return rows_; }      // ceil(T / f)
  std::size_t cols() const { return cols_; }      // ceil(S / f)
  Reduce reduce() const { return reduce_; }

  // Cell (i, j) of panel p: the max or mean of its block, NaN if the block
  // holds a NaN; -inf (max) or 0 (mean) for a block that was never fed.
  double cell(std::size_t p, std::size_t i, std::size_t j) const;

 private:
  std::size_t panels_, T_, S_, factor_, rows_, cols_;
  Reduce reduce_;
  std::vector<double> cells_;  // (panels, rows, cols): running max, or sum
  std::unique_ptr<std::mutex[]> locks_;
};

// A rendered plot, with where things went (for the log and the tests).
struct Plot {
  Image image;
  std::vector<Box> panels;         // panel p's cells: cell (i, j) at x + j*cell_w, y + i*cell_h
  std::vector<Box> titles;         // panel p's title text
  std::vector<Box> ranges;         // per_head: panel p's range, the line under its title
  Box color_bar;                   // top row is the color of `hi`, bottom row that of `lo`
  int cell_w = 0, cell_h = 0;      // pixels per cell: square unless stretched (below)
  double lo = 0, hi = 0;           // the color range, in values (not their log); per_head:
                                   // the lowest of panel_lo and the highest of panel_hi
  std::vector<double> panel_lo;    // panel p's color range: panel_lo[p] to panel_hi[p]
  std::vector<double> panel_hi;    // (shared: lo and hi for every panel)
  bool labels = false;             // token labels were drawn
  bool has_nan = false;            // some cell is NaN (drawn in kNanColor)
  std::string caption;             // the caption's parts joined by " · "
  std::vector<std::string> notes;  // what was left out and why, one sentence each
  // The color bar's texts at its top, middle and bottom.
  std::vector<std::string> bar_labels;
};

// The color of NaN cells: mid grey, outside viridis' range of hues.
constexpr Rgb kNanColor{128, 128, 128};

// Throws mha::Error (invalid_input) when options.vmin or options.vmax is not
// finite, vmin >= vmax, or either is <= 0 on a log scale: one line starting
// with `lead` that names them `prefix` + "vmin" (prefix "--" for flags) and
// says what was expected.
void check_color_limits(const PlotOptions& options, const std::string& prefix,
                        const std::string& lead = "");

// Draws `panels` with titles[p] above panel p; `subject` starts the caption
// ("attention.npy, batch 0"). Colors: viridis over [lo, hi], linear with
// lo = min(0, smallest value) and hi = the largest, or (ColorScale::log) over
// log10 from the smallest positive value to the largest, values at or below
// lo taking the lowest color. The values are those of all panels
// (ColorRangeMode::shared) or of each panel alone (per_head: its range is
// printed under its title). options.vmin and vmax replace lo and hi, for
// every panel; a data end on the wrong side of a fixed one is put 1 (log: a
// factor of 10) beyond it. Values beyond the range take its end colors. The
// color bar gives the range's values; "head min" and "head max" for per-head
// ends, and fixed ends after U+2264 and U+2265 (less / greater or equal).
// Cells are square, options.cell pixels, or automatic: about 400 pixels per
// panel side, 1 to 36 per cell (at least 12 when labels fit then), shrunk
// until the image fits kMaxPlotSide, and stretched along a side of few cells
// to make it 48 pixels (a (1, S) map is a strip 36 pixels tall). Token labels
// need undownsampled maps and cells of 11 pixels or more; otherwise they are
// left out and a note says why. Throws mha::Error (invalid_input) when the
// titles or labels do not match the panels, when an explicit cell size cannot
// fit, or as check_color_limits(options, "", "attention plot: ").
Plot render_attention(const AttentionPanels& panels, const std::vector<std::string>& titles,
                      const PlotOptions& options, const std::string& subject);

// Token labels, one per line (a final newline ends the last one; "\r" before
// a newline is dropped). Throws mha::Error (invalid_input) naming `path` when
// it cannot be read or holds other than `count` labels; `axis` names what
// they label, as "T = 5 query positions".
std::vector<std::string> read_labels(const std::string& path, std::size_t count,
                                     const std::string& axis);

}  // namespace mha
