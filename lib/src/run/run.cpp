#include "mha/run/run.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include <xtensor/xarray.hpp>

#include "mha/base/error.hpp"
#include "mha/inspect/attention_stats.hpp"
#include "mha/inspect/heatmap.hpp"
#include "mha/io/output_set.hpp"
#include "mha/io/png.hpp"
#include "mha/kernel/attention.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/mask.hpp"
#include "mha/model/attention_axes.hpp"
#include "mha/model/inputs.hpp"
#include "mha/model/precision.hpp"
#include "mha/model/weight_formats.hpp"
#include "mha/model/weights.hpp"
#include "mha/run/plan.hpp"
#include "mha/run/report.hpp"

namespace mha {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::optional<NpyArray> read_optional(const std::optional<std::string>& path) {
  if (!path) return std::nullopt;
  return read_npy(*path);
}

// NaN or Inf in an input would silently poison every output row that sees it;
// refused unless allow_nonfinite says the caller wants exactly that.
template <class T>
void check_finite(const T* x, std::size_t n, const std::vector<std::size_t>& shape,
                  const std::string& name) {
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) continue;
    std::vector<std::size_t> index(shape.size());
    for (std::size_t k = shape.size(), rest = i; k-- > 0;) {
      index[k] = rest % shape[k];
      rest /= shape[k];
    }
    fail_input(name + ": non-finite value " + std::to_string(x[i]) + " at index " +
               shape_str(index) + "; expected finite numbers (allow_nonfinite accepts them" +
               (std::isinf(x[i]) && sizeof(T) == 4
                    ? "; a value beyond float32's range, +-3.4e38, also reads as inf: "
                      "dtype float64 keeps it)"
                    : ")"));
  }
}

template <class Tensor>
void check_finite(const Tensor& t, const std::string& name) {
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  check_finite(t.data(), t.size(), shape, name);
}

// A (B', L, F) tensor of an attention_axes run in its N-D layout `nd`.
template <class T, class Tensor>
xt::xarray<T> unflatten(const AttentionAxes& axes, const Tensor& flat,
                        const std::vector<std::size_t>& nd) {
  xt::xarray<T> x = xt::xarray<T>::from_shape(nd);
  axes.scatter(flat.data(), nd, x.data());
  return x;
}

nlohmann::json file_source(const std::string& path) {
  return {{"file", path}};
}

nlohmann::json random_source(const char* distribution, std::uint64_t seed) {
  return {{"random", distribution}, {"seed", seed}};
}

nlohmann::json output_entry(const std::vector<std::size_t>& shape, const char* dtype) {
  return {{"shape", shape}, {"dtype", dtype}};
}

// Refuses to overwrite an input with an output of the same run.
void check_not_input(const Config& c, const std::string& out_path) {
  std::error_code ec;
  for (const auto* in : {&c.query, &c.key, &c.value, &c.weights, &c.mask, &c.key_lengths_file}) {
    if (*in && fs::exists(out_path, ec) && fs::equivalent(*in->operator->(), out_path, ec))
      fail_input(out_path + ": output would overwrite the input '" + **in +
                 "'; choose another out_dir");
  }
}

// The dtype tensors are written in: output_dtype, else the compute dtype T
// (weights.npz aside).
template <class T>
OutputType output_type(const Config& c) {
  return c.output_dtype.value_or(sizeof(T) == 4 ? OutputType::float32 : OutputType::float64);
}

// The tensors a run computes on, as the load stage made them.
template <class T>
struct Loaded {
  Inputs<T> in;
  Weights<T> w;
  Mask<T> mask;
};

