#include "mha/run/run_json.hpp"
#include "mha/io/json_file.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/vexp.hpp"
#include "mha/run/model_job.hpp"

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>

#include "mha/base/error.hpp"
#include "mha/io/checksum.hpp"

namespace mha {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------
// Writing

json number_or_null(double x) {
  return std::isnan(x) ? json(nullptr) : json(x);
}

json optional_number(const std::optional<double>& x) {
  return x ? json(*x) : json(nullptr);
}

const char* attention_kind(const RunReport& r) {
  return r.dims.key_is_query ? "self" : "cross";
}

json source_json(const Source& s) {
  switch (s.kind) {
    case Source::Kind::random:
      return {{"random", s.random}, {"seed", s.seed}};
    case Source::Kind::zeros:
      return {{"zeros", true}};
    case Source::Kind::same_as:
      return {{"same_as", s.same_as}};
    case Source::Kind::file:
      break;
  }
  json j = {{"file", s.file}};
  if (!s.layout.empty()) j["layout"] = s.layout;
  return j;
}

json output_json(const OutputFile& f) {
  json j = json::object();
  if (f.shape) j["shape"] = *f.shape;
  if (f.dtype) j["dtype"] = *f.dtype;
  if (f.layout) j["layout"] = *f.layout;
  if (f.bytes) j["bytes"] = *f.bytes;
  if (f.crc32) j["crc32"] = *f.crc32;
  if (const auto& p = f.plot) {
    j["width"] = p->width;
    j["height"] = p->height;
    j["batch"] = p->batch;
    j["panels"] = p->panels;
    j["cells"] = p->cells;
    j["cell_px"] = p->cell_px;
    j["downsample"] = p->downsample;
    j["reduce"] = p->reduce;
    j["color_scale"] = p->color_scale;
    j["color_range"] = p->color_range;
  }
  return j;
}

// AttentionStats::to_json's layout, from the summary.
json summary_json(const AttentionSummary& s) {
  json heads = json::array();
  for (const HeadStats& h : s.heads) heads.push_back(h.to_json());
  json j = {{"heads", heads}, {"mean", s.mean.to_json()}};
  if (s.averaged_over_heads) j["averaged_over_heads"] = true;
  return j;
}

// ---------------------------------------------------------------------------
// Reading

std::string excerpt(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// One JSON object of the file being read, `where` its place in it
// ("timings_ms", "sources.query"; "" at the top), so that every message
// names the file and the key.
class Reader {
 public:
  Reader(const json& j, const std::string& path, std::string where)
      : j_(j), path_(path), where_(std::move(where)) {}

  bool has(const char* key) const { return j_.contains(key); }
  std::string name(const std::string& key) const {
    return where_.empty() ? key : where_ + "." + key;
  }

  const json& at(const char* key) const {
    const auto it = j_.find(key);
    if (it == j_.end())
      fail_input(path_ + ": key '" + name(key) +
                 "' is missing; expected the run.json `mha run` writes");
    return *it;
  }
  [[noreturn]] void wrong(const std::string& key, const char* expected, const json& got) const {
    fail_input(path_ + ": key '" + key + "': expected " + expected + ", got " + excerpt(got));
  }

  Reader object(const char* key) const { return object_at(at(key), name(key)); }
  Reader object_at(const json& v, const std::string& key) const {
    if (!v.is_object()) wrong(key, "an object", v);
    return Reader(v, path_, key);
  }
  // The elements of an array, each with its name ("layer_stats[2]").
  template <class F>
  void each(const char* key, F read) const {
    const json& v = at(key);
    if (!v.is_array()) wrong(name(key), "a list", v);
    for (std::size_t i = 0; i < v.size(); ++i)
      read(v[i], name(key) + "[" + std::to_string(i) + "]");
  }
  // The members of an object, each with its name ("sources.W_q").
  template <class F>
  void members(const char* key, F read) const {
    const Reader r = object(key);
    for (const auto& [k, v] : r.j_.items()) read(k, r.object_at(v, r.name(k)));
  }

  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) wrong(name(key), "a string", v);
    return v.get<std::string>();
  }
  bool boolean(const char* key) const {
    const json& v = at(key);
    if (!v.is_boolean()) wrong(name(key), "true or false", v);
    return v.get<bool>();
  }
  double number(const char* key) const {
    const json& v = at(key);
    if (!v.is_number()) wrong(name(key), "a number", v);
    return v.get<double>();
  }
  // null stands for a value that is not finite.
  std::optional<double> number_or_null(const char* key) const {
    const json& v = at(key);
    if (v.is_null()) return std::nullopt;
    if (!v.is_number()) wrong(name(key), "a number or null", v);
    return v.get<double>();
  }
  std::uint64_t count(const char* key) const { return count_at(at(key), name(key)); }
  std::uint64_t count_at(const json& v, const std::string& key) const {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    // As made in memory (not parsed), a size may be a signed integer.
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
      wrong(key, "a non-negative integer", v);
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  }
  std::vector<std::size_t> counts(const char* key) const {
    std::vector<std::size_t> out;
    each(key, [&](const json& v, const std::string& where) { out.push_back(count_at(v, where)); });
    return out;
  }
  const json& value() const { return j_; }
  const std::string& path() const { return path_; }
  const std::string& where() const { return where_; }

