// The attention viewer's data: the maps of a run (or of .npy files) with
// their token labels, per-head statistics and run.json, and the one
// self-contained HTML page `mha view` and `mha run --html` write from them.
//
//   mha::AttentionView v = mha::read_attention_view("out/default", {});
//   std::string html = mha::attention_page(v);  // no network when it opens
//
// A map set is one attention file, seen as (layers, B, h, T, S): attention.npy
// (B, h, T, S) has layers = 1; averaged (B, T, S) maps have h = 1 ("mean");
// self_attention.npy and cross_attention.npy of Transformer stacks have their
// own layer axis; attention_axes runs' N-D maps are read as the flattened run's
// (B', h, T, S) that run.json describes. The weights go into the page exactly as stored (float32 or
// float64; float16 widened to float32), byte-shuffled, deflated and base64'd
// (docs/attention-maps.md gives the sizes this makes).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/io/npy.hpp"

namespace mha {

struct AttentionMapSet {
  std::string name;  // "attention", "self_attention", "cross_attention", or the file's stem
  std::string file;  // where it was read from
  std::size_t layers = 1, B = 1, h = 1, T = 0, S = 0;  // B: the batch rows kept
  std::size_t file_B = 1;                              // the file's batch rows
  std::vector<std::size_t> batch_rows;                 // the file's row of each kept one
  bool layer_axis = false, head_axis = false;
  // Maps longer than kMaxViewSide on a side are shrunk by factor x factor
  // blocks (each cell the block's max, NaN if any is) to rows x cols cells.
  std::size_t factor = 1, rows = 0, cols = 0;
  NpyArray array;            // float32 or float64, C order (layers, B, h, rows, cols)
  nlohmann::json stats;      // [layer][batch] -> AttentionStats::to_json(), and
  nlohmann::json stats_all;  // [layer] over every batch element
  // A model run's padded batch (mha pads each row on the right): each kept row's real
  // queries and keys, tokens.json's lengths. The statistics count only those (a padded
  // query row is left out, a padded key is no key); the page greys the rest. Empty: every
  // query and key is real.
  std::vector<std::size_t> query_lengths, key_lengths;
  // A model run's tokens, each kept row its own (T and S labels, "<pad>" past its length);
  // empty without a run's tokens, or with label files.
  std::vector<std::vector<std::string>> row_query_labels, row_key_labels, row_query_pieces,
      row_key_pieces;
  // The map set's own axis labels (a model run's row), when they differ from
  // the page's: an encoder-decoder's decoder and cross maps have the target's
  // tokens on their queries, its cross maps the source's on their keys. Empty:
  // the page's labels.
  std::vector<std::string> query_labels, key_labels, query_pieces, key_pieces;
  // Attention weights, each checked in [0, 1]; false for other per-key
  // quantities drawn as maps (mha analyze's value-weighted norms).
  bool weights = true;
};

// What the viewer takes from the run.json beside the maps. The run layer
// reads run.json (run/run_json.hpp), a layer above this one, so the caller
// hands a reader down (RunReader).
struct ViewedRun {
  // An attention_axes run writes attention.npy in Keras' N-D layout, a
  // reshape of the flattened run's (B', h, T, S), or (B', T, S) averaged over
  // heads: that shape, which the maps are read as; empty for other runs.
  std::vector<std::size_t> attention_shape;
  nlohmann::json page;  // what the page shows of the run: run.json's contents
  // A model run's token strings (tokens.json), per batch row: the maps'
  // labels when no label files are given and the page holds one row (B = 1,
  // or batch_index chooses it).
  std::vector<std::vector<std::string>> token_labels;
  std::vector<std::vector<std::string>> token_pieces;  // the same as tokenizer.json spells them
  // An encoder-decoder run's decoder inputs (tokens.json's "target"), per row: the
  // queries of decoder_attention and cross_attention; token_labels are the source's.
  std::vector<std::vector<std::string>> target_labels, target_pieces;
  // Its target's tokens (tokens.json's "target" "label_tokens"): what each
  // decoder position predicts, the columns of an analysis's loss.
  std::vector<std::vector<std::string>> target_label_tokens;
  // Each row's real tokens (tokens.json's "lengths", and its target's): the rows are
  // padded on the right to the longest. Empty: unknown, every position is taken as real.
  std::vector<std::size_t> lengths, target_lengths;
};

// The real queries and keys of each of a map file's batch rows (RowLengths of ViewedRun);
// empty: all real.
struct RowLengths {
  std::vector<std::size_t> queries, keys;
};
// Reads the run.json at `path`, a file that exists; throws mha::Error naming it.
using RunReader = std::function<ViewedRun(const std::string& path)>;

// A model run's queries and keys (q.npy and k.npy; mha.Model's qk=True) for
// the page's neuron view: q (layers, B, h, T, d) and k the same shape (each
// head's key group), float32, only the batch rows kept.
struct QkArrays {
  std::string file;  // q.npy's path, or what stands for it
  std::size_t layers = 0, B = 0, h = 0, T = 0, d = 0;
  std::vector<float> q, k;
  std::vector<std::size_t> lengths;  // each kept row's real tokens (keys past them are padding)
};

// A vision model's images as it saw them (images.npy: resized, before
// rescaling), for the page's overlay of attention over the picture.
struct ViewImages {
  std::size_t B = 0, H = 0, W = 0;
  std::vector<unsigned char> rgb;  // (B, H, W, 3), only the batch rows kept
};

struct AttentionView {
  std::string title;                  // the run directory or file
  std::vector<AttentionMapSet> maps;  // at least one, but for an analyses-only page
  // mha analyze's small arrays, as the page draws them (loss per token, the
  // logit lens's top tokens, ablation and patching grids); null for others.
  nlohmann::json analyses;
  std::vector<std::string> query_labels;  // T labels, or empty (positions)
  std::vector<std::string> query_pieces;  // their tokenizer pieces (a model run's), or empty
  std::vector<std::string> key_labels;    // S labels, or empty (query_labels when S = T)
  std::optional<ViewedRun> run;           // none without a run.json (or a reader)
  std::optional<QkArrays> qk;             // a model run's q.npy and k.npy, if any fit the page
  std::string qk_note;                    // why they are left out, when they are
  std::optional<ViewImages> images;       // a vision model's run: its images.npy
};

struct ViewOptions {
  std::string labels, key_labels;          // label files, one token per line
  std::optional<std::size_t> batch_index;  // keep one batch element
};

// The most weights one page holds (float32: 32 MiB before compression).
constexpr std::size_t kMaxViewWeights = std::size_t{8} << 20;
// The longest side of a map in a page: one map of 2896 x 2896 fits
// kMaxViewWeights. A longer map is read a block of rows at a time and
// shrunk by blocks, so that a map of any size makes a page of bounded size.
constexpr std::size_t kMaxViewSide = 2896;

// `path` is a run directory (its run.json and attention.npy, or a stack's
// self_attention.npy and cross_attention.npy) or one attention .npy (with the
// run.json beside it, if any, which `read_run` reads). Throws mha::Error (invalid_input) naming the
// file and what was expected: not a float array, a rank other than 2 to 5,
// weights outside [0, 1], labels whose count is not T (or S), a batch_index
// out of range, more than kMaxViewWeights cells (after maps longer than
// kMaxViewSide are shrunk), or a directory with no attention file. Files are
// read a block of rows at a time, only the batch element kept.
AttentionView read_attention_view(const std::string& path, const ViewOptions& options,
                                  const RunReader& read_run = {});

// One attention file as a map set; `name` labels it in the page. A non-empty
// `as_shape` reads the array as that shape (the same number of weights):
// attention_axes runs' N-D maps as the flattened (B', h, T, S).
// `weights`: values checked in [0, 1] (false: any finite value, AttentionMapSet::weights).
// `lengths`: each file row's real queries and keys (a padded batch's), used when they
// match the file's B, T and S.
AttentionMapSet read_map_set(const std::string& file, const std::string& name,
                             const ViewOptions& options,
                             const std::vector<std::size_t>& as_shape = {}, bool weights = true,
                             const RowLengths& lengths = {});

// Maps held in memory (the Python module's results, mha.show) instead of a
// run's files: each `path` names a provided array (io/provided_input.hpp),
// read as read_map_set reads a file.
// What a page shows beside the maps, from paths or provided arrays: a model
// run's q.npy and k.npy (the neuron view), a vision model's images.npy (the
// overlay); empty: none.
struct ExtrasToView {
  std::string q, k, images;
};

struct MapsToView {
  std::string name;                   // as a run's file stem: "attention", "rollout", ...
  std::string path;                   // provide_npy / provide_view
  std::vector<std::size_t> as_shape;  // read as this shape (empty: its own)
  bool weights = true;                // AttentionMapSet::weights
  bool head_axis = true;              // false: the maps are the heads' mean (rollout)
};

// The page's view of maps in memory, labelled from `run`'s tokens as a run
// directory's are (`run.page` is what the page shows as the run). Throws as
// read_attention_view does.
AttentionView attention_view_of(const std::string& title, const std::vector<MapsToView>& maps,
                                std::optional<ViewedRun> run, const ViewOptions& options,
                                const ExtrasToView& extras = {});

// The page: HTML, CSS, script and data inline.
std::string attention_page(const AttentionView& view);

}  // namespace mha
