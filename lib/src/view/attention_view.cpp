#include "mha/view/attention_view.hpp"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "mha/base/error.hpp"
#include "mha/draw/colormap.hpp"
#include "mha/draw/heatmap.hpp"
#include "mha/inspect/attention_stats.hpp"
#include "mha/io/float16.hpp"
#include "mha/io/out_dir.hpp"
#include "mha/io/stream_input.hpp"
#include "mha/view/page.hpp"

namespace mha {
namespace {

namespace fs = std::filesystem;

// Weights may round a little past [0, 1] in float16 or through a sum; more is
// not an attention map.
constexpr double kSlack = 1e-3;

template <class V>
void check_and_count(const AttentionMapSet& m, const V* w) {
  const std::size_t n = m.array.size();
  for (std::size_t i = 0; i < n; ++i) {
    const double x = w[i];
    if (std::isnan(x)) continue;
    if (!(x >= -kSlack && x <= 1 + kSlack)) {
      std::ostringstream os;
      os << m.file << ": element " << i << " is " << x << "; expected attention weights in [0, 1] "
         << "(an attention.npy, self_attention.npy or cross_attention.npy)";
      fail_input(os.str());
    }
  }
}

// Statistics per (layer, batch element) and per layer over every batch element.
template <class V>
void add_stats(AttentionMapSet& m, const V* w) {
  const std::size_t map = m.T * m.S;
  m.stats = nlohmann::json::array();
  m.stats_all = nlohmann::json::array();
  for (std::size_t l = 0; l < m.layers; ++l) {
    AttentionStats all(m.h, m.T, m.S);
    nlohmann::json per_batch = nlohmann::json::array();
    for (std::size_t b = 0; b < m.B; ++b) {
      AttentionStats one(m.h, m.T, m.S);
      for (std::size_t i = 0; i < m.h; ++i) {
        const V* block = w + ((l * m.B + b) * m.h + i) * map;
        one.add_rows(i, 0, m.T, block);
        all.add_rows(i, 0, m.T, block);
      }
      per_batch.push_back(one.to_json());
    }
    m.stats.push_back(std::move(per_batch));
    m.stats_all.push_back(all.to_json());
  }
}

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

}  // namespace

AttentionMapSet read_map_set(const std::string& file, const std::string& name,
                             const ViewOptions& options, const std::vector<std::size_t>& as_shape) {
  AttentionMapSet m;
  m.name = name;
  m.file = file;
  // A file too large for a page is refused from its header, before its data
  // are read (one batch element of it may still fit).
  if (!is_stream_input(file)) {
    const NpyHeaderInfo header = read_npy_header(file);
    const std::vector<std::size_t>& dims = as_shape.empty() ? header.shape : as_shape;
    std::size_t weights = header.size();
    const std::size_t rank = dims.size();
    if (options.batch_index && rank >= 3 && dims[batch_axis(rank)] > 0)
      weights /= dims[batch_axis(rank)];
    if (weights > kMaxViewWeights)
      fail_input(file + ": shape " + shape_text(header.shape) + " holds " +
                 std::to_string(weights) + " weights" +
                 (options.batch_index ? " per batch element" : "") + "; a page holds at most " +
                 std::to_string(kMaxViewWeights) +
                 " (choose one batch element with --batch_index, or view fewer heads)");
  }
  NpyArray a = read_npy(file);
  const std::string shape = shape_text(a.shape);
  if (!as_shape.empty()) {
    std::size_t n = 1;
    for (std::size_t d : as_shape) n *= d;
    if (n != a.size())
      fail_input(file + ": shape " + shape + " is not a reshape of " + shape_text(as_shape) +
                 ", the flattened run run.json describes");
    a.shape = as_shape;
  }
  if (!is_float(a.dtype))
    fail_input(file + ": " + a.describe() +
               "; expected attention weights of dtype float16, float32 or float64");
  const std::size_t rank = a.shape.size();
  if (rank < 2 || rank > 5)
    fail_input(file + ": shape " + shape +
               "; expected attention weights (T, S), (B, T, S), (B, h, T, S) or (layers, B, h, "
               "T, S)");
  // A rank-4 array is (B, h, T, S); rank 5 (layers, B, h, T, S).
  const std::vector<std::size_t>& s = a.shape;
  m.T = s[rank - 2];
  m.S = s[rank - 1];
  m.B = rank >= 3 ? s[batch_axis(rank)] : 1;
  m.h = rank >= 4 ? s[rank - 3] : 1;
  m.layers = rank == 5 ? s[0] : 1;
  m.head_axis = rank >= 4;
  m.layer_axis = rank == 5;
  if (m.T == 0 || m.S == 0 || m.B == 0 || m.h == 0 || m.layers == 0)
    fail_input(file + ": shape " + shape + " holds no weights; expected a non-empty map");
  // float16 is widened to float32, which holds it exactly.
  if (a.dtype == DType::f2) {
    NpyArray wide;
    wide.dtype = DType::f4;
    wide.shape = a.shape;
    wide.data.resize(a.size() * 4);
    convert(a, reinterpret_cast<float*>(wide.data.data()), file);
    a = std::move(wide);
  }
  if (options.batch_index) {
    const std::size_t b = *options.batch_index;
    if (b >= m.B)
      fail_input("--batch_index " + std::to_string(b) + ": " + file +
                 " holds B = " + std::to_string(m.B) + " batch elements (shape " + shape +
                 "), indices 0 to " + std::to_string(m.B - 1));
    const std::size_t item = itemsize(a.dtype), block = m.h * m.T * m.S * item;
    std::vector<unsigned char> kept;
    kept.reserve(m.layers * block);
    for (std::size_t l = 0; l < m.layers; ++l) {
      const unsigned char* p = a.data.data() + (l * m.B + b) * block;
      kept.insert(kept.end(), p, p + block);
    }
    a.data = std::move(kept);
    a.shape[batch_axis(rank)] = 1;
    m.B = 1;
  }
  if (a.size() > kMaxViewWeights)
    fail_input(file + ": shape " + shape + " holds " + std::to_string(a.size()) +
               " weights; a page holds at most " + std::to_string(kMaxViewWeights) +
               " (choose one batch element with --batch_index, or view fewer heads)");
  m.array = std::move(a);
  if (m.array.dtype == DType::f4) {
    const float* w = reinterpret_cast<const float*>(m.array.data.data());
    check_and_count(m, w);
    add_stats(m, w);
  } else {
    const double* w = reinterpret_cast<const double*>(m.array.data.data());
    check_and_count(m, w);
    add_stats(m, w);
  }
  return m;
}

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
    for (const char* name : {"attention", "self_attention", "cross_attention"}) {
      const std::string base = std::string(name) + ".npy";
      const std::string file = (fs::path(path) / base).string();
      if (!fs::exists(file, ec) || (listed && !listed->count(base))) continue;
      check_run_output(file);
      v.maps.push_back(read_map_set(file, name, options, flattened_shape(v.run, name)));
    }
    if (v.maps.empty() && listed)
      fail_input(path +
                 "/run.json lists no attention.npy, self_attention.npy or cross_attention.npy; "
                 "expected a run with save_attention (a map file there from an earlier run is "
                 "not shown)");
    if (v.maps.empty())
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
    v.maps.push_back(read_map_set(path, stem, options, flattened_shape(v.run, stem)));
  }
  const AttentionMapSet& first = v.maps.front();
  if (options.labels.empty() && v.run && !v.run->token_labels.empty() && first.T == first.S) {
    const std::size_t row = options.batch_index.value_or(0);
    if (first.B == 1 && row < v.run->token_labels.size()) {
      v.query_labels = v.run->token_labels[row];
      v.query_labels.resize(first.T, "<pad>");
    }
  }
  if (!options.labels.empty())
    v.query_labels =
        read_labels(options.labels, first.T, "T = " + std::to_string(first.T) + " query positions");
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
  return v;
}