 private:
  const json& j_;
  const std::string& path_;
  std::string where_;
};

Source read_source(const Reader& r) {
  if (r.has("file"))
    return Source::from_file(r.string("file"), r.has("layout") ? r.string("layout") : "");
  if (r.has("random")) return Source::drawn(r.string("random"), r.count("seed"));
  if (r.has("same_as")) return Source::alias(r.string("same_as"));
  if (r.has("zeros") && r.boolean("zeros")) return Source::zeros();
  r.wrong(r.where(), "\"file\", \"random\", \"same_as\" or \"zeros\": true", r.value());
}

// Two numbers of one kind, as attention.png's cells, cell_px and color_range.
template <class T>
std::array<T, 2> read_two(const Reader& r, const char* key) {
  std::array<T, 2> out{};
  const json& v = r.at(key);
  if (!v.is_array() || v.size() != 2) r.wrong(r.name(key), "a list of two numbers", v);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string where = r.name(key) + "[" + std::to_string(i) + "]";
    if constexpr (std::is_floating_point_v<T>) {
      if (!v[i].is_number()) r.wrong(where, "a number", v[i]);
      out[i] = v[i].get<T>();
    } else {
      out[i] = static_cast<T>(r.count_at(v[i], where));
    }
  }
  return out;
}

OutputFile read_output(const Reader& r) {
  OutputFile f;
  if (r.has("shape")) f.shape = r.counts("shape");
  if (r.has("dtype")) f.dtype = r.string("dtype");
  if (r.has("layout")) f.layout = r.string("layout");
  if (r.has("bytes")) f.bytes = r.count("bytes");
  if (r.has("crc32")) f.crc32 = r.string("crc32");
  if (r.has("width")) {  // attention.png
    PlotFile& p = f.plot.emplace();
    p.width = static_cast<int>(r.count("width"));
    p.height = static_cast<int>(r.count("height"));
    p.batch = r.count("batch");
    p.panels = r.count("panels");
    p.cells = read_two<std::size_t>(r, "cells");
    p.cell_px = read_two<int>(r, "cell_px");
    p.downsample = r.count("downsample");
    p.reduce = r.string("reduce");
    p.color_scale = r.string("color_scale");
    p.color_range = read_two<double>(r, "color_range");
  }
  return f;
}

// HeadStats::to_json's fields; a mean that is null (no row counted) is NaN.
HeadStats read_head(const Reader& r) {
  HeadStats h;
  auto mean = [&](const char* key) { return r.number_or_null(key).value_or(kNaN); };
  h.entropy = mean("entropy");
  h.entropy_fraction = mean("entropy_fraction");
  h.max_weight = mean("max_weight");
  h.distance = mean("distance");
  h.diagonal = mean("diagonal");
  h.first_key = mean("first_key");
  // Files written before these two existed say nothing of causality.
  h.max_above_diagonal = r.has("max_above_diagonal") ? mean("max_above_diagonal") : kNaN;
  h.causal = r.has("causal") && r.boolean("causal");
  h.rows = r.count("rows");
  h.skipped_rows = r.count("skipped_rows");
  return h;
}

AttentionSummary read_summary(const Reader& r) {
  AttentionSummary s;
  r.each("heads", [&](const json& v, const std::string& where) {
    s.heads.push_back(read_head(r.object_at(v, where)));
  });
  s.mean = read_head(r.object("mean"));
  s.averaged_over_heads = r.has("averaged_over_heads") && r.boolean("averaged_over_heads");
  return s;
}

