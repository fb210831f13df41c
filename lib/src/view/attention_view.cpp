#include "mha/view/attention_view.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "mha/base/error.hpp"
#include "mha/draw/colormap.hpp"
#include "mha/draw/heatmap.hpp"
#include "mha/inspect/attention_stats.hpp"
#include "mha/io/json_file.hpp"
#include "mha/io/npy_reader.hpp"
#include "mha/io/out_dir.hpp"
#include "mha/io/stream_input.hpp"
#include "mha/view/page.hpp"

namespace mha {
namespace {

namespace fs = std::filesystem;

// Weights may round a little past [0, 1] in float16 or through a sum; more is
// not an attention map.
constexpr double kSlack = 1e-3;

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The batch axis of a rank-3 (B, T, S), rank-4 (B, h, T, S) or rank-5
// (layers, B, h, T, S) map array.
std::size_t batch_axis(std::size_t rank) {
  return rank >= 4 ? rank - 4 : rank - 3;
}

// The run.json at `path`, when there is one and a reader for it.
std::optional<ViewedRun> run_beside(const std::string& path, const RunReader& read_run) {
  std::error_code ec;
  if (!read_run || !fs::is_regular_file(path, ec)) return std::nullopt;
  return read_run(path);
}

// The shape the `name` maps are read as: attention.npy of an attention_axes
// run as the flattened run's; else the file's own (empty).
std::vector<std::size_t> flattened_shape(const std::optional<ViewedRun>& run,
                                         const std::string& name) {
  return run && name == "attention" ? run->attention_shape : std::vector<std::size_t>{};
}

[[noreturn]] void refuse_weight(const AttentionMapSet& m, std::uint64_t index, double w) {
  std::ostringstream os;
  os << m.file << ": element " << index << " is " << w << "; expected attention weights in [0, 1] "
     << "(an attention.npy, self_attention.npy or cross_attention.npy)";
  fail_input(os.str());
}

// Which of an encoder-decoder's sides a map set's queries and keys are: decoder_* maps
// are target x target, cross_* target x source, the others (encoder_*, a decoder-only
// model's self_attention, rollout, flow, norms) source x source.
bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}
bool target_queries(const std::string& name) {
  return starts_with(name, "decoder_") || starts_with(name, "cross_");
}
bool target_keys(const std::string& name) {
  return starts_with(name, "decoder_");
}

// The real queries and keys of each batch row of a model run's `name` maps.
RowLengths run_lengths(const std::optional<ViewedRun>& run, const std::string& name) {
  if (!run) return {};
  const auto& q = target_queries(name) ? run->target_lengths : run->lengths;
  const auto& k = target_keys(name) ? run->target_lengths : run->lengths;
  return {q, k};
}

// Refuses a weight outside [0, 1]; `index` is its position in the page's
// array of full-resolution maps.
template <class V>
void check_weight(const AttentionMapSet& m, std::uint64_t index, V x) {
  const double w = x;
  if (!m.weights && !std::isinf(w)) return;
  if (std::isnan(w) || (w >= -kSlack && w <= 1 + kSlack)) return;
  refuse_weight(m, index, w);
}

// NaN is a fully masked query row's (PyTorch's masked_rows "nan"): a row is
// all NaN or holds none. Returns whether the row holds weights.
template <class V>
bool check_row(const AttentionMapSet& m, std::uint64_t index, const V* row, std::size_t S) {
  std::size_t nan = 0;
  for (std::size_t s = 0; s < S; ++s) {
    check_weight(m, index + s, row[s]);
    nan += std::isnan(row[s]);
  }
  if (m.weights && nan != 0 && nan != S)
    for (std::size_t s = 0; s < S; ++s)
      if (std::isnan(row[s])) refuse_weight(m, index + s, row[s]);
  return nan == 0;
}

// Reads the kept maps (every layer, the batch elements `batches`, every head)
// a block of rows at a time: each weight checked, the statistics per (layer,
// batch element) and per layer, and the page's cells (the weights, or the
// max of each factor x factor block, NaN if any is NaN) into m.array.
template <class V>
void read_maps(NpyReader& r, const std::vector<std::size_t>& batches, std::size_t file_B,
               AttentionMapSet& m) {
  const std::size_t T = m.T, S = m.S, f = m.factor, cols = m.cols;
  const std::size_t cells = m.rows * cols;
  V* out = reinterpret_cast<V*>(m.array.data.data());
  // Rows per read: about 1 MiB of weights, whole blocks of f rows.
  std::size_t chunk = std::max<std::size_t>(1, (std::size_t{1} << 20) / S);
  chunk = (chunk + f - 1) / f * f;
  std::vector<V> rows(std::min(chunk, T) * S);
  m.stats = nlohmann::json::array();
  m.stats_all = nlohmann::json::array();
  std::size_t map = 0;    // the page's maps in order (layer, batch, head)
  bool weighted = false;  // a row that is not all NaN was seen
  for (std::size_t l = 0; l < m.layers; ++l) {
    AttentionStats all(m.h, T, S);
    nlohmann::json per_batch = nlohmann::json::array();
    for (std::size_t kept = 0; kept < batches.size(); ++kept) {
      const std::size_t b = batches[kept];
      // A padded row's statistics: its real queries over its real keys only.
      const std::size_t queries = m.query_lengths.empty() ? T : m.query_lengths[kept];
      const std::size_t keys = m.key_lengths.empty() ? S : m.key_lengths[kept];
      AttentionStats one(m.h, T, S);
      for (std::size_t i = 0; i < m.h; ++i, ++map) {
        const std::uint64_t first = ((std::uint64_t{l} * file_B + b) * m.h + i) * T * S;
        V* page = out + map * cells;
        if (f > 1) std::fill(page, page + cells, -std::numeric_limits<V>::infinity());
        for (std::size_t t0 = 0; t0 < T; t0 += chunk) {
          const std::size_t count = std::min(chunk, T - t0);
          r.read(first + std::uint64_t{t0} * S, count * S, rows.data());
          for (std::size_t t = 0; t < count; ++t)
            weighted |= check_row(m, (std::uint64_t{map} * T + t0 + t) * S, rows.data() + t * S, S);
          if (t0 < queries) {
            const std::size_t real = std::min(count, queries - t0);
            one.add_rows(i, t0, real, rows.data(), keys);
            all.add_rows(i, t0, real, rows.data(), keys);
          }
          if (f == 1) {
            std::copy(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(count * S),
                      page + t0 * S);
            continue;
          }
          for (std::size_t t = 0; t < count; ++t) {
            V* cell_row = page + (t0 + t) / f * cols;
            const V* row = rows.data() + t * S;
            for (std::size_t s = 0; s < S; ++s) {
              V& c = cell_row[s / f];
              if (std::isnan(row[s]))
                c = row[s];
              else if (!std::isnan(c) && row[s] > c)
                c = row[s];
            }
          }
        }
      }
      per_batch.push_back(one.to_json());
    }
    m.stats.push_back(std::move(per_batch));
    m.stats_all.push_back(all.to_json());
  }
  if (m.weights && !weighted && map > 0)
    fail_input(m.file +
               ": every weight is NaN; expected attention weights in [0, 1] (NaN only "
               "in a fully masked query row)");
}

}  // namespace

