#include "mha/run/run.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include <xtensor/xarray.hpp>

#include "mha/base/error.hpp"
#include "mha/base/large_array.hpp"
#include "mha/config/attention_axes.hpp"
#include "mha/config/inputs.hpp"
#include "mha/config/precision.hpp"
#include "mha/config/weight_formats.hpp"
#include "mha/config/weights.hpp"
#include "mha/draw/heatmap.hpp"
#include "mha/draw/png.hpp"
#include "mha/inspect/attention_stats.hpp"
#include "mha/io/checksum.hpp"
#include "mha/io/dir_lock.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/out_dir.hpp"
#include "mha/io/output_set.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/kernel/attention.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/mask.hpp"
#include "mha/kernel/transformer.hpp"
#include "mha/kernel/vexp.hpp"
#include "mha/run/plan.hpp"
#include "mha/run/report.hpp"
#include "mha/run/run_json.hpp"
#include "typed_layer.hpp"

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

// A (B', L, F) tensor of an attention_axes run in its N-D layout `nd`.
template <class T, class Flat>
xt::xarray<T> unflatten(const AttentionAxes& axes, const Flat& flat,
                        const std::vector<std::size_t>& nd) {
  xt::xarray<T> x = xt::xarray<T>::from_shape(nd);
  axes.scatter(flat.data(), nd, x.data());
  return x;
}

Source random_input(std::uint64_t seed) {
  return Source::drawn("uniform[0,1)", seed);
}

OutputFile npy_output(const std::vector<std::size_t>& shape, const char* dtype) {
  OutputFile f;
  f.shape = shape;
  f.dtype = dtype;
  return f;
}

OutputFile weights_output(const char* layout, const char* dtype) {
  OutputFile f;
  f.layout = layout;
  f.dtype = dtype;
  return f;
}

// The input file of `c` that `path` is, if any.
const std::string* input_at(const Config& c, const std::string& path) {
  std::error_code ec;
  for (const auto* in : {&c.query, &c.key, &c.value, &c.weights, &c.mask, &c.key_lengths_file})
    if (*in && fs::exists(path, ec) && fs::equivalent(*in->operator->(), path, ec)) return &**in;
  return nullptr;
}

// Refuses to overwrite an input with an output of the same run.
void check_not_input(const Config& c, const std::string& out_path) {
  if (const std::string* in = input_at(c, out_path))
    fail_input(out_path + ": output would overwrite the input '" + *in +
               "'; choose another out_dir");
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
  Tensor<T, 3> memory;  // a decoder's
  // The layer: its weights converted once, its mask for the run's sizes.
  std::optional<TypedLayer<T>> layer;
};

// Load for a stack of Transformer layers: the input (query), the decoder's
// memory, every layer's weights and the two attentions' masks.
template <class T>
Loaded<T> load_stack(const RunPlan& plan, RunReport& report,
                     const std::function<void(const std::string&)>& warn) {
  const Config& c = plan.config;
  const Dims& d = plan.dims;
  const StackShape& s = *plan.stack;
  Loaded<T> l;
  std::optional<NpyArray> q = read_optional(c.query);
  l.in.query =
      make_input<T>(q, c.query.value_or(""), "query", d.B, d.T, d.d_model, c.seed, plan.threads);
  report.sources["query"] = q ? Source::from_file(*c.query) : random_input(c.seed);
  if (c.query && !c.allow_nonfinite) check_finite(l.in.query, *c.query);
  if (s.kind == LayerKind::decoder) {
    std::optional<NpyArray> m = read_optional(c.memory);
    l.memory = make_input<T>(m, c.memory.value_or(""), "memory", d.B, s.cross.S, d.d_model, c.seed,
                             plan.threads);
    report.sources["memory"] = m ? Source::from_file(*c.memory) : random_input(c.seed);
    if (c.memory && !c.allow_nonfinite) check_finite(l.memory, *c.memory);
  }
  l.layer.emplace(plan, warn);
  report.sources["layers"] =
      plan.weights
          ? Source::from_file(*c.weights, to_string(plan.weights->format))
          : Source::drawn("glorot_uniform kernels, zero biases, LayerNorm 1 and 0", c.seed);
  blas_load();
  return l;
}