NpyStats read_npy_stats(const Reader& r) {
  NpyStats s;
  s.crc32 = r.string("crc32");
  s.mean = r.number_or_null("mean");
  s.std = r.number_or_null("std");
  s.min = r.number_or_null("min");
  s.max = r.number_or_null("max");
  return s;
}

BlasInfo read_blas(const Reader& r) {
  BlasInfo b;
  b.library = r.string("library");
  b.core = r.string("core");
  b.coretype = r.has("coretype") ? r.string("coretype") : "";
  b.coretype_source = r.string("coretype_source");
  b.threading = r.string("threading");
  b.config = r.has("config") ? r.string("config") : "";
  return b;
}

// The config and what was resolved into it (RunReport::resolved_config, read
// back): the sizes, scale, use_bias, threads and the stack's shape.
void read_config(const Reader& top, RunReport& report) {
  const Reader c = top.object("config");
  report.config.apply(c.value(), top.path() + ": config");
  Dims& d = report.dims;
  d.h = c.count("h");
  d.d_model = c.count("d_model");
  d.d_k = c.count("d_k");
  d.d_v = c.count("d_v");
  d.kv_heads = c.count("kv_heads");
  d.kdim = c.count("kdim");
  d.vdim = c.count("vdim");
  d.d_out = c.count("d_out");
  d.B = c.count("batch");
  d.T = c.count("seq_len");
  d.S = c.count("kv_seq_len");
  report.scale = c.number("scale");
  report.use_bias = c.boolean("use_bias");
  report.threads = report.config.threads;
  const std::string attention = top.string("attention");
  if (attention != "self" && attention != "cross")
    top.wrong("attention", "\"self\" or \"cross\"", top.at("attention"));
  d.key_is_query = attention == "self";
  // The value is the key tensor when its source says so (a stack has no
  // value source: its attentions are self-attention).
  const auto value = report.sources.find("value");
  d.value_is_key =
      value == report.sources.end() ? d.key_is_query : value->second.kind == Source::Kind::same_as;
  if (report.config.layer == LayerKind::attention) return;
  StackShape& s = report.stack.emplace();
  s.kind = report.config.layer;
  s.num_layers = c.count("num_layers");
  s.d_ff = c.count("d_ff");
  s.final_norm = c.boolean("final_norm");
  s.cross = d;
  if (s.kind == LayerKind::decoder) {  // kv_seq_len is the memory's; as plan_stack makes them
    s.cross.key_is_query = false;
    s.cross.value_is_key = true;
    s.cross.kv_heads = 0;
    d.S = d.T;
  }
  s.self = d;
}

void add_extra(ordered_json& row, const json& extra) {
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) row[k] = v;
}

}  // namespace

json to_json(const BlasInfo& b) {
  return {{"library", b.library},     {"core", b.core},
          {"coretype", b.coretype},   {"coretype_source", b.coretype_source},
          {"threading", b.threading}, {"config", b.config}};
}

json to_json(const KernelReport& k) {
  return {{"direct_gemm", k.direct_gemm}, {"exp", k.exp}};
}

json to_json(const RunReport& r) {
  json sources = json::object();
  for (const auto& [name, source] : r.sources) sources[name] = source_json(source);
  json outputs = json::object();
  for (const auto& [name, file] : r.outputs) outputs[name] = output_json(file);
  json report = {
      {"schema_version", kRunSchemaVersion},
      {"tool", {{"name", "mha"}, {"version", r.tool_version}}},
      {"status", "complete"},
      {"config", r.resolved_config().to_json()},
      {"attention", attention_kind(r)},
      {"sources", sources},
      {"outputs", outputs},
      {"flops", r.flops},
      {"timings_ms",
       {{"load", r.timings.load_ms},
        {"compute", r.timings.compute_ms},
        {"write", r.timings.write_ms}}},
      {"gflops_per_s", r.gflops_per_s},
      {"peak_rss_bytes", r.peak_rss_bytes},
  };
  if (const auto& rep = r.timings.compute_repeat)
    report["timings_ms"]["compute_repeat"] = {{"repeat", rep->samples.size()},
                                              {"median", rep->median},
                                              {"min", rep->min},
                                              {"max", rep->max},
                                              {"samples", rep->samples}};
  if (r.attention_stats) report["attention_stats"] = summary_json(*r.attention_stats);
  if (const auto& s = r.output_stats)
    report["output_stats"] = {{"crc32", s->crc32},
                              {"mean", optional_number(s->mean)},
                              {"std", optional_number(s->std)},
                              {"min", optional_number(s->min)},
                              {"max", optional_number(s->max)}};
  if (!r.layer_stats.empty()) {
    json layers = json::array();
    for (const LayerAttention& l : r.layer_stats) {
      json layer = {{"self_attention", summary_json(l.self_attention)}};
      if (l.cross_attention) layer["cross_attention"] = summary_json(*l.cross_attention);
      layers.push_back(std::move(layer));
    }
    report["layer_stats"] = std::move(layers);
  }
  if (const auto& a = r.attention_axes)
    report["attention_axes"] = {
        {"axes", a->axes}, {"query_shape", a->query_shape}, {"key_shape", a->key_shape}};
  if (r.bf16_gemm) report["bf16_gemm"] = *r.bf16_gemm;
  report["blas"] = to_json(r.blas);
  if (r.kernels) report["kernels"] = to_json(*r.kernels);
  return report;
}