AttentionMapSet read_map_set(const std::string& file, const std::string& name,
                             const ViewOptions& options, const std::vector<std::size_t>& as_shape,
                             bool weights, const RowLengths& lengths) {
  AttentionMapSet m;
  m.name = name;
  m.weights = weights;
  m.file = file;
  // The header first; the data are read a block of rows at a time, only the
  // batch elements kept.
  NpyReader r(file);
  const NpyHeaderInfo& header = r.header();
  const std::string shape = shape_text(header.shape);
  std::vector<std::size_t> dims = header.shape;
  if (!as_shape.empty()) {
    std::size_t n = 1;
    for (std::size_t d : as_shape) n *= d;
    if (n != header.size())
      fail_input(file + ": shape " + shape + " is not a reshape of " + shape_text(as_shape) +
                 ", the flattened run run.json describes");
    dims = as_shape;
  }
  if (!is_float(header.dtype))
    fail_input(file + ": " + dtype_name(header.dtype) + " array of shape " + shape_str(dims) +
               "; expected attention weights of dtype float16, float32 or float64");
  const std::size_t rank = dims.size();
  if (rank < 2 || rank > 5)
    fail_input(file + ": shape " + shape +
               "; expected attention weights (T, S), (B, T, S), (B, h, T, S) or (layers, B, h, "
               "T, S)");
  // A rank-4 array is (B, h, T, S); rank 5 (layers, B, h, T, S).
  m.T = dims[rank - 2];
  m.S = dims[rank - 1];
  m.B = rank >= 3 ? dims[batch_axis(rank)] : 1;
  m.h = rank >= 4 ? dims[rank - 3] : 1;
  m.layers = rank == 5 ? dims[0] : 1;
  m.head_axis = rank >= 4;
  m.layer_axis = rank == 5;
  if (m.T == 0 || m.S == 0 || m.B == 0 || m.h == 0 || m.layers == 0)
    fail_input(file + ": shape " + shape + " holds no weights; expected a non-empty map");
  std::vector<std::size_t> batches;
  if (options.batch_index) {
    const std::size_t b = *options.batch_index;
    if (b >= m.B)
      fail_input("--batch_index " + std::to_string(b) + ": " + file +
                 " holds B = " + std::to_string(m.B) + " batch elements (shape " + shape +
                 "), indices 0 to " + std::to_string(m.B - 1));
    batches = {b};
  } else {
    for (std::size_t b = 0; b < m.B; ++b) batches.push_back(b);
  }
  // A map longer than a page's side is shrunk by f x f blocks; then the
  // page's cells, over every map kept, must fit.
  const std::size_t maps = m.layers * batches.size() * m.h;
  m.factor = std::max<std::size_t>(1, (std::max(m.T, m.S) + kMaxViewSide - 1) / kMaxViewSide);
  m.rows = (m.T + m.factor - 1) / m.factor;
  m.cols = (m.S + m.factor - 1) / m.factor;
  if (maps * m.rows * m.cols > kMaxViewWeights)
    fail_input(file + ": shape " + shape + " holds " + std::to_string(maps * m.T * m.S) +
               " weights" + (options.batch_index ? " per batch element" : "") +
               "; a page holds at most " + std::to_string(kMaxViewWeights) +
               (m.factor > 1
                    ? " (maps longer than " + std::to_string(kMaxViewSide) + " are shrunk to " +
                          std::to_string(m.rows) + " x " + std::to_string(m.cols) + " blocks each)"
                    : std::string()) +
               " (choose one batch element with --batch_index, or view fewer heads)");
  const std::size_t file_B = m.B;
  m.file_B = file_B;
  m.batch_rows = batches;
  m.B = batches.size();
  // A padded batch's lengths, when they are this file's rows' (one per row, within T and S).
  const auto fits = [&](const std::vector<std::size_t>& n, std::size_t most) {
    return n.size() == file_B &&
           std::all_of(n.begin(), n.end(), [&](std::size_t x) { return x <= most; });
  };
  if (fits(lengths.queries, m.T) && fits(lengths.keys, m.S))
    for (std::size_t b : batches) {
      m.query_lengths.push_back(lengths.queries[b]);
      m.key_lengths.push_back(lengths.keys[b]);
    }
  // float16 is widened to float32, which holds it exactly.
  m.array.dtype = header.dtype == DType::f8 ? DType::f8 : DType::f4;
  m.array.shape = dims;
  if (rank >= 3) m.array.shape[batch_axis(rank)] = m.B;
  m.array.shape[rank - 2] = m.rows;
  m.array.shape[rank - 1] = m.cols;
  m.array.data.resize(maps * m.rows * m.cols * itemsize(m.array.dtype));
  if (m.array.dtype == DType::f4)
    read_maps<float>(r, batches, file_B, m);
  else
    read_maps<double>(r, batches, file_B, m);
  return m;
}