// Load: reads the input files (or draws the random inputs), converts the
// weights, loads the mask, and waits for OpenBLAS; fills report.sources.
template <class T>
Loaded<T> load_stage(const RunPlan& plan, RunReport& report,
                     const std::function<void(const std::string&)>& warn) {
  const Config& c = plan.config;
  const Dims& d = plan.dims;
  const AttentionAxes& axes = plan.axes;
  auto finite = [&](const auto& tensor, const std::string& name) {
    if (!c.allow_nonfinite) check_finite(tensor, name);
  };
  std::optional<NpyArray> q = read_optional(c.query), k = read_optional(c.key),
                          v = read_optional(c.value);
  for (auto* file : {&q, &k, &v})
    if (*file) **file = axes.gather(std::move(**file));
  Loaded<T> l;
  Inputs<T>& in = l.in;
  in.query =
      make_input<T>(q, c.query.value_or(""), "query", d.B, d.T, d.d_model, c.seed, plan.threads);
  report.sources["query"] = q ? file_source(*c.query) : random_source("uniform[0,1)", c.seed);
  q.reset();
  if (c.query) finite(in.query, axes.label(*c.query));
  if (!d.key_is_query) {
    // With files, query+value means the value file is the key too.
    const auto& key_file = k ? k : v;
    const auto key_path = c.key ? c.key : c.value;
    in.key = make_input<T>(key_file, key_path.value_or(""), "key", d.B, d.S, d.kdim, c.seed,
                           plan.threads);
    report.sources["key"] =
        key_file ? file_source(*key_path) : random_source("uniform[0,1)", c.seed);
    if (key_file) finite(in.key, axes.label(*key_path));
  } else {
    report.sources["key"] = {{"same_as", "query"}};
  }
  k.reset();
  if (!d.value_is_key) {
    in.value =
        make_input<T>(v, c.value.value_or(""), "value", d.B, d.S, d.vdim, c.seed, plan.threads);
    report.sources["value"] = v ? file_source(*c.value) : random_source("uniform[0,1)", c.seed);
    if (v) finite(in.value, axes.label(*c.value));
  } else {
    report.sources["value"] = {{"same_as", d.key_is_query ? "query" : "key"}};
  }
  v.reset();

  Weights<T>& w = l.w;
  if (plan.weights) {
    w = weights_from_arrays<T>(plan.weights->arrays, d, plan.use_bias, *c.weights);
    for (const auto& name : weight_names(plan.use_bias))
      report.sources[name] = {{"file", *c.weights}, {"layout", to_string(plan.weights->format)}};
    finite(w.W_q, *c.weights + ":W_q");
    finite(w.W_k, *c.weights + ":W_k");
    finite(w.W_v, *c.weights + ":W_v");
    finite(w.W_o, *c.weights + ":W_o");
    if (w.has_bias()) {
      finite(w.b_q, *c.weights + ":b_q");
      finite(w.b_k, *c.weights + ":b_k");
      finite(w.b_v, *c.weights + ":b_v");
      finite(w.b_o, *c.weights + ":b_o");
    }
  } else {
    w = random_weights<T>(d, plan.use_bias, c.seed, plan.threads);
    for (const auto& name : weight_names(plan.use_bias))
      report.sources[name] = name[0] == 'W' ? random_source("glorot_uniform", c.seed)
                                            : nlohmann::json{{"zeros", true}};
  }
  l.mask = load_mask<T>(c, d, warn);
  blas_load();  // loading since blas_preload(), if the caller started it
  return l;
}

// What the compute stage produced besides the files it streamed.
template <class T>
struct Computed {
  xt::xarray<T> output;                   // (B, T, d_out), or its N-D layout
  std::optional<AttentionStats> stats;    // of every block the sink saw
  std::optional<AttentionPanels> panels;  // batch 0's maps, downsampled, for attention.png
  // attention.npy in output_dtype, gathered in memory when small (else empty:
  // streamed block by block), written to attention_stream after the kernel.
  std::vector<unsigned char> gathered;
  const OutputSet::NpyStream* attention_stream = nullptr;
};