RunReport run_report_from_json(const json& j, const std::string& path) {
  if (!j.is_object())
    fail_input(path + ": not a JSON object; expected the run.json `mha run` writes");
  const Reader top(j, path, "");
  RunReport r;
  const json& version = top.at("schema_version");
  if (version != kRunSchemaVersion)
    top.wrong("schema_version", std::to_string(kRunSchemaVersion).c_str(), version);
  r.tool_version = top.object("tool").string("version");
  if (top.string("status") != "complete") top.wrong("status", "\"complete\"", top.at("status"));
  top.members("sources",
              [&](const std::string& name, const Reader& s) { r.sources[name] = read_source(s); });
  read_config(top, r);  // after the sources: they say whether the value is the key
  top.members("outputs",
              [&](const std::string& name, const Reader& f) { r.outputs[name] = read_output(f); });
  r.flops = top.count("flops");
  const Reader t = top.object("timings_ms");
  r.timings.load_ms = t.number("load");
  r.timings.compute_ms = t.number("compute");
  r.timings.write_ms = t.number("write");
  if (t.has("compute_repeat")) {  // repeat > 1; the summary is recomputed from the samples
    const Reader rep = t.object("compute_repeat");
    std::vector<double> samples;
    rep.each("samples", [&](const json& v, const std::string& where) {
      if (!v.is_number() || v.get<double>() < 0) rep.wrong(where, "a non-negative number", v);
      samples.push_back(v.get<double>());
    });
    if (samples.empty() || samples.size() != rep.count("repeat"))
      rep.wrong(rep.name("samples"), "a list of `repeat` timings", rep.at("samples"));
    r.timings.compute_repeat = RepeatTimes::of(std::move(samples));
  }
  r.gflops_per_s = top.number("gflops_per_s");
  r.peak_rss_bytes = top.count("peak_rss_bytes");
  if (top.has("output_stats")) r.output_stats = read_npy_stats(top.object("output_stats"));
  if (top.has("attention_stats")) r.attention_stats = read_summary(top.object("attention_stats"));
  if (top.has("layer_stats"))
    top.each("layer_stats", [&](const json& v, const std::string& where) {
      const Reader l = top.object_at(v, where);
      LayerAttention& layer = r.layer_stats.emplace_back();
      layer.self_attention = read_summary(l.object("self_attention"));
      if (l.has("cross_attention"))
        layer.cross_attention = read_summary(l.object("cross_attention"));
    });
  if (top.has("attention_axes")) {
    const Reader a = top.object("attention_axes");
    r.attention_axes = AxesReport{a.counts("axes"), a.counts("query_shape"), a.counts("key_shape")};
  }
  if (top.has("bf16_gemm")) r.bf16_gemm = top.string("bf16_gemm");
  r.blas = read_blas(top.object("blas"));
  if (top.has("kernels")) {
    const Reader k = top.object("kernels");
    r.kernels = KernelReport{k.string("direct_gemm"), k.string("exp")};
  }
  return r;
}

RunReport read_run_report(const std::string& path) {
  const json j = read_json_file(path, json_kind::run_json);
  if (!j.is_object())
    fail_input(path + ": not a JSON object; expected the run.json `mha run` writes");
  return run_report_from_json(j, path);
}

namespace {

// A results row's first columns: the layout version, the run, its status and swept values.
ordered_json row_head(const Sweep& sweep, const SweepRun& run, const char* status) {
  ordered_json row;
  row["schema_version"] = kResultsSchemaVersion;
  row["index"] = run.index;
  row["name"] = run.name;
  row["status"] = status;
  for (const auto& key : sweep.swept_keys) row[key] = run.values[key];
  return row;
}

}  // namespace