namespace {

// A small float array of an analysis (a few MB at most), as doubles.
std::vector<double> small_array(const std::string& file, std::vector<std::size_t>& shape) {
  NpyReader r(file);
  shape = r.header().shape;
  const std::uint64_t n = r.header().size();
  if (!is_float(r.header().dtype) || n > (std::uint64_t{1} << 22))
    fail_input(file +
               ": expected a float array of at most 4 Mi values (an analysis of mha analyze)");
  std::vector<double> v(n);
  r.read(0, n, v.data());
  return v;
}

nlohmann::json numbers(const std::vector<double>& v, std::size_t from, std::size_t count) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = from; i < from + count; ++i)
    out.push_back(std::isfinite(v[i]) ? nlohmann::json(v[i]) : nlohmann::json(nullptr));
  return out;
}

// mha analyze's small outputs in `dir` that its run.json lists: batch row
// `row` of each.
nlohmann::json read_analyses(const std::string& dir,
                             const std::map<std::string, ListedOutput>& listed, std::size_t row) {
  nlohmann::json a = nlohmann::json::object();
  auto has = [&](const char* name) { return listed.count(name) > 0; };
  auto file = [&](const char* name) { return (fs::path(dir) / name).string(); };
  std::vector<std::size_t> shape;
  if (has("loss.npy")) {  // (B, T)
    const std::vector<double> v = small_array(file("loss.npy"), shape);
    if (shape.size() == 2 && row < shape[0]) a["loss"] = numbers(v, row * shape[1], shape[1]);
  }
  if (has("logit_lens_top_p.npy") && has("logit_lens.json")) {  // (S, B, T, k)
    const std::vector<double> p = small_array(file("logit_lens_top_p.npy"), shape);
    const nlohmann::json top = read_json_file(file("logit_lens.json"), json_kind::run_json);
    if (shape.size() == 4 && row < shape[1] && top.contains("top_tokens")) {
      nlohmann::json states = nlohmann::json::array();
      for (std::size_t s = 0; s < shape[0]; ++s) {
        nlohmann::json cells = nlohmann::json::array();
        const nlohmann::json& tokens = top["top_tokens"][s][row];
        for (std::size_t t = 0; t < tokens.size(); ++t)
          cells.push_back(
              {{"tokens", tokens[t]},
               {"p", numbers(p, ((s * shape[1] + row) * shape[2] + t) * shape[3], shape[3])}});
        states.push_back(cells);
      }
      a["logit_lens"] = states;
    }
  }
  auto grid = [&](const char* name, const char* key, std::size_t skip_rows) {
    if (!has(name)) return;
    const std::vector<double> v = small_array(file(name), shape);
    if (shape.size() != 2 + skip_rows) return;
    const std::size_t R = shape[skip_rows], C = shape[skip_rows + 1];
    if (skip_rows && row >= shape[0]) return;
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t r = 0; r < R; ++r) rows.push_back(numbers(v, (row * R + r) * C, C));
    a[key] = rows;
  };
  grid("ablation.npy", "ablation", 1);  // (B, layers, heads)
  grid("encoder_ablation.npy", "encoder_ablation", 1);
  grid("decoder_ablation.npy", "decoder_ablation", 1);
  grid("cross_ablation.npy", "cross_ablation", 1);
  grid("patch_heads.npy", "patch_heads", 0);
  grid("patch_resid.npy", "patch_resid", 0);
  // (statistics, layers, heads): one layers x heads grid per named statistic.
  auto per_head = [&](const char* name, const char* key, const std::vector<std::string>& names) {
    if (!has(name)) return;
    const std::vector<double> v = small_array(file(name), shape);
    if (shape.size() != 3 || shape[0] != names.size() || shape[1] == 0 || shape[2] == 0)
      fail_input(file(name) + ": array of shape " + shape_text(shape) + "; expected (" +
                 std::to_string(names.size()) + ", layers, heads), as mha analyze writes it");
    const std::size_t L = shape[1], H = shape[2];
    nlohmann::json grids = nlohmann::json::array();
    for (std::size_t s = 0; s < names.size(); ++s) {
      nlohmann::json rows = nlohmann::json::array();
      for (std::size_t l = 0; l < L; ++l) rows.push_back(numbers(v, (s * L + l) * H, H));
      grids.push_back(rows);
    }
    a[key] = {{"names", names}, {"grids", grids}};
  };
  per_head("corpus_heads.npy", "corpus",
           {"entropy", "distance", "first_token", "diagonal", "previous_token", "duplicate_token",
            "induction"});
  per_head("head_scores.npy", "head_scores", {"previous_token", "duplicate_token", "induction"});
  return a.empty() ? nlohmann::json(nullptr) : a;
}

}  // namespace