// Compute: the attention layer, with attention.npy streamed into `out` and
// its statistics and plot panels gathered block by block into `r` (which the
// caller holds: the statistics cannot move) as they are made.
template <class T>
void compute_stage(const RunPlan& plan, const Loaded<T>& l, OutputSet& out, RunReport& report,
                   Computed<T>& r, StageProgress* progress) {
  const Config& c = plan.config;
  const Dims& d = plan.dims;
  const char* dtype = sizeof(T) == 4 ? "float32" : "float64";
  const OutputType out_type = output_type<T>(c);
  LayerOptions<T> options;
  options.scale = static_cast<T>(report.scale);
  options.masked_rows = c.masked_rows;
  options.threads = c.threads;
  options.allow_nonfinite = c.allow_nonfinite;
  options.softcap = static_cast<T>(c.softcap.value_or(0.0));
  options.bf16_gemm = c.dtype == ComputeType::bfloat16;
  options.progress = progress;
  // The exact path feeds attention.npy (save_attention) and attention.png's
  // panels (plot) block by block; neither holds a whole map.
  if (c.save_attention || c.plot) {
    const bool mean = c.average_heads;
    const OutputSet::NpyStream* stream = nullptr;
    std::size_t attention_elements = 0;
    if (c.save_attention) {
      // Under attention_axes, Keras' (B, non-attention axes..., h, query axes...,
      // key axes...): a reshape of (B', h, T, S), so the offsets below hold.
      const std::vector<std::size_t> shape = plan.axes.attention_shape(d, mean);
      stream = &out.stage_npy_stream("attention.npy", npy_dtype(out_type), shape);
      r.attention_stream = stream;
      report.outputs["attention.npy"] = output_entry(shape, to_string(out_type));
      attention_elements = 1;
      for (std::size_t n : shape) attention_elements *= n;
    }
    // Small maps are gathered in memory and written with one call: block by
    // block, the default config's 512 blocks of 100 bytes cost 512 system
    // calls. Large ones stream, so they are never held whole.
    constexpr std::size_t kGatherBytes = std::size_t{16} << 20;
    const std::size_t item = itemsize(npy_dtype(out_type));
    if (stream && attention_elements * item <= kGatherBytes)
      r.gathered.resize(attention_elements * item);
    unsigned char* gathered = r.gathered.empty() ? nullptr : r.gathered.data();
    options.attention = mean ? AttentionOutput::mean_over_heads : AttentionOutput::per_head;
    // Row t0 of head `head` of batch b starts at element ((b*h + head)*T + t0)*S
    // of (B,h,T,S), or (b*T + t0)*S of the mean (B,T,S).
    const std::size_t heads = mean ? 1 : d.h;
    AttentionStats& st = r.stats.emplace(heads, d.T, d.S);
    AttentionPanels* plotted =
        c.plot ? &r.panels.emplace(heads, d.T, d.S, default_max_cells(heads)) : nullptr;
    options.sink = [stream, gathered, &st, plotted, &d, heads, out_type](
                       std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
                       const T* block) {
      const std::size_t offset = ((b * heads + head) * d.T + t0) * d.S, count = rows * d.S;
      // Weights lie in [0, 1] or are NaN: no output_dtype overflows on them.
      if (stream)
        with_output_dtype(block, count, {rows, d.S}, out_type, "attention.npy", true,
                          [&](const auto* values) {
                            using U = std::remove_const_t<std::remove_pointer_t<decltype(values)>>;
                            if (gathered)  // tasks write disjoint ranges
                              std::memcpy(gathered + offset * sizeof(U), values, count * sizeof(U));
                            else
                              stream->write_elements(offset, values, count);
                          });
      st.add_rows(head, t0, rows, block);
      if (plotted && b == 0) plotted->add_rows(head, t0, rows, block);
    };
  }
  r.output = xt::xarray<T>::from_shape({d.B, d.T, d.d_out});
  attention_layer<T>(d, l.in.query.data(), l.in.key_data(d), l.in.value_data(d), l.w, l.mask,
                     options, r.output.data());
  if (r.attention_stream && !r.gathered.empty()) {
    const unsigned char* g = r.gathered.data();
    const std::size_t n = r.gathered.size();
    if (out_type == OutputType::float16)
      r.attention_stream->write_elements(0, reinterpret_cast<const float16*>(g), n / 2);
    else if (out_type == OutputType::float32)
      r.attention_stream->write_elements(0, reinterpret_cast<const float*>(g), n / 4);
    else
      r.attention_stream->write_elements(0, reinterpret_cast<const double*>(g), n / 8);
  }
  // Finite inputs can still overflow the compute dtype (logits beyond 3.4e38
  // in float32); say so rather than write NaN where no policy asked for it.
  if (!c.allow_nonfinite && c.masked_rows != MaskedRows::nan) {
    for (std::size_t i = 0; i < r.output.size(); ++i)
      if (!std::isfinite(r.output.data()[i]))
        fail_input("output element " + std::to_string(i) +
                   " is not finite: the inputs or "
                   "weights overflow " +
                   std::string(dtype) + " (logits beyond its range); " +
                   (sizeof(T) == 4 ? "use dtype float64 or smaller values" : "use smaller values"));
  }
  if (plan.axes.active())
    r.output = unflatten<T>(plan.axes, r.output, plan.axes.query_shape(d.d_out));
  if (r.stats) {
    report.attention_stats = r.stats->to_json();
    if (c.average_heads) report.attention_stats["averaged_over_heads"] = true;
  }
}