ordered_json result_row(const Sweep& sweep, const SweepRun& run, const RunReport& report,
                        const json& extra) {
  ordered_json row = row_head(sweep, run, "ok");
  // run.json's spelling of each config value (causal false or "top-left", ...).
  const json config = report.resolved_config().to_json();
  for (const char* key :
       {"h", "d_model", "d_k", "d_v", "kdim", "vdim", "d_out", "batch", "seq_len", "kv_seq_len",
        "dtype", "causal", "masked_rows", "seed", "threads", "scale"})
    if (!run.values.contains(key)) row[key] = config[key];  // swept keys keep their spelling
  row["attention"] = attention_kind(report);
  row["flops"] = report.flops;
  row["load_ms"] = report.timings.load_ms;
  row["compute_ms"] = report.timings.compute_ms;
  if (const auto& rep = report.timings.compute_repeat) {
    row["compute_ms_median"] = rep->median;
    row["compute_ms_min"] = rep->min;
    row["compute_ms_max"] = rep->max;
  }
  row["write_ms"] = report.timings.write_ms;
  row["gflops_per_s"] = report.gflops_per_s;
  row["peak_rss_bytes"] = report.peak_rss_bytes;
  if (const auto& out = report.output_stats) {
    row["output_crc32"] = out->crc32;
    row["output_mean"] = optional_number(out->mean);
    row["output_std"] = optional_number(out->std);
    row["output_min"] = optional_number(out->min);
    row["output_max"] = optional_number(out->max);
  }
  if (const auto& stats = report.attention_stats) {
    const HeadStats& mean = stats->mean;
    row["attention_entropy"] = number_or_null(mean.entropy);
    row["attention_entropy_fraction"] = number_or_null(mean.entropy_fraction);
    row["attention_max_weight"] = number_or_null(mean.max_weight);
    row["attention_distance"] = number_or_null(mean.distance);
    row["attention_diagonal"] = number_or_null(mean.diagonal);
    row["attention_first_key"] = number_or_null(mean.first_key);
    row["attention_causal"] = mean.causal;
    json per_head = json::array();
    for (const HeadStats& head : stats->heads) per_head.push_back(number_or_null(head.entropy));
    row["attention_entropy_per_head"] = per_head;
  }
  row["run_dir"] = run.dir;
  add_extra(row, extra);
  return row;
}

ordered_json model_result_row(const Sweep& sweep, const SweepRun& run, const json& run_json,
                              const json& extra) {
  ordered_json row = row_head(sweep, run, "ok");
  const auto copy = [&](const json& from, const char* key, const std::string& as) {
    if (from.is_object() && from.contains(key) && !from[key].is_null()) row[as] = from[key];
  };
  const json none = json::object();
  const auto object = [&](const json& from, const char* key) -> const json& {
    return from.is_object() && from.contains(key) && from[key].is_object() ? from[key] : none;
  };
  copy(run_json, "mode", "mode");
  const json& model = object(run_json, "model");
  for (const char* key : {"model_type", "num_layers", "d_model", "h", "head_dim", "vocab_size"})
    copy(model, key, key);
  const json& input = object(run_json, "input");
  copy(input, "batch", "batch");
  copy(input, "seq_len", "seq_len");
  if (input.contains("lengths") && input["lengths"].is_array()) {
    std::uint64_t tokens = 0;
    for (const json& n : input["lengths"])
      if (n.is_number_unsigned()) tokens += n.get<std::uint64_t>();
    row["tokens"] = tokens;
  }
  copy(run_json, "threads", "threads");
  // A model run's timings, or an analysis's total and each method's.
  const json& timings = object(run_json, "timings");
  copy(timings, "read_weights_ms", "read_weights_ms");
  copy(timings, "forward_ms", "forward_ms");
  copy(timings, "total_ms", "total_ms");
  copy(run_json, "total_ms", "total_ms");
  if (run_json.contains("top_k") && run_json["top_k"].is_array() && !run_json["top_k"].empty() &&
      run_json["top_k"][0].is_array() && !run_json["top_k"][0].empty()) {
    const json& top = run_json["top_k"][0][0];  // the first row's most likely next token
    copy(top, "token", "next_token");
    copy(top, "p", "next_token_p");
  }
  // Each method's numbers in its summary, and their columns.
  static const struct {
    const char *method, *key, *column;
  } kSummaryColumns[] = {{"loss", "mean", "loss"},
                         {"loss", "perplexity", "perplexity"},
                         {"logit_lens", "top1_accuracy_last_state", "logit_lens_top1"},
                         {"logit_lens", "top1_accuracy_per_state", "logit_lens_top1_per_layer"},
                         {"ablation", "clean", "ablation_clean"},
                         {"ablation", "ms", "ablation_ms"},
                         {"patching", "clean", "patching_clean"},
                         {"patching", "corrupt", "patching_corrupt"},
                         {"patching", "ms", "patching_ms"},
                         {"corpus", "texts", "corpus_texts"},
                         {"corpus", "tokens", "corpus_tokens"},
                         {"corpus", "ms", "corpus_ms"}};
  const json& summary = object(run_json, "summary");
  for (const auto& c : kSummaryColumns) copy(object(summary, c.method), c.key, c.column);
  const json& corpus = object(summary, "corpus");
  for (const auto& [stat, values] : object(corpus, "per_layer").items())
    row["corpus_" + stat + "_per_layer"] = values;
  row["run_dir"] = run.dir;
  add_extra(row, extra);
  return row;
}