namespace {

// q.npy and k.npy, (layers, B, h, T, d) float arrays of one shape, the rows
// `options` keeps; left out with a note when they would pass the page's
// weights limit. Each value is checked finite.
void read_qk(AttentionView& v, const ExtrasToView& files, const ViewOptions& options) {
  NpyReader rq(files.q), rk(files.k);
  const std::vector<std::size_t>& shape = rq.header().shape;
  if (shape.size() != 5 || !is_float(rq.header().dtype))
    fail_input(files.q + ": " + dtype_name(rq.header().dtype) + " array of shape " +
               shape_text(shape) + "; expected the queries (layers, B, h, T, head_dim), float");
  if (rk.header().shape != shape || !is_float(rk.header().dtype))
    fail_input(files.k + ": " + dtype_name(rk.header().dtype) + " array of shape " +
               shape_text(rk.header().shape) + "; expected the keys, float, of q's shape " +
               shape_text(shape));
  QkArrays qk;
  qk.file = files.q;
  qk.layers = shape[0], qk.h = shape[2], qk.T = shape[3], qk.d = shape[4];
  std::vector<std::size_t> rows;
  if (options.batch_index) {
    if (*options.batch_index >= shape[1])
      fail_input("--batch_index " + std::to_string(*options.batch_index) + ": " + files.q +
                 " holds B = " + std::to_string(shape[1]) + " batch elements");
    rows = {*options.batch_index};
  } else {
    for (std::size_t b = 0; b < shape[1]; ++b) rows.push_back(b);
  }
  qk.B = rows.size();
  const std::uint64_t per_row = std::uint64_t{qk.h} * qk.T * qk.d;
  const std::uint64_t values = 2 * std::uint64_t{qk.layers} * qk.B * per_row;
  if (values > kMaxViewWeights) {
    v.qk_note = files.q + " and k.npy hold " + std::to_string(values) +
                " values for this page, over its " + std::to_string(kMaxViewWeights) +
                ": the neuron view is left out (keep one batch element, or save fewer layers "
                "and heads)";
    return;
  }
  qk.q.resize(values / 2);
  qk.k.resize(values / 2);
  for (std::size_t l = 0; l < qk.layers; ++l)
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::uint64_t from = (std::uint64_t{l} * shape[1] + rows[i]) * per_row;
      const std::uint64_t to = (std::uint64_t{l} * qk.B + i) * per_row;
      rq.read(from, per_row, qk.q.data() + to);
      rk.read(from, per_row, qk.k.data() + to);
    }
  for (const std::vector<float>* a : {&qk.q, &qk.k})
    for (std::size_t i = 0; i < a->size(); ++i)
      if (!std::isfinite((*a)[i]))
        fail_input((a == &qk.q ? files.q : files.k) + ": value " + std::to_string(i) +
                   " of the rows kept is not finite; expected the queries and keys of a run");
  for (std::size_t b : rows)
    qk.lengths.push_back(v.run && b < v.run->lengths.size() ? std::min(qk.T, v.run->lengths[b])
                         : v.run && b < v.run->token_labels.size()
                             ? std::min(qk.T, v.run->token_labels[b].size())
                             : qk.T);
  v.qk = std::move(qk);
}