// Load: reads the input files (or draws the random inputs), converts the
// weights, loads the mask, and waits for OpenBLAS; fills report.sources.
template <class T>
Loaded<T> load_stage(const RunPlan& plan, RunReport& report,
                     const std::function<void(const std::string&)>& warn) {
  if (plan.stack) return load_stack<T>(plan, report, warn);
  const Config& c = plan.config;
  const Dims& d = plan.dims;
  const AttentionAxes& axes = plan.axes;
  auto finite = [&](const auto& tensor, const std::string& name) {
    if (!c.allow_nonfinite) check_finite(tensor, name);
  };
  // Buffers the caller lent in the compute type and shape are used in place
  // (the Python module's arrays); the rest is read and converted.
  auto borrow = [&](const std::optional<std::string>& path, std::size_t L,
                    std::size_t F) -> const T* {
    const NpyView* view = path && !axes.active() ? provided_view(*path) : nullptr;
    if (!view || view->dtype != npy_dtype<T>()) return nullptr;
    const bool fits = view->shape == std::vector<std::size_t>{d.B, L, F} ||
                      (d.B == 1 && view->shape == std::vector<std::size_t>{L, F});
    return fits ? static_cast<const T*>(view->data) : nullptr;
  };
  auto check_view = [&](const T* p, std::size_t L, std::size_t F, const std::string& path) {
    if (!c.allow_nonfinite) check_finite(p, d.B * L * F, {d.B, L, F}, path);
  };
  const auto key_path = c.key ? c.key : c.value;  // query + value: the value is the key too
  const T* q_view = borrow(c.query, d.T, d.d_model);
  const T* k_view = d.key_is_query ? nullptr : borrow(key_path, d.S, d.kdim);
  const T* v_view = d.value_is_key ? nullptr : borrow(c.value, d.S, d.vdim);
  const bool need_v = (!d.value_is_key && !v_view) || (!d.key_is_query && !c.key && !k_view);
  std::optional<NpyArray> q = q_view ? std::nullopt : read_optional(c.query),
                          k = k_view ? std::nullopt : read_optional(c.key),
                          v = need_v ? read_optional(c.value) : std::nullopt;
  for (auto* file : {&q, &k, &v})
    if (*file) **file = axes.gather(std::move(**file));
  Loaded<T> l;
  Inputs<T>& in = l.in;
  if (q_view) {
    in.query_view = q_view;
    report.sources["query"] = Source::from_file(*c.query);
    check_view(q_view, d.T, d.d_model, *c.query);
  } else {
    in.query =
        make_input<T>(q, c.query.value_or(""), "query", d.B, d.T, d.d_model, c.seed, plan.threads);
    report.sources["query"] = q ? Source::from_file(*c.query) : random_input(c.seed);
    q.reset();
    if (c.query) finite(in.query, axes.label(*c.query));
  }
  if (!d.key_is_query && k_view) {
    in.key_view = k_view;
    report.sources["key"] = Source::from_file(*key_path);
    check_view(k_view, d.S, d.kdim, *key_path);
  } else if (!d.key_is_query) {
    const auto& key_file = k ? k : v;
    in.key = make_input<T>(key_file, key_path.value_or(""), "key", d.B, d.S, d.kdim, c.seed,
                           plan.threads);
    report.sources["key"] = key_file ? Source::from_file(*key_path) : random_input(c.seed);
    if (key_file) finite(in.key, axes.label(*key_path));
  } else {
    report.sources["key"] = Source::alias("query");
  }
  k.reset();
  if (!d.value_is_key && v_view) {
    in.value_view = v_view;
    report.sources["value"] = Source::from_file(*c.value);
    check_view(v_view, d.S, d.vdim, *c.value);
  } else if (!d.value_is_key) {
    in.value =
        make_input<T>(v, c.value.value_or(""), "value", d.B, d.S, d.vdim, c.seed, plan.threads);
    report.sources["value"] = v ? Source::from_file(*c.value) : random_input(c.seed);
    if (v) finite(in.value, axes.label(*c.value));
  } else {
    report.sources["value"] = Source::alias(d.key_is_query ? "query" : "key");
  }
  v.reset();

  l.layer.emplace(plan, warn);
  for (const auto& name : weight_names(plan.use_bias))
    report.sources[name] = plan.weights
                               ? Source::from_file(*c.weights, to_string(plan.weights->format))
                           : name[0] == 'W' ? Source::drawn("glorot_uniform", c.seed)
                                            : Source::zeros();
  blas_load();  // loading since blas_preload(), if the caller started it
  return l;
}