ordered_json failed_row(const Sweep& sweep, const SweepRun& run, int exit_code,
                        const std::string& error, const json& extra) {
  ordered_json row = row_head(sweep, run, "failed");
  row["run_dir"] = run.dir;
  row["exit_code"] = exit_code;
  row["error"] = error;
  add_extra(row, extra);
  return row;
}

std::optional<ModelRunView> read_model_run_view(const std::string& path) {
  json j = read_json_file(path, json_kind::run_json);
  // `mha run --model` and `mha analyze` write tokens.json beside their run.json.
  if (!j.is_object() || !j.contains("mode") || (j["mode"] != "model" && j["mode"] != "analyze"))
    return std::nullopt;
  ModelRunView v;
  const bool analysis = j["mode"] == "analyze";
  v.run_json = std::move(j);
  const std::string tokens = (std::filesystem::path(path).parent_path() / "tokens.json").string();
  std::error_code ec;
  if (analysis && !std::filesystem::exists(tokens, ec)) return v;  // a corpus: no one batch
  const json t = read_json_file(tokens, json_kind::run_json);
  if (!t.is_object() || !t.contains("tokens") || !t["tokens"].is_array())
    fail_input(tokens + ": expected {\"tokens\": [[token strings of each row]]}");
  for (const json& row : t["tokens"]) {
    if (!row.is_array()) fail_input(tokens + ": \"tokens\" is not a list of lists of strings");
    v.tokens.emplace_back();
    for (const json& s : row) {
      if (!s.is_string()) fail_input(tokens + ": \"tokens\" is not a list of lists of strings");
      v.tokens.back().push_back(s.get<std::string>());
    }
  }
  // An encoder-decoder's decoder inputs: the queries of its decoder and cross maps.
  if (t.contains("target") && t["target"].is_object()) {
    const json& target = t["target"];
    for (const auto& [key, rows] : {std::pair{"tokens", &v.target_tokens},
                                    {"pieces", &v.target_pieces},
                                    {"label_tokens", &v.label_tokens}}) {
      if (!target.contains(key) || !target[key].is_array()) continue;
      for (const json& row : target[key]) {
        rows->emplace_back();
        if (row.is_array())
          for (const json& s : row)
            rows->back().push_back(s.is_string() ? s.get<std::string>() : "");
      }
    }
  }
  // Each row's real tokens: "lengths" (mha pads rows on the right), else each row's tokens,
  // which tokens.json cuts at its length.
  const auto lengths_of = [&](const json& side, const std::vector<std::vector<std::string>>& rows,
                              const char* where) {
    std::vector<std::size_t> n;
    if (!side.contains("lengths")) {
      for (const auto& row : rows) n.push_back(row.size());
      return n;
    }
    const json& l = side["lengths"];
    if (!l.is_array() || l.size() != rows.size())
      fail_input(tokens + ": " + where + " is not a list of " + std::to_string(rows.size()) +
                 " row lengths");
    const json* padded = side.contains("padded_length") ? &side["padded_length"] : nullptr;
    for (const json& x : l) {
      if (!x.is_number_unsigned() || (padded && padded->is_number_unsigned() &&
                                      x.get<std::size_t>() > padded->get<std::size_t>()))
        fail_input(tokens + ": " + where + " holds " + x.dump() +
                   "; expected each row's count of real tokens, at most \"padded_length\"");
      n.push_back(x.get<std::size_t>());
    }
    return n;
  };
  v.lengths = lengths_of(t, v.tokens, "\"lengths\"");
  if (t.contains("target") && t["target"].is_object())
    v.target_lengths = lengths_of(t["target"], v.target_tokens, "\"target\" \"lengths\"");
  // "pieces" (the raw tokens): the page shows them on hover; older tokens.json lack them.
  if (t.contains("pieces") && t["pieces"].is_array() && t["pieces"].size() == v.tokens.size()) {
    for (const json& row : t["pieces"]) {
      v.pieces.emplace_back();
      for (const json& s : row)
        v.pieces.back().push_back(s.is_string() ? s.get<std::string>() : "");
    }
  }
  return v;
}