// A vision model's images.npy, (B, H, W, 3) uint8, the rows `options` keeps.
// The page holds at most kMaxViewWeights bytes of pixels.
void read_images(AttentionView& v, const std::string& file, const ViewOptions& options) {
  const NpyHeaderInfo header = read_npy_header(file);
  const std::vector<std::size_t>& s = header.shape;
  if (header.dtype != DType::u1 || s.size() != 4 || s[3] != 3 || s[0] == 0 || s[1] == 0 ||
      s[2] == 0)
    fail_input(file + ": " + dtype_name(header.dtype) + " array of shape " + shape_text(s) +
               "; expected a vision model's images, uint8 (B, H, W, 3)");
  if (options.batch_index && *options.batch_index >= s[0])
    fail_input("--batch_index " + std::to_string(*options.batch_index) + ": " + file +
               " holds B = " + std::to_string(s[0]) + " images");
  ViewImages im;
  im.B = options.batch_index ? 1 : s[0], im.H = s[1], im.W = s[2];
  const std::uint64_t per_image = std::uint64_t{im.H} * im.W * 3;
  if (per_image * im.B > kMaxViewWeights)
    fail_input(file + ": " + std::to_string(im.B) + " images of " + std::to_string(im.H) + " x " +
               std::to_string(im.W) + " are more than a page holds (" +
               std::to_string(kMaxViewWeights) + " bytes); keep one with --batch_index");
  const NpyArray all = read_npy(file);
  const std::size_t first = options.batch_index.value_or(0);
  const auto* p = all.data.data() + first * per_image;
  im.rgb.assign(p, p + per_image * im.B);
  v.images = std::move(im);
}