// What the compute stage produced besides the files it streamed.
template <class T>
struct Computed {
  // (B, T, d_out), or its N-D layout; in huge pages when large (large_array.hpp)
  xt::xarray<T, xt::layout_type::row_major, ArrayAllocator<T>> output;
  std::optional<AttentionStats> stats;    // of every block the sink saw
  std::optional<AttentionPanels> panels;  // batch 0's maps, downsampled, for attention.png
  // attention.npy in output_dtype, gathered in memory when small (else empty:
  // streamed block by block), written to attention_stream after the kernel.
  std::vector<unsigned char> gathered;
  const OutputSet::NpyStream* attention_stream = nullptr;
  // Transformer layers: each layer's self- and cross-attention statistics.
  std::vector<std::unique_ptr<AttentionStats>> self_stats, cross_stats;
};

// Compute for a stack of Transformer layers: self_attention.npy (and the
// decoder's cross_attention.npy) with a leading layer axis, and
// hidden_states.npy, streamed layer by layer as the stack runs.
template <class T>
void compute_stack(const RunPlan& plan, const Loaded<T>& l, OutputSet& out, RunReport& report,
                   Computed<T>& r, StageProgress* progress) {
  const Config& c = plan.config;
  const StackShape& s = *plan.stack;
  const Dims& d = s.self;
  const bool decoder = s.kind == LayerKind::decoder;
  const OutputType out_type = output_type<T>(c);
  const TypedLayer<T>& layer = *l.layer;
  StackOptions<T> options = layer.stack_options(c);
  LayerOptions<T>& sa = options.self_attn;
  LayerOptions<T>& ca = options.cross_attn;
  // Maps: (L, B, h, T, S), or (L, B, T, S) averaged over heads.
  const bool mean = c.average_heads;
  const std::size_t heads = mean ? 1 : d.h;
  struct Maps {
    const OutputSet::NpyStream* stream = nullptr;
    std::size_t rows = 0, cols = 0;  // T and S of each map
  } self_maps, cross_maps;
  auto stage_maps = [&](const char* name, const Dims& dims, Maps& maps) {
    std::vector<std::size_t> shape = {s.num_layers, dims.B};
    if (!mean) shape.push_back(dims.h);
    shape.insert(shape.end(), {dims.T, dims.S});
    maps.stream = &out.stage_npy_stream(name, npy_dtype(out_type), shape);
    maps.rows = dims.T, maps.cols = dims.S;
    report.outputs[name] = npy_output(shape, to_string(out_type));
  };
  if (c.save_attention) {
    stage_maps("self_attention.npy", d, self_maps);
    if (decoder) stage_maps("cross_attention.npy", s.cross, cross_maps);
    sa.attention = ca.attention =
        mean ? AttentionOutput::mean_over_heads : AttentionOutput::per_head;
  }
  // Each layer's sinks write at that layer's offset and into its statistics.
  auto sink = [&, heads, out_type](const Maps& maps, AttentionStats* st, std::size_t layer) {
    return [&maps, st, layer, heads, out_type, B = d.B](
               std::size_t b, std::size_t head, std::size_t t0, std::size_t rows, const T* block) {
      const std::size_t offset = (((layer * B + b) * heads + head) * maps.rows + t0) * maps.cols,
                        count = rows * maps.cols;
      with_output_dtype(
          block, count, {rows, maps.cols}, out_type, "attention maps", true,
          [&](const auto* values) { maps.stream->write_elements(offset, values, count); });
      st->add_rows(head, t0, rows, block);
    };
  };
  options.before_layer = [&](std::size_t layer, LayerOptions<T>& self, LayerOptions<T>& cross) {
    if (!c.save_attention) return;
    r.self_stats.push_back(std::make_unique<AttentionStats>(heads, d.T, d.T));
    self.sink = sink(self_maps, r.self_stats.back().get(), layer);
    if (decoder) {
      r.cross_stats.push_back(std::make_unique<AttentionStats>(heads, d.T, s.cross.S));
      cross.sink = sink(cross_maps, r.cross_stats.back().get(), layer);
    }
  };
  const OutputSet::NpyStream* hidden = nullptr;
  if (c.save_hidden_states) {
    const std::vector<std::size_t> shape = {s.num_layers, d.B, d.T, d.d_model};
    hidden = &out.stage_npy_stream("hidden_states.npy", npy_dtype(out_type), shape);
    report.outputs["hidden_states.npy"] = npy_output(shape, to_string(out_type));
  }
  const std::size_t layer_size = d.B * d.T * d.d_model;
  if (progress) progress->begin("compute", s.num_layers);
  options.after_layer = [&](std::size_t layer, const T* x) {
    if (hidden)
      with_output_dtype(x, layer_size, {d.B, d.T, d.d_model}, out_type,
                        out.path("hidden_states.npy"), c.allow_nonfinite, [&](const auto* values) {
                          hidden->write_elements(layer * layer_size, values, layer_size);
                        });
    if (progress) progress->add();
  };
  r.output = decltype(r.output)::from_shape({d.B, d.T, d.d_model});
  layer.run_stack(s, l.in.query_data(), decoder ? l.memory.data() : nullptr, layer.planned_mask(),
                  layer.cross_mask(c), options, r.output.data());
  layer.check_output(c, r.output.data(), r.output.size());
  if (c.save_attention)
    for (std::size_t i = 0; i < s.num_layers; ++i) {
      LayerAttention& layer = report.layer_stats.emplace_back();
      layer.self_attention = summarize(*r.self_stats[i], mean);
      if (decoder) layer.cross_attention = summarize(*r.cross_stats[i], mean);
    }
}