std::string attention_page(const AttentionView& view) {
  nlohmann::json data;
  data["kind"] = "attention";
  data["title"] = view.title;
  data["version"] = MHA_VERSION;
  data["query_labels"] = view.query_labels;
  data["key_labels"] = view.key_labels;
  data["run"] = view.run ? view.run->page : nlohmann::json(nullptr);
  nlohmann::json colors = nlohmann::json::array();
  for (const Rgb& c : viridis_table()) colors.push_back({c.r, c.g, c.b});
  data["viridis"] = colors;
  data["maps"] = nlohmann::json::array();
  for (const auto& m : view.maps) {
    const std::size_t item = itemsize(m.array.dtype);
    data["maps"].push_back({{"name", m.name},
                            {"file", m.file},
                            {"layers", m.layers},
                            {"B", m.B},
                            {"h", m.h},
                            {"T", m.T},
                            {"S", m.S},
                            {"layer_axis", m.layer_axis},
                            {"head_axis", m.head_axis},
                            {"dtype", item == 4 ? "float32" : "float64"},
                            {"stats", m.stats},
                            {"stats_all", m.stats_all},
                            {"data", pack_values(m.array.data.data(), m.array.size(), item)}});
  }
  return html_page("mha view: " + view.title, std::string(page_asset("attention.html")),
                   data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                   {"attention.js"});
}

}  // namespace mha