// The labels of the page's axes: label files, or a model run's tokens (the
// tables' labels on an analyses-only page).
void label_view(AttentionView& v, const ViewOptions& options) {
  if (v.maps.empty()) {  // an analyses-only page: the tokens label its tables
    if (v.run && !v.run->token_labels.empty()) {
      const std::size_t row =
          std::min(options.batch_index.value_or(0), v.run->token_labels.size() - 1);
      v.query_labels = v.run->token_labels[row];
      if (row < v.run->token_pieces.size()) v.query_pieces = v.run->token_pieces[row];
    }
    return;
  }
  const AttentionMapSet& first = v.maps.front();
  if (options.labels.empty() && v.run && !v.run->token_labels.empty() && first.T == first.S) {
    const std::size_t row = options.batch_index.value_or(0);
    if (first.B == 1 && row < v.run->token_labels.size()) {
      v.query_labels = v.run->token_labels[row];
      v.query_labels.resize(first.T, "<pad>");
      if (row < v.run->token_pieces.size()) {
        v.query_pieces = v.run->token_pieces[row];
        v.query_pieces.resize(first.T, "<pad>");
      }
    }
  }
  // An encoder-decoder run: each map set labelled by the sides it spans.
  if (options.labels.empty() && options.key_labels.empty() && v.run &&
      !v.run->target_labels.empty()) {
    const std::size_t row = options.batch_index.value_or(0);
    const auto side = [&](const std::vector<std::vector<std::string>>& rows, std::size_t n) {
      if (row >= rows.size()) return std::vector<std::string>{};
      std::vector<std::string> out = rows[row];
      out.resize(n, "<pad>");
      return out;
    };
    for (AttentionMapSet& m : v.maps) {
      if (m.B != 1 || m.factor > 1) continue;
      // encoder_*: source x source, decoder_*: target x target, cross_*: target x source
      const auto kind = [&](const char* prefix) { return m.name.rfind(prefix, 0) == 0; };
      const bool decoder_queries = kind("decoder_") || kind("cross_");
      const bool target_keys = kind("decoder_");
      if (!decoder_queries && !kind("encoder_")) continue;
      const auto& queries = decoder_queries ? v.run->target_labels : v.run->token_labels;
      const auto& query_pieces = decoder_queries ? v.run->target_pieces : v.run->token_pieces;
      const auto& keys = target_keys ? v.run->target_labels : v.run->token_labels;
      const auto& key_pieces = target_keys ? v.run->target_pieces : v.run->token_pieces;
      m.query_labels = side(queries, m.T);
      m.query_pieces = side(query_pieces, m.T);
      m.key_labels = side(keys, m.S);
      m.key_pieces = side(key_pieces, m.S);
    }
  }
  // Each kept batch row labelled with its own tokens, whatever the page holds (B > 1 too).
  if (options.labels.empty() && options.key_labels.empty() && v.run) {
    const auto rows_of = [](const std::vector<std::vector<std::string>>& rows,
                            const std::vector<std::size_t>& kept, std::size_t n) {
      std::vector<std::vector<std::string>> out;
      for (std::size_t b : kept) {
        if (b >= rows.size() || rows[b].size() > n) return std::vector<std::vector<std::string>>{};
        out.push_back(rows[b]);
        out.back().resize(n, "<pad>");
      }
      return out;
    };
    for (AttentionMapSet& m : v.maps) {
      if (m.factor > 1) continue;  // the cells are blocks
      const bool tq = target_queries(m.name), tk = target_keys(m.name);
      m.row_query_labels =
          rows_of(tq ? v.run->target_labels : v.run->token_labels, m.batch_rows, m.T);
      m.row_key_labels =
          rows_of(tk ? v.run->target_labels : v.run->token_labels, m.batch_rows, m.S);
      if (m.row_query_labels.empty() || m.row_key_labels.empty()) {
        m.row_query_labels.clear();
        m.row_key_labels.clear();
        continue;
      }
      m.row_query_pieces =
          rows_of(tq ? v.run->target_pieces : v.run->token_pieces, m.batch_rows, m.T);
      m.row_key_pieces =
          rows_of(tk ? v.run->target_pieces : v.run->token_pieces, m.batch_rows, m.S);
    }
  }
  if (!options.labels.empty()) {
    v.query_labels =
        read_labels(options.labels, first.T, "T = " + std::to_string(first.T) + " query positions");
    v.query_pieces.clear();
  }
  if (!options.key_labels.empty()) {
    for (const auto& m : v.maps)
      if (m.S != first.S)
        fail_input("--key_labels: " + m.file + " has S = " + std::to_string(m.S) + " keys and " +
                   first.file + " S = " + std::to_string(first.S) +
                   "; one key labels file cannot "
                   "label both");
    v.key_labels = read_labels(options.key_labels, first.S,
                               "S = " + std::to_string(first.S) + " key positions");
  }
}

}  // namespace