json tokens_json(const ModelInput& in) {
  json ids = json::array(), tokens = json::array(), pieces = json::array();
  const auto row = [&](const std::vector<std::string>& r, std::size_t b) {
    return std::vector<std::string>(r.begin(),
                                    r.begin() + static_cast<std::ptrdiff_t>(in.lengths[b]));
  };
  for (std::size_t b = 0; b < in.B; ++b) {
    const auto first = in.ids.begin() + static_cast<std::ptrdiff_t>(b * in.T);
    ids.push_back(
        std::vector<std::int32_t>(first, first + static_cast<std::ptrdiff_t>(in.lengths[b])));
    tokens.push_back(row(in.tokens[b], b));
    pieces.push_back(row(b < in.pieces.size() ? in.pieces[b] : in.tokens[b], b));
  }
  return {{"ids", ids},
          {"lengths", in.lengths},
          {"tokens", tokens},
          {"pieces", pieces},
          {"padded_length", in.T}};
}

json seq2seq_tokens_json(const ModelInput& source, const ModelInput& decoder,
                         const ModelInput& labels) {
  json j = tokens_json(source);
  j["target"] = tokens_json(decoder);
  json rows = json::array();
  for (std::size_t b = 0; b < labels.B; ++b) {
    const auto first = labels.ids.begin() + static_cast<std::ptrdiff_t>(b * labels.T);
    rows.push_back(
        std::vector<std::int32_t>(first, first + static_cast<std::ptrdiff_t>(labels.lengths[b])));
  }
  j["target"]["labels"] = rows;
  if (labels.tokens.size() == labels.B) {  // their display texts, each row cut at its length
    json names = json::array();
    for (std::size_t b = 0; b < labels.B; ++b)
      names.push_back(std::vector<std::string>(
          labels.tokens[b].begin(),
          labels.tokens[b].begin() +
              static_cast<std::ptrdiff_t>(std::min(labels.lengths[b], labels.tokens[b].size()))));
    j["target"]["label_tokens"] = names;
  }
  return j;
}

json compute_json(ComputeType dtype) {
  json j = {{"blas", to_json(blas_load())},
            {"kernels", to_json(KernelReport{direct_gemm_isa(), vexp_isa()})}};
  if (dtype == ComputeType::bfloat16) j["bf16_gemm"] = bf16_gemm_backend();
  return j;
}

json image_input_json(const ModelInput& in, const ModelConfig& c) {
  json images = json::array();
  for (const ModelInput::Image& im : in.image_sources)
    images.push_back({{"path", im.path.empty() ? json(nullptr) : json(im.path)},
                      {"bytes", im.bytes},
                      {"crc32", im.crc32.empty() ? json(nullptr) : json(im.crc32)},
                      {"width", im.width},
                      {"height", im.height},
                      {"format", im.format},
                      {"converted", im.converted}});
  return {{"images", images},
          {"patch_grid", {c.patch_rows(), c.patch_cols()}},
          {"patch_size", c.patch_size},
          {"prefix_tokens", c.prefix_tokens()}};
}

json attention_json(const ModelConfig& c, const std::vector<std::size_t>& layers,
                    const std::vector<std::size_t>& heads) {
  json windows = json::array();
  for (std::size_t l : layers) windows.push_back(c.layer_sliding(l) ? c.sliding_window : 0);
  return {{"layers", layers},          {"heads", heads},     {"scale", c.attn_scale},
          {"softcap", c.attn_softcap}, {"causal", c.causal}, {"windows", windows}};
}