// Write: output.npy, attention.png, weights.npz and the inputs, staged in `out`.
template <class T>
void write_stage(const RunPlan& plan, const Loaded<T>& l, const Computed<T>& r, OutputSet& out,
                 RunReport& report) {
  const Config& c = plan.config;
  const Dims& d = plan.dims;
  const AttentionAxes& axes = plan.axes;
  const char* dtype = sizeof(T) == 4 ? "float32" : "float64";
  // Tensors are written in output_dtype, rounded from T (weights.npz aside).
  const OutputType out_type = output_type<T>(c);
  const char* out_dtype = to_string(out_type);
  // `stats`, if given, gets npy_stats of the file as written.
  auto stage = [&](const std::string& name, const auto& tensor, nlohmann::json* stats = nullptr) {
    std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
    with_output_dtype(tensor.data(), tensor.size(), shape, out_type, out.path(name),
                      c.allow_nonfinite, [&](const auto* values) {
                        out.stage_npy(name, values, shape);
                        if (stats) *stats = npy_stats(values, shape);
                      });
    report.outputs[name] = output_entry(shape, out_dtype);
  };
  stage("output.npy", r.output, &report.output_stats);
  if (r.panels) {
    std::vector<std::string> titles;
    if (c.average_heads) titles.push_back("mean over " + std::to_string(d.h) + " heads");
    for (std::size_t i = 0; titles.size() < r.panels->panels(); ++i)
      titles.push_back("head " + std::to_string(i));
    const PlotOptions plot_options;  // batch 0, linear colors, block max
    const Plot plot =
        render_attention(*r.panels, titles, plot_options, "batch 0 of " + std::to_string(d.B));
    const std::string path = out.path("attention.png");
    out.stage("attention.png", [&](std::ostream& os) { write_png(os, plot.image, path); });
    report.outputs["attention.png"] = {{"width", plot.image.width()},
                                       {"height", plot.image.height()},
                                       {"batch", 0},
                                       {"panels", r.panels->panels()},
                                       {"cells", {r.panels->rows(), r.panels->cols()}},
                                       {"cell_px", {plot.cell_w, plot.cell_h}},
                                       {"downsample", r.panels->factor()},
                                       {"reduce", to_string(r.panels->reduce())},
                                       {"color_scale", to_string(plot_options.scale)},
                                       {"color_range", {plot.lo, plot.hi}}};
  }
  if (c.save_weights) {
    auto native = weight_arrays(l.w);
    out.stage_npz("weights.npz", from_native({native.begin(), native.end()}, c.save_weights_format,
                                             d.h, out.path("weights.npz")));
    report.outputs["weights.npz"] = {{"layout", to_string(c.save_weights_format)},
                                     {"dtype", dtype}};
  }
  const Inputs<T>& in = l.in;
  if (c.save_inputs && axes.active()) {  // in the files' own N-D layouts
    stage("query.npy", unflatten<T>(axes, in.query, axes.query_shape(d.d_model)));
    if (!d.key_is_query) stage("key.npy", unflatten<T>(axes, in.key, axes.key_shape(d.kdim)));
    if (!d.value_is_key) stage("value.npy", unflatten<T>(axes, in.value, axes.key_shape(d.vdim)));
  } else if (c.save_inputs) {
    stage("query.npy", in.query);
    if (!d.key_is_query) stage("key.npy", in.key);
    if (!d.value_is_key) stage("value.npy", in.value);
  }
}