AttentionView read_attention_view(const std::string& path, const ViewOptions& options,
                                  const RunReader& read_run) {
  AttentionView v;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    v.title = path;
    const std::string run_json = (fs::path(path) / "run.json").string();
    v.run = run_beside(run_json, read_run);
    // With a run.json, only the maps it lists, as the run wrote them.
    const auto listed = listed_outputs(path);
    for (const char* name : {"attention", "self_attention", "encoder_attention",
                             "decoder_attention", "cross_attention"}) {
      const std::string base = std::string(name) + ".npy";
      const std::string file = (fs::path(path) / base).string();
      if (!fs::exists(file, ec) || (listed && !listed->count(base))) continue;
      check_run_output(file);
      v.maps.push_back(read_map_set(file, name, options, flattened_shape(v.run, name), true,
                                    run_lengths(v.run, name)));
    }
    // A vision model's images, for the overlay.
    if (listed && listed->count("images.npy")) {
      const std::string images = (fs::path(path) / "images.npy").string();
      check_run_output(images);
      read_images(v, images, options);
    }
    // A model run's queries and keys (--save_qk), as its run.json lists them.
    if (listed && listed->count("q.npy") && listed->count("k.npy")) {
      ExtrasToView files;
      files.q = (fs::path(path) / "q.npy").string();
      files.k = (fs::path(path) / "k.npy").string();
      check_run_output(files.q);
      check_run_output(files.k);
      read_qk(v, files, options);
    }
    // mha analyze: rollout (layers, B, T, T) as one map per layer, the norms as
    // maps of per-key quantities, and the small arrays the page draws.
    const bool analysis =
        v.run && v.run->page.is_object() && v.run->page.value("mode", "") == "analyze";
    if (analysis && listed) {
      // rollout (layers, B, T, T) as one map per layer; an encoder-decoder's
      // three (its kinds' norms below), each labelled by the sides it spans
      for (const char* name : {"rollout", "encoder_rollout", "decoder_rollout", "cross_rollout"}) {
        const std::string base = std::string(name) + ".npy";
        const std::string rollout = (fs::path(path) / base).string();
        if (!listed->count(base)) continue;
        check_run_output(rollout);
        const NpyHeaderInfo h = NpyReader(rollout).header();
        if (h.shape.size() != 4)
          fail_input(rollout + ": expected (layers, B, queries, keys), got " + shape_text(h.shape));
        v.maps.push_back(read_map_set(rollout, name, options,
                                      {h.shape[0], h.shape[1], 1, h.shape[2], h.shape[3]}, true,
                                      run_lengths(v.run, name)));
        v.maps.back().head_axis = false;  // the heads' mean, as the page names it
      }
      const std::string flow = (fs::path(path) / "flow.npy").string();
      if (listed->count("flow.npy")) {  // (B, T, T): one map to the last layer
        check_run_output(flow);
        const NpyHeaderInfo h = NpyReader(flow).header();
        if (h.shape.size() != 3)
          fail_input(flow + ": expected (B, T, T), got " + shape_text(h.shape));
        v.maps.push_back(read_map_set(flow, "flow", options,
                                      {1, h.shape[0], 1, h.shape[1], h.shape[2]}, true,
                                      run_lengths(v.run, "flow")));
        v.maps.back().head_axis = false;
      }
      for (const char* name : {"attention_norms", "encoder_attention_norms",
                               "decoder_attention_norms", "cross_attention_norms"}) {
        const std::string base = std::string(name) + ".npy";
        const std::string norms = (fs::path(path) / base).string();
        if (!listed->count(base)) continue;
        check_run_output(norms);
        v.maps.push_back(read_map_set(norms, name, options, {}, false, run_lengths(v.run, name)));
      }
      const std::size_t row = options.batch_index.value_or(0);
      v.analyses = read_analyses(path, *listed, row);
      // an encoder-decoder's loss is over its target's tokens
      if (v.analyses.is_object() && v.analyses.contains("loss") &&
          row < v.run->target_label_tokens.size())
        v.analyses["loss_labels"] = v.run->target_label_tokens[row];
      if (v.maps.empty() && v.analyses.is_null())
        fail_input(path +
                   "/run.json: an analysis with nothing the page draws (rollout, flow, norms, "
                   "detectors, loss, logit_lens, ablation, patching, corpus)");
    }
    if (v.maps.empty() && listed && !analysis)
      fail_input(path +
                 "/run.json lists no attention.npy, self_attention.npy or cross_attention.npy; "
                 "expected a run with save_attention (a map file there from an earlier run is "
                 "not shown)");
    if (v.maps.empty() && v.analyses.is_null())
      fail_input(path +
                 ": no attention.npy, self_attention.npy or cross_attention.npy in this "
                 "directory; expected a run's out_dir with save_attention, a sweep's out_dir "
                 "(results.jsonl) or an attention .npy file");
  } else {
    if (!fs::exists(path, ec)) fail_input(path + ": no such file or directory");
    if (!is_stream_input(path)) check_run_output(path);
    v.title = path;
    const fs::path file(path);
    v.run = run_beside((file.parent_path() / "run.json").string(), read_run);
    const std::string stem = file.stem().string();
    v.maps.push_back(read_map_set(path, stem, options, flattened_shape(v.run, stem), true,
                                  run_lengths(v.run, stem)));
  }
  label_view(v, options);
  return v;
}