json preprocessing_json(const ImageProcessor& p) {
  return {{"config", p.path.empty() ? json(nullptr) : json(p.path)},
          {"processor", p.processor},
          {"to_rgb", "PIL's convert(\"RGB\"): grey repeated, palette looked up, alpha dropped"},
          {"do_resize", p.do_resize},
          {"size", {{"height", p.height}, {"width", p.width}}},
          {"resample", p.resample},
          {"resample_name", resample_name(p.resample)},
          {"do_center_crop", p.do_center_crop},
          {"crop_size", {{"height", p.crop_height}, {"width", p.crop_width}}},
          {"do_rescale", p.do_rescale},
          {"rescale_factor", p.rescale_factor},
          {"do_normalize", p.do_normalize},
          {"image_mean", p.mean},
          {"image_std", p.std}};
}

json to_json(const ModelRunReport& r) {
  const ModelConfig& c = r.model;
  json files = json::array();
  for (const auto& f : r.files)
    files.push_back({{"path", f.path}, {"bytes", f.bytes}, {"crc32", f.crc32}});
  json top = json::array();
  for (std::size_t b = 0; b < r.top_k.size(); ++b) {
    json row = json::array();
    for (std::size_t i = 0; i < r.top_k[b].size(); ++i) {
      json e = {{"id", r.top_k[b][i].id}, {"p", r.top_k[b][i].p}};
      if (c.classifier) {  // a class: its label (name_top_k)
        e["label"] = b < r.top_k_tokens.size() ? json(r.top_k_tokens[b][i]) : json(nullptr);
      } else {
        e["token"] = b < r.top_k_tokens.size() ? json(r.top_k_tokens[b][i]) : json(nullptr);
        e["piece"] = b < r.top_k_pieces.size() ? json(r.top_k_pieces[b][i]) : json(nullptr);
      }
      row.push_back(e);
    }
    top.push_back(row);
  }
  json j;
  j["mode"] = "model";
  j["version"] = MHA_VERSION;
  j["config"] = to_json(r.config);
  j["model"] = {{"dir", r.dir},
                {"model_type", c.model_type},
                {"num_layers", c.num_layers},
                {"d_model", c.d_model},
                {"h", c.h},
                {"kv_heads", c.kv_heads},
                {"head_dim", c.head_dim},
                {"d_ff", c.d_ff},
                {"vocab_size", c.vocab_size},
                {"max_positions", c.max_positions},
                {"causal", c.causal},
                {"sliding_window", c.sliding_window},
                {"stored_dtypes", r.stored_dtypes},
                {"files", files}};
  if (!r.gguf_architecture.empty()) j["model"]["gguf_architecture"] = r.gguf_architecture;
  if (c.classifier) j["model"]["num_labels"] = c.num_labels;
  j["input"] = {{"batch", r.input.B},
                {"seq_len", r.input.T},
                {"lengths", r.input.lengths},
                {"tokenizer", r.input.tokenizer.empty() ? json(nullptr) : json(r.input.tokenizer)}};
  if (!r.input.image_sources.empty()) j["input"].update(image_input_json(r.input, c));
  if (r.processor) j["preprocessing"] = preprocessing_json(*r.processor);
  if (!r.map_layers.empty()) j["attention"] = attention_json(c, r.map_layers, r.map_heads);
  if (c.encoder_decoder) {
    j["model"]["encoder_decoder"] = true;
    j["model"]["num_decoder_layers"] = c.num_decoder_layers;
    j["model"]["decoder_start_token_id"] = c.decoder_start_token_id;
    j["target"] = {{"batch", r.target.B},
                   {"seq_len", r.target.T},
                   {"lengths", r.target.lengths},
                   {"decoder_start_token_id", c.decoder_start_token_id}};
  }
  if (!r.top_k.empty()) j["top_k"] = top;
  j["threads"] = r.threads;
  j["dtype"] = to_string(r.config.dtype);
  j.update(compute_json(r.config.dtype));
  j["memory"] = {{"estimate_bytes", r.memory_estimate}, {"max_memory", r.max_memory}};
  j["timings"] = {
      {"read_weights_ms", r.read_ms}, {"forward_ms", r.forward_ms}, {"total_ms", r.total_ms}};
  json outputs = json::object();
  for (const auto& [name, sum] : r.checksums)
    outputs[name] = {{"bytes", sum.bytes}, {"crc32", crc32_hex(sum.crc32)}};
  j["outputs"] = outputs;
  return j;
}

}  // namespace mha