// Compute: the attention layer, with attention.npy streamed into `out` and
// its statistics and plot panels gathered block by block into `r` (which the
// caller holds: the statistics cannot move) as they are made.
template <class T>
void compute_stage(const RunPlan& plan, const Loaded<T>& l, OutputSet& out, RunReport& report,
                   Computed<T>& r, StageProgress* progress) {
  if (plan.stack) return compute_stack<T>(plan, l, out, report, r, progress);
  const Config& c = plan.config;
  const Dims& d = plan.dims;
  const OutputType out_type = output_type<T>(c);
  const TypedLayer<T>& layer = *l.layer;
  LayerOptions<T> options = layer.attention_options(c);
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
      report.outputs["attention.npy"] = npy_output(shape, to_string(out_type));
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
  r.output = decltype(r.output)::from_shape({d.B, d.T, d.d_out});
  layer.attend(d, l.in.query_data(), l.in.key_data(d), l.in.value_data(d), layer.planned_mask(),
               options, r.output.data());
  layer.check_output(c, r.output.data(), r.output.size());
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
  if (plan.axes.active())
    r.output = unflatten<T>(plan.axes, r.output, plan.axes.query_shape(d.d_out));
  if (r.stats) report.attention_stats = summarize(*r.stats, c.average_heads);
}