AttentionView attention_view_of(const std::string& title, const std::vector<MapsToView>& maps,
                                std::optional<ViewedRun> run, const ViewOptions& options,
                                const ExtrasToView& extras) {
  AttentionView v;
  v.title = title;
  v.run = std::move(run);
  for (const MapsToView& m : maps) {
    v.maps.push_back(
        read_map_set(m.path, m.name, options, m.as_shape, m.weights, run_lengths(v.run, m.name)));
    if (!m.head_axis) v.maps.back().head_axis = false;
  }
  if (v.maps.empty()) fail_input(title + ": no attention maps to show");
  if (!extras.q.empty() && !extras.k.empty()) read_qk(v, extras, options);
  if (!extras.images.empty()) read_images(v, extras.images, options);
  label_view(v, options);
  return v;
}

std::string attention_page(const AttentionView& view) {
  nlohmann::json data;
  data["kind"] = "attention";
  data["title"] = view.title;
  data["version"] = MHA_VERSION;
  // Labels name single positions: a page of shrunk maps shows block ranges instead.
  bool shrunk = false;
  for (const auto& m : view.maps) shrunk = shrunk || m.factor > 1;
  data["query_labels"] = shrunk ? std::vector<std::string>{} : view.query_labels;
  data["key_labels"] = shrunk ? std::vector<std::string>{} : view.key_labels;
  data["query_pieces"] = shrunk ? std::vector<std::string>{} : view.query_pieces;
  data["run"] = view.run ? view.run->page : nlohmann::json(nullptr);
  nlohmann::json colors = nlohmann::json::array();
  for (const Rgb& c : viridis_table()) colors.push_back({c.r, c.g, c.b});
  data["viridis"] = colors;
  data["analyses"] = view.analyses;
  data["qk_note"] = view.qk_note;
  data["qk"] = nullptr;
  if (view.qk) {
    const QkArrays& qk = *view.qk;
    const auto* q = reinterpret_cast<const unsigned char*>(qk.q.data());
    const auto* k = reinterpret_cast<const unsigned char*>(qk.k.data());
    data["qk"] = {{"file", qk.file},
                  {"layers", qk.layers},
                  {"B", qk.B},
                  {"h", qk.h},
                  {"T", qk.T},
                  {"d", qk.d},
                  {"lengths", qk.lengths},
                  {"q", pack_values(q, qk.q.size(), 4)},
                  {"k", pack_values(k, qk.k.size(), 4)}};
  }
  data["images"] = nullptr;
  if (view.images)
    data["images"] = {{"B", view.images->B},
                      {"H", view.images->H},
                      {"W", view.images->W},
                      {"data", pack_values(view.images->rgb.data(), view.images->rgb.size(), 1)}};
  data["maps"] = nlohmann::json::array();
  for (const auto& m : view.maps) {
    const std::size_t item = itemsize(m.array.dtype);
    data["maps"].push_back({{"name", m.name},
                            {"file", m.file},
                            {"layers", m.layers},
                            {"B", m.B},
                            {"B_file", m.file_B},
                            {"batch_rows", m.batch_rows},
                            {"h", m.h},
                            {"T", m.rows},
                            {"S", m.cols},
                            {"factor", m.factor},
                            {"T_file", m.T},
                            {"S_file", m.S},
                            {"layer_axis", m.layer_axis},
                            {"head_axis", m.head_axis},
                            {"dtype", item == 4 ? "float32" : "float64"},
                            {"stats", m.stats},
                            {"stats_all", m.stats_all},
                            {"data", pack_values(m.array.data.data(), m.array.size(), item)}});
    nlohmann::json& j = data["maps"].back();
    if (!m.query_lengths.empty()) {  // a padded batch: each kept row's real queries and keys
      j["query_lengths"] = m.query_lengths;
      j["key_lengths"] = m.key_lengths;
    }
    if (!shrunk && !m.row_query_labels.empty()) {  // each kept row's own tokens
      j["row_query_labels"] = m.row_query_labels;
      j["row_key_labels"] = m.row_key_labels;
      if (!m.row_query_pieces.empty()) j["row_query_pieces"] = m.row_query_pieces;
      if (!m.row_key_pieces.empty()) j["row_key_pieces"] = m.row_key_pieces;
    }
    if (!m.query_labels.empty()) {  // the map set's own labels (an encoder-decoder's sides)
      j["query_labels"] = m.query_labels;
      j["key_labels"] = m.key_labels;
      j["query_pieces"] = m.query_pieces;
      j["key_pieces"] = m.key_pieces;
    }
  }
  return html_page("mha view: " + view.title, std::string(page_asset("attention.html")),
                   data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                   {"attention.js"});
}

}  // namespace mha