// plan -> load -> compute -> write; the stages' times go to run.json (the
// plan's into load_ms, with the file reads it starts).
template <class T>
RunResult run_typed(const RunPlan& plan, Clock::time_point t_load,
                    const std::function<void(const std::string&)>& warn, StageProgress* progress) {
  const Config& c = plan.config;
  const Dims& d = plan.dims;
  RunReport report;
  report.config = c;
  report.threads = plan.threads;
  report.dims = d;
  report.use_bias = plan.use_bias;
  if (progress) progress->begin("load");
  const Loaded<T> l = load_stage<T>(plan, report, warn);
  report.load_ms = ms_since(t_load);

  if (c.average_heads && !c.save_attention && !c.plot && warn)
    warn("average_heads has no effect without save_attention or plot");
  report.scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(d.d_k));

  // Outputs go to temporaries first; attention streams to its file block by
  // block as the kernel produces it, so it is never held in memory whole.
  OutputSet out(c.out_dir);
  // Only the files this run will write may not be inputs.
  std::vector<std::string> outputs = {"output.npy", "run.json"};
  if (c.save_attention) outputs.push_back("attention.npy");
  if (c.plot) outputs.push_back("attention.png");
  if (c.save_weights) outputs.push_back("weights.npz");
  if (c.save_inputs) outputs.insert(outputs.end(), {"query.npy", "key.npy", "value.npy"});
  for (const auto& name : outputs) check_not_input(c, out.path(name));

  auto t_compute = Clock::now();
  Computed<T> r;
  if (progress) progress->begin("compute");
  compute_stage<T>(plan, l, out, report, r, progress);
  report.compute_ms = ms_since(t_compute);

  auto t_write = Clock::now();
  if (progress) progress->begin("write");
  write_stage<T>(plan, l, r, out, report);
  report.write_ms = ms_since(t_write);
  report.peak_rss_bytes = peak_rss_bytes();

  RunResult result;
  result.report = report.to_json();
  const AttentionAxes& axes = plan.axes;
  if (axes.active())  // dims are of the flattened run: B' = batch, T = seq_len, S = kv_seq_len
    result.report["attention_axes"] = {{"axes", axes.axes()},
                                       {"query_shape", axes.query_shape(d.d_model)},
                                       {"key_shape", axes.key_shape(d.kdim)}};
  if (c.dtype == ComputeType::bfloat16) result.report["bf16_gemm"] = bf16_gemm_backend();
  result.report["blas"] = blas_load().to_json();
  out.stage_bytes("run.json", result.report.dump(2) + "\n");
  out.commit();  // run.json is renamed last: its presence means the run completed
  result.files = out.committed();
  if (progress) progress->begin("done");
  return result;
}

}  // namespace

RunResult run(const Config& config, const std::function<void(const std::string&)>& warn,
              StageProgress* progress) {
  const auto t_load = Clock::now();
  if (progress) progress->begin("plan");
  PlanFiles files;
  const RunPlan plan = plan_run(config, files);
  if (config.dtype == ComputeType::float64) return run_typed<double>(plan, t_load, warn, progress);
  return run_typed<float>(plan, t_load, warn,
                          progress);  // float32, or bfloat16 GEMMs within float32
}

}  // namespace mha