// With repeat > 1, after the run's own compute (and with warmup, before it,
// with repeat 0): the same forward (the same kernel path: the exact one when
// maps are asked for) called once to warm up, then `repeat` times timed, each
// into a scratch output (the run's output stays as computed). Maps are made
// but go to a sink that drops them: the timings leave out writing
// attention.npy, its statistics and the plot, and a stack's hidden states.
template <class T>
std::vector<double> timed_calls(const RunPlan& plan, const Loaded<T>& l, int repeat) {
  const Config& c = plan.config;
  const TypedLayer<T>& layer = *l.layer;
  const AttentionSink<T> drop = [](std::size_t, std::size_t, std::size_t, std::size_t, const T*) {};
  const AttentionOutput maps = !(c.save_attention || c.plot) ? AttentionOutput::none
                               : c.average_heads             ? AttentionOutput::mean_over_heads
                                                             : AttentionOutput::per_head;
  std::function<void()> call;
  std::vector<T> scratch;
  if (plan.stack) {
    const StackShape& s = *plan.stack;
    StackOptions<T> options = layer.stack_options(c);
    if (c.save_attention) {  // a stack's maps: save_attention only (plot is refused)
      options.self_attn.attention = options.cross_attn.attention = maps;
      options.self_attn.sink = options.cross_attn.sink = drop;
    }
    scratch.resize(s.self.B * s.self.T * s.self.d_model);
    const Mask<T> cross = layer.cross_mask(c);
    const bool decoder = s.kind == LayerKind::decoder;
    call = [&, options, cross, decoder] {
      layer.run_stack(s, l.in.query_data(), decoder ? l.memory.data() : nullptr,
                      layer.planned_mask(), cross, options, scratch.data());
    };
  } else {
    const Dims& d = plan.dims;
    LayerOptions<T> options = layer.attention_options(c);
    options.attention = maps;
    if (maps != AttentionOutput::none) options.sink = drop;
    scratch.resize(d.B * d.T * d.d_out);
    call = [&, options] {
      layer.attend(d, l.in.query_data(), l.in.key_data(d), l.in.value_data(d), layer.planned_mask(),
                   options, scratch.data());
    };
  }
  call();  // warm: discarded
  std::vector<double> samples;
  for (int i = 0; i < repeat; ++i) {
    const auto t = Clock::now();
    call();
    samples.push_back(ms_since(t));
  }
  return samples;
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
  auto stage = [&](const std::string& name, const auto& tensor,
                   std::optional<NpyStats>* stats = nullptr) {
    std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
    with_output_dtype(tensor.data(), tensor.size(), shape, out_type, out.path(name),
                      c.allow_nonfinite, [&](const auto* values) {
                        out.stage_npy(name, values, shape);
                        if (stats) *stats = npy_stats(values, shape);
                      });
    report.outputs[name] = npy_output(shape, out_dtype);
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
    PlotFile& png = report.outputs["attention.png"].plot.emplace();
    png.width = plot.image.width();
    png.height = plot.image.height();
    png.batch = 0;
    png.panels = r.panels->panels();
    png.cells = {r.panels->rows(), r.panels->cols()};
    png.cell_px = {plot.cell_w, plot.cell_h};
    png.downsample = r.panels->factor();
    png.reduce = to_string(r.panels->reduce());
    png.color_scale = to_string(plot_options.scale);
    png.color_range = {plot.lo, plot.hi};
  }
  if (c.save_weights && plan.stack) {
    out.stage_npz("weights.npz", stack_arrays(l.layer->stack_weights()));
    report.outputs["weights.npz"] = weights_output("native", dtype);
  } else if (c.save_weights) {
    auto native = weight_arrays(l.layer->weights());
    out.stage_npz("weights.npz", from_native({native.begin(), native.end()}, c.save_weights_format,
                                             d.h, out.path("weights.npz")));
    report.outputs["weights.npz"] = weights_output(to_string(c.save_weights_format), dtype);
  }
  const Inputs<T>& in = l.in;
  if (c.save_inputs && axes.active()) {  // in the files' own N-D layouts
    stage("query.npy", unflatten<T>(axes, in.query, axes.query_shape(d.d_model)));
    if (!d.key_is_query) stage("key.npy", unflatten<T>(axes, in.key, axes.key_shape(d.kdim)));
    if (!d.value_is_key) stage("value.npy", unflatten<T>(axes, in.value, axes.key_shape(d.vdim)));
  } else if (c.save_inputs) {
    // A borrowed input is written from the caller's buffer.
    auto owned = [&](const T* view, const Tensor<T, 3>& tensor, std::size_t L, std::size_t F) {
      if (!view) return tensor;
      Tensor<T, 3> t = Tensor<T, 3>::from_shape({d.B, L, F});
      std::copy(view, view + t.size(), t.data());
      return t;
    };
    stage("query.npy", owned(in.query_view, in.query, d.T, d.d_model));
    if (plan.stack && plan.stack->kind == LayerKind::decoder) stage("memory.npy", l.memory);
    if (!d.key_is_query) stage("key.npy", owned(in.key_view, in.key, d.S, d.kdim));
    if (!d.value_is_key) stage("value.npy", owned(in.value_view, in.value, d.S, d.vdim));
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
  report.tool_version = MHA_VERSION;
  report.config = c;
  report.threads = plan.threads;
  report.dims = d;
  report.use_bias = plan.use_bias;
  report.stack = plan.stack;
  if (progress) progress->begin("load");
  const Loaded<T> l = load_stage<T>(plan, report, warn);
  report.timings.load_ms = ms_since(t_load);

  if (c.average_heads && !c.save_attention && !c.plot && warn)
    warn("average_heads has no effect without save_attention or plot");
  report.scale = l.layer->scale();

  // Outputs go to temporaries first; attention streams to its file block by
  // block as the kernel produces it, so it is never held in memory whole.
  OutputSet out(c.out_dir);
  // Only the files this run will write may not be inputs.
  std::vector<std::string> outputs = {"output.npy", "run.json"};
  if (c.save_attention && !plan.stack) outputs.push_back("attention.npy");
  if (c.save_attention && plan.stack)
    outputs.insert(outputs.end(), {"self_attention.npy", "cross_attention.npy"});
  if (c.save_hidden_states) outputs.push_back("hidden_states.npy");
  if (c.save_inputs && plan.stack) outputs.push_back("memory.npy");
  if (c.plot) outputs.push_back("attention.png");
  if (c.save_weights) outputs.push_back("weights.npz");
  if (c.save_inputs) outputs.insert(outputs.end(), {"query.npy", "key.npy", "value.npy"});
  for (const auto& name : outputs) check_not_input(c, out.path(name));

  if (c.warmup) {
    if (progress) progress->begin("warm-up");
    timed_calls<T>(plan, l, 0);
  }
  auto t_compute = Clock::now();
  Computed<T> r;
  if (progress) progress->begin("compute");
  compute_stage<T>(plan, l, out, report, r, progress);
  report.timings.compute_ms = ms_since(t_compute);
  if (c.repeat > 1) {
    if (progress) progress->begin("repeat");
    report.timings.compute_repeat = RepeatTimes::of(timed_calls<T>(plan, l, c.repeat));
  }

  auto t_write = Clock::now();
  if (progress) progress->begin("write");
  write_stage<T>(plan, l, r, out, report);
  report.timings.write_ms = ms_since(t_write);
  report.peak_rss_bytes = peak_rss_bytes();
  report.flops = run_flops(d, plan.stack);
  const double compute_ms = report.timings.compute_ms;
  report.gflops_per_s =
      compute_ms > 0 ? static_cast<double>(report.flops) / (compute_ms * 1e6) : 0.0;
  const AttentionAxes& axes = plan.axes;
  if (axes.active())  // dims are of the flattened run: B' = batch, T = seq_len, S = kv_seq_len
    report.attention_axes =
        AxesReport{axes.axes(), axes.query_shape(d.d_model), axes.key_shape(d.kdim)};
  if (c.dtype == ComputeType::bfloat16) report.bf16_gemm = bf16_gemm_backend();
  report.blas = blas_load();
  report.kernels = KernelReport{direct_gemm_isa(), vexp_isa()};

  for (auto& [name, file] : report.outputs) {
    const FileChecksum sum = out.checksum(name);
    file.bytes = sum.bytes;
    file.crc32 = crc32_hex(sum.crc32);
  }
  RunResult result;
  out.stage_bytes("run.json", dump_json(to_json(report), 2) + "\n");
  // An earlier run's outputs in out_dir go in the same commit (its inputs stay).
  out.remove_on_commit(
      earlier_run_outputs(out.dir(), [&](const std::string& p) { return input_at(c, p); }));
  out.commit();  // run.json is renamed last: its presence means the run completed
  result.report = std::move(report);
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
  // Before anything is read: a second process on this out_dir stops here.
  const DirLock lock(config.out_dir, kOutDirLock);
  if (config.dtype == ComputeType::float64) return run_typed<double>(plan, t_load, warn, progress);
  return run_typed<float>(plan, t_load, warn,
                          progress);  // float32, or bfloat16 GEMMs within float32
}

}  // namespace mha
