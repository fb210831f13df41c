#include "mha/run/sweep.hpp"
#include "mha/io/json_file.hpp"
#include "mha/io/json_text.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/config/attention_axes.hpp"
#include "mha/config/config.hpp"
#include "mha/config/dims.hpp"
#include "mha/config/memory.hpp"
#include "mha/config/weight_formats.hpp"
#include "mha/config/weights.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/output_set.hpp"
#include "mha/kernel/mask.hpp"
#include "mha/run/model_job.hpp"
#include "mha/run/plan.hpp"
#include "mha/run/run_json.hpp"

namespace mha {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// A sweep's runs are expanded in memory (their configs, names and directories):
// at most this many, counted from the lists' lengths before any is expanded.
constexpr std::size_t kMaxRuns = 100000;
// ... and at most this many JSON values in their configs together (each run's
// is the base plus one value of every axis): a base holding a long list is
// copied into every run.
constexpr double kMaxRunValues = 4e6;
constexpr std::size_t kMaxNameLength = 200;
const std::vector<std::string> kTopKeys = {"base", "grid", "zip", "name", "out_dir", "description"};
// Keys that may differ between a finished run and its plan without changing
// its results, so --resume still counts the run as done.
const std::set<std::string> kIrrelevantKeys = {"threads", "out_dir", "max_memory"};

bool is_config_key(const std::string& key) {
  const auto& keys = config_keys();
  return std::any_of(keys.begin(), keys.end(), [&](const ConfigKey& k) { return key == k.name; });
}

// Whether `key` may be given to a run of the sweep: a model job's keys when
// it sweeps models, else a run config's.
bool is_run_key(const std::string& key, bool models) {
  return models ? is_model_job_key(key) : is_config_key(key);
}

std::string suggestion(const std::string& key, bool models) {
  const std::string hint = models ? nearest_key(key, model_job_keys()) : nearest_key(key);
  return hint.empty() ? "" : " (did you mean '" + hint + "'?)";
}

// An unknown key's message: a key of the other kind of sweep says so.
std::string unknown_key(const std::string& key, bool models) {
  if (models && is_config_key(key))
    return "'" + key + "' is not a key of a model run (the model's config.json sets the layer)";
  if (!models && is_model_job_key(key))
    return "'" + key + "' is a key of model runs; give \"model\" in \"base\" or \"grid\"";
  return std::string(models ? "unknown key of a model run '" : "unknown config key '") + key + "'" +
         suggestion(key, models);
}

// Keys whose values are paths: a run name shows the last part.
const std::set<std::string> kPathKeys = {"model", "tokens", "texts", "input", "weights"};

// A value as it appears in a run name: strings bare (a path by its last
// part), numbers as JSON writes them, lists joined with ','.
std::string name_part(const std::string& key, const json& v) {
  if (v.is_string()) {
    const std::string text = v.get<std::string>();
    if (!kPathKeys.count(key)) return text;
    const fs::path p = fs::path(text).lexically_normal();
    const std::string last = (p.has_filename() ? p : p.parent_path()).filename().string();
    return last.empty() ? text : last;
  }
  if (v.is_array()) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + name_part(key, x);
    return s;
  }
  return v.dump();
}

// Run names become directory names: keep them to a portable alphabet.
std::string sanitize(const std::string& name) {
  std::string s;
  for (char c : name)
    s += (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("._=+-,", c)) ? c : '-';
  if (s.empty() || s[0] == '.') s = "run" + s;
  if (s.size() > kMaxNameLength) s.resize(kMaxNameLength);
  return s;
}

// One axis of the product: a grid key, or a zip group advancing together.
struct Axis {
  std::vector<std::string> keys;
  std::vector<std::vector<json>> values;  // values[k][i]: key k at step i
  std::size_t size() const { return values.empty() ? 0 : values[0].size(); }
};

std::vector<json> list_values(const ordered_json& v, const std::string& where) {
  if (!v.is_array() || v.empty())
    fail_input(where + ": expected a non-empty list of values, got " + v.dump());
  std::vector<json> out;
  for (const auto& x : v) out.push_back(json::parse(x.dump()));
  return out;
}

void check_swept_key(const std::string& key, const std::string& where,
                     const std::set<std::string>& seen, bool models) {
  if (key == "out_dir")
    fail_input(where +
               ": 'out_dir' cannot be swept; every run gets out_dir/NAME (set the "
               "sweep's \"out_dir\" at the top level)");
  if (!is_run_key(key, models)) fail_input(where + ": " + unknown_key(key, models));
  if (seen.count(key)) fail_input(where + ": '" + key + "' is swept more than once");
}

Axis zip_group(const ordered_json& group, const std::string& where, std::set<std::string>& seen,
               bool models) {
  if (!group.is_object() || group.empty())
    fail_input(where + ": expected an object of key -> list, all lists of one length");
  Axis axis;
  for (const auto& [key, values] : group.items()) {
    check_swept_key(key, where, seen, models);
    seen.insert(key);
    axis.keys.push_back(key);
    axis.values.push_back(list_values(values, where + ": '" + key + "'"));
    if (axis.values.back().size() != axis.values.front().size())
      fail_input(where + ": '" + key + "' has " + std::to_string(axis.values.back().size()) +
                 " values but '" + axis.keys.front() + "' has " +
                 std::to_string(axis.values.front().size()) +
                 "; zipped lists advance together and need one length");
  }
  return axis;
}

// Fills a "name" template: {key} is the run's value of a swept or base key,
// {index} its index.
std::string fill_template(const std::string& tmpl, const SweepRun& run, const json& base,
                          const std::string& where) {
  std::string out;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] != '{') {
      if (tmpl[i] == '}') fail_input(where + ": '}' without '{' in \"" + tmpl + "\"");
      out += tmpl[i];
      continue;
    }
    const auto close = tmpl.find('}', i);
    if (close == std::string::npos) fail_input(where + ": '{' without '}' in \"" + tmpl + "\"");
    const std::string key = tmpl.substr(i + 1, close - i - 1);
    if (key == "index") {
      out += std::to_string(run.index);
    } else if (run.values.contains(key)) {
      out += name_part(key, run.values[key]);
    } else if (base.contains(key)) {
      out += name_part(key, base[key]);
    } else {
      fail_input(where + ": unknown placeholder {" + key +
                 "}; expected {index} or a key of \"grid\", \"zip\" or \"base\"");
    }
    i = close;
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail_input(path + ": is a directory; expected a sweep file");
  // Bounded as every JSON file is (16 MiB): /dev/zero is refused, not read forever.
  return read_json_text(path, json_kind::sweep_file);
}

std::string csv_cell(const ordered_json& v) {
  std::string s = v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump();
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Whether "model" is given in the base, the grid or a zip group.
bool sweeps_models(const ordered_json& file) {
  const auto has_model = [](const ordered_json& o) { return o.is_object() && o.contains("model"); };
  if (file.contains("base") && has_model(file["base"])) return true;
  if (file.contains("grid") && has_model(file["grid"])) return true;
  if (!file.contains("zip")) return false;
  const ordered_json& zip = file["zip"];
  if (!zip.is_array()) return has_model(zip);
  return std::any_of(zip.begin(), zip.end(), has_model);
}

// The product's axes in file order: each grid key, then each zip group.
std::vector<Axis> sweep_axes(const ordered_json& file, const std::string& path, bool models) {
  std::vector<Axis> axes;
  std::set<std::string> seen;
  if (file.contains("grid")) {
    const auto& grid = file["grid"];
    if (!grid.is_object())
      fail_input(path + ": \"grid\" must be an object of key -> list of values");
    for (const auto& [key, values] : grid.items()) {
      const std::string where = path + ": grid";
      check_swept_key(key, where, seen, models);
      seen.insert(key);
      axes.push_back({{key}, {list_values(values, where + ": '" + key + "'")}});
    }
  }
  if (file.contains("zip")) {
    const auto& zip = file["zip"];
    if (zip.is_array()) {
      for (std::size_t g = 0; g < zip.size(); ++g)
        axes.push_back(zip_group(zip[g], path + ": zip[" + std::to_string(g) + "]", seen, models));
    } else {
      axes.push_back(zip_group(zip, path + ": zip", seen, models));
    }
  }
  return axes;
}

// The number of runs the grid and zip make, from their lists' lengths alone
// (a zip group by its first list): refused above kMaxRuns before any value is
// converted, named by the count and its factors.
void check_run_count(const ordered_json& file, const std::string& path) {
  std::vector<std::size_t> sizes;
  const auto length = [](const ordered_json& v) -> std::size_t {
    return v.is_array() ? v.size() : 1;  // not a list: refused by its key after this
  };
  if (file.contains("grid") && file["grid"].is_object())
    for (const auto& [key, values] : file["grid"].items()) sizes.push_back(length(values));
  const auto group = [&](const ordered_json& g) {
    if (g.is_object() && !g.empty()) sizes.push_back(length(g.begin().value()));
  };
  if (file.contains("zip")) {
    if (file["zip"].is_array())
      for (const auto& g : file["zip"]) group(g);
    else
      group(file["zip"]);
  }
  // The product in floating point: it cannot overflow, and is exact up to 2^53.
  double total = 1;
  std::string factors;
  for (const std::size_t n : sizes) {
    total *= static_cast<double>(n);
    factors += (factors.empty() ? "" : " x ") + std::to_string(n);
  }
  if (total > static_cast<double>(kMaxRuns)) {
    char count[32];
    std::snprintf(count, sizeof count, "%.0f", total);
    fail_input(path + ": the grid makes " + count + " runs (" + one_line(factors, 80) +
               "), more than " + std::to_string(kMaxRuns) + "; split it into several sweeps");
  }
  // The values one run's config can hold: the base's, and the largest step of each axis.
  std::function<double(const ordered_json&)> values = [&](const ordered_json& v) {
    double n = 1;  // nesting is at most 64 deep (the JSON reader)
    if (v.is_structured())
      for (const auto& x : v) n += values(x);
    return n;
  };
  double per_run = file.contains("base") ? values(file["base"]) : 1;
  const auto largest = [&](const ordered_json& list) {
    double most = 0;
    if (list.is_array())
      for (const auto& x : list) most = std::max(most, values(x));
    return most;
  };
  if (file.contains("grid") && file["grid"].is_object())
    for (const auto& [key, list] : file["grid"].items()) per_run += largest(list);
  const auto group_values = [&](const ordered_json& g) {
    if (g.is_object())
      for (const auto& [key, list] : g.items()) per_run += largest(list);
  };
  if (file.contains("zip")) {
    if (file["zip"].is_array())
      for (const auto& g : file["zip"]) group_values(g);
    else
      group_values(file["zip"]);
  }
  if (total * per_run > kMaxRunValues) {
    char count[64];
    std::snprintf(count, sizeof count, "%.0f JSON values (%.0f runs of up to %.0f each)",
                  total * per_run, total, per_run);
    fail_input(path + ": the runs' configs would hold " + count + ", more than 4000000; give " +
               "long lists as files (an .npy) or split the sweep");
  }
}

// --out_dir, else the file's "out_dir", else base's, else out/sweeps/STEM.
std::string sweep_out_dir(const ordered_json& file, const json& base, const std::string& path,
                          const std::optional<std::string>& out_dir_override) {
  if (out_dir_override) return *out_dir_override;
  if (file.contains("out_dir")) {
    if (!file["out_dir"].is_string() || file["out_dir"].get<std::string>().empty())
      fail_input(path + ": \"out_dir\" must be a non-empty string");
    return file["out_dir"].get<std::string>();
  }
  if (base.contains("out_dir") && base["out_dir"].is_string())
    return base["out_dir"].get<std::string>();
  return (fs::path("out") / "sweeps" / fs::path(path).stem()).string();
}

// Every run of the product, the last axis varying fastest, each named by the
// template `tmpl` (or by its swept values) and given a directory of that name.
void add_runs(Sweep& sweep, const std::vector<Axis>& axes, const json& base,
              const std::string& tmpl) {
  const std::string& path = sweep.path;
  std::size_t total = 1;
  for (const auto& axis : axes) {
    for (const auto& key : axis.keys) sweep.swept_keys.push_back(key);
    sweep.axis_sizes.push_back(axis.size());
    total *= axis.size();  // at most kMaxRuns (check_run_count)
  }
  std::map<std::string, std::size_t> names;
  sweep.runs.reserve(total);
  for (std::size_t i = 0; i < total; ++i) {
    SweepRun run;
    run.index = i;
    run.values = json::object();
    std::size_t rest = i;
    for (std::size_t a = axes.size(); a-- > 0;) {
      const std::size_t step = rest % axes[a].size();
      rest /= axes[a].size();
      for (std::size_t k = 0; k < axes[a].keys.size(); ++k)
        run.values[axes[a].keys[k]] = axes[a].values[k][step];
    }
    std::string name;
    if (!tmpl.empty()) {
      name = fill_template(tmpl, run, base, path + ": name");
    } else {
      for (const auto& key : sweep.swept_keys)
        name += (name.empty() ? "" : "_") + key + "=" + name_part(key, run.values[key]);
      if (name.empty()) name = "run";
    }
    run.name = sanitize(name);
    const auto [it, inserted] = names.emplace(run.name, i);
    if (!inserted)
      fail_input(path + ": runs " + std::to_string(it->second) + " and " + std::to_string(i) +
                 " both get the name '" + run.name +
                 "'; put every swept key in \"name\" (or leave it out for the default)");
    run.dir = (fs::path(sweep.out_dir) / run.name).string();
    run.config = base;
    for (const auto& [key, value] : run.values.items()) run.config[key] = value;
    // A layer's compute is timed warm unless the file says otherwise: a worker's
    // first run would time its cold start (pages, the thread pool, caches).
    if (!sweep.models && !run.config.contains("warmup")) run.config["warmup"] = true;
    run.config["out_dir"] = run.dir;
    sweep.runs.push_back(std::move(run));
  }
}

}  // namespace

Sweep parse_sweep(const std::string& text, const std::string& path,
                  const std::optional<std::string>& out_dir_override) {
  // The project's config parser checks syntax, duplicates and nesting; the
  // ordered parse of the same text keeps the grid's keys in file order.
  const json checked = parse_config_text(text, path);
  if (!checked.is_object())
    fail_input(path + ": expected a JSON object with \"base\" and \"grid\", got " +
               std::string(checked.type_name()));
  const ordered_json file = parse_ordered_json(text, path, json_kind::sweep_file);
  for (const auto& [key, value] : file.items()) {
    if (std::find(kTopKeys.begin(), kTopKeys.end(), key) != kTopKeys.end()) continue;
    std::string hint = is_config_key(key) ? " (run config keys go inside \"base\")" : "";
    fail_input(path + ": unknown key '" + key +
               "'; expected base, grid, zip, name, out_dir, description" + hint);
  }
  json base = checked.value("base", json::object());
  if (!base.is_object()) fail_input(path + ": \"base\" must be an object of run config keys");
  const bool models = sweeps_models(file);
  if (models) {
    for (const auto& [key, value] : base.items())
      if (!is_model_job_key(key)) fail_input(path + ": base: " + unknown_key(key, true));
  } else {
    Config probe;  // checks the base keys and values once, up front
    probe.apply(base, path + ": base");
  }

  check_run_count(file, path);
  const std::vector<Axis> axes = sweep_axes(file, path, models);
  std::string tmpl;
  if (file.contains("name")) {
    if (!file["name"].is_string() || file["name"].get<std::string>().empty())
      fail_input(path + ": \"name\" must be a non-empty string such as \"h{h}_T{seq_len}\"");
    tmpl = file["name"].get<std::string>();
  }
  Sweep sweep;
  sweep.path = path;
  sweep.models = models;
  sweep.out_dir = sweep_out_dir(file, base, path, out_dir_override);
  add_runs(sweep, axes, base, tmpl);
  return sweep;
}

Sweep load_sweep(const std::string& path, const std::optional<std::string>& out_dir_override) {
  return parse_sweep(read_text(path), path, out_dir_override);
}

std::size_t validate_sweep(Sweep& sweep,
                           const std::function<void(const ModelJob&)>& check_model_job) {
  PlanFiles files;  // each file read once for the whole sweep
  std::size_t invalid = 0;
  for (auto& run : sweep.runs) {
    try {
      if (sweep.models) {
        // Exactly what `mha run --model` or `mha analyze` checks before it computes.
        const ModelJob job = model_job_from_json(run.config, run.name);
        if (check_model_job) check_model_job(job);
      } else {
        Config c;
        c.apply(run.config, run.name);
        // Exactly what `mha run` checks before it computes (plan.hpp).
        check_loadable(plan_run(c, files));
      }
      run.invalid.reset();
    } catch (const Error& e) {
      run.invalid = e.what();
      ++invalid;
    }
  }
  return invalid;
}

std::string Shard::str() const {
  return std::to_string(index) + "/" + std::to_string(count);
}

Shard parse_shard(const std::string& text, const std::string& where) {
  const auto slash = text.find('/');
  auto number = [&](const std::string& s, std::size_t& out) {
    if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit)) return false;
    out = std::stoul(s);
    return true;
  };
  Shard shard;
  if (slash == std::string::npos || !number(text.substr(0, slash), shard.index) ||
      !number(text.substr(slash + 1), shard.count) || shard.count == 0 ||
      shard.index >= shard.count)
    fail_input(where + ": expected I/N with 0 <= I < N (e.g. 0/8), got '" + text + "'");
  return shard;
}

std::optional<Shard> shard_from_slurm(const char* (*getenv_fn)(const char*)) {
  auto get = [&](const char* name) -> const char* {
    return getenv_fn ? getenv_fn(name) : std::getenv(name);
  };
  const char* id = get("SLURM_ARRAY_TASK_ID");
  const char* count = get("SLURM_ARRAY_TASK_COUNT");
  if (!id || !count) return std::nullopt;
  const char* min = get("SLURM_ARRAY_TASK_MIN");
  const char* max = get("SLURM_ARRAY_TASK_MAX");
  const char* step = get("SLURM_ARRAY_TASK_STEP");
  auto show = [&](const char* name, const char* v) {
    return std::string(name) + "=" + (v ? std::string("'") + v + "'" : std::string("unset"));
  };
  const std::string vars = show("SLURM_ARRAY_TASK_ID", id) + ", " + show("_MIN", min) + ", " +
                           show("_MAX", max) + ", " + show("_STEP", step) + ", " +
                           show("_COUNT", count);
  auto number = [&](const char* text) {
    const std::string s = text;
    if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit))
      fail_input("Slurm array (" + vars + "): expected integers");
    return static_cast<std::size_t>(std::stoul(s));
  };
  // The task's rank in the array is its shard: (ID - MIN) / STEP of COUNT.
  // Slurm gives MIN, MAX and STEP, not the list itself, so only an evenly
  // spaced array (a range with any step and any % limit) can be mapped.
  const std::size_t task = number(id), n = number(count), first = min ? number(min) : 0;
  const std::size_t stride = step ? number(step) : 1;
  const std::size_t last = max ? number(max) : first + (n ? n - 1 : 0) * stride;
  const std::string fix = "; submit an evenly spaced array such as --array=0-" +
                          std::to_string(n ? n - 1 : 0) +
                          " (any step or % limit), or pass --shard I/" + std::to_string(n);
  if (n == 0 || stride == 0)
    fail_input("Slurm array (" + vars + "): expected a positive count and step" + fix);
  if (last < first || last - first != (n - 1) * stride)
    fail_input("Slurm array (" + vars + ") is not an evenly spaced range (a list such as " +
               "--array=1,3,8-10?), so this task's shard cannot be known" + fix);
  if (task < first || task > last || (task - first) % stride != 0)
    fail_input("Slurm array (" + vars + "): task " + std::to_string(task) +
               " is not one of the array's" + fix);
  return Shard{(task - first) / stride, n};
}

std::optional<RunReport> complete_run(const SweepRun& run) {
  const fs::path file = fs::path(run.dir) / "run.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  std::optional<RunReport> report;
  Config planned;
  try {
    report = read_run_report(file.string());  // status "complete", or an error
    planned.apply(run.config, run.name);
  } catch (const Error&) {
    return std::nullopt;
  }
  // Configs are compared as their JSON: a key the plan leaves open (null)
  // matches whatever the run resolved it to.
  const json want = planned.to_json();
  const json got = report->resolved_config().to_json();
  for (const auto& [key, value] : want.items()) {
    if (value.is_null() || kIrrelevantKeys.count(key)) continue;
    if (!got.contains(key) || got[key] != value) return std::nullopt;
  }
  return report;
}

namespace {

// A model job's run.json when it is complete and was made from the config
// the sweep plans for the run; nullopt otherwise.
std::optional<json> complete_model_run(const SweepRun& run) {
  const fs::path file = fs::path(run.dir) / "run.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  json got, want;
  try {
    got = read_json_file(file.string(), json_kind::run_json);
    want = to_json(model_job_from_json(run.config, run.name));
  } catch (const Error&) {
    return std::nullopt;
  }
  // run.json is written last, so one that names its config is complete.
  if (!got.is_object() || !got.contains("mode") || !got.contains("config") ||
      !got["config"].is_object())
    return std::nullopt;
  const json& config = got["config"];
  for (const auto& [key, value] : want.items())
    if (!kIrrelevantKeys.count(key) && (!config.contains(key) || config[key] != value))
      return std::nullopt;
  for (const auto& [key, value] : config.items())
    if (!kIrrelevantKeys.count(key) && !want.contains(key)) return std::nullopt;
  return got;
}

}  // namespace

std::optional<ordered_json> complete_row(const Sweep& sweep, const SweepRun& run,
                                         const json& extra) {
  if (sweep.models) {
    if (const std::optional<json> got = complete_model_run(run))
      return model_result_row(sweep, run, *got, extra);
    return std::nullopt;
  }
  if (const std::optional<RunReport> report = complete_run(run))
    return result_row(sweep, run, *report, extra);
  return std::nullopt;
}

bool run_is_complete(const Sweep& sweep, const SweepRun& run) {
  return complete_row(sweep, run, json::object()).has_value();
}

std::string shard_results_path(const Sweep& sweep, const Shard& shard) {
  return (fs::path(sweep.out_dir) / "results" /
          ("shard-" + std::to_string(shard.index) + "-of-" + std::to_string(shard.count) +
           ".jsonl"))
      .string();
}

void append_row(const std::string& path, const ordered_json& row) {
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path();
  if (fs::is_symlink(dir, ec))
    fail_input(dir.string() +
               ": is a symbolic link; the sweep writes its results only into "
               "a directory of its out_dir (remove the link)");
  fs::create_directories(dir, ec);
  // Never through a link: the rows go to this file or nowhere.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP)
    fail_input(path +
               ": is a symbolic link; the sweep appends its results only to a file of "
               "its own (remove the link)");
  if (fd < 0) fail_runtime(path + ": cannot open results file: " + std::strerror(errno));
  const std::string line = dump_json(row) + "\n";
  // One write of the whole line: O_APPEND puts it at the end atomically, so
  // concurrent shards appending to one file never interleave inside a line.
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size()))
    fail_runtime(path + ": cannot append a result: " +
                 (n < 0 ? std::strerror(err) : std::string("short write")));
}

std::string results_csv(const std::vector<ordered_json>& rows) {
  // Columns: every key, first seen first, rows that succeeded first so that a
  // failed row's exit_code and error come after the measured columns.
  std::vector<std::string> columns;
  std::set<std::string> known;
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& row : rows) {
      if ((row.value("status", "") == "ok") != (pass == 0)) continue;
      for (const auto& [key, value] : row.items())
        if (known.insert(key).second) columns.push_back(key);
    }
  std::string out;
  for (std::size_t i = 0; i < columns.size(); ++i) out += (i ? "," : "") + csv_cell(columns[i]);
  out += "\n";
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < columns.size(); ++i)
      out += (i ? "," : "") + (row.contains(columns[i]) ? csv_cell(row[columns[i]]) : "");
    out += "\n";
  }
  return out;
}

CollectSummary collect_results(const Sweep& sweep) {
  // The newest shard row of each run (finished_at is ISO 8601, so it sorts).
  std::map<std::size_t, ordered_json> newest;
  const fs::path dir = fs::path(sweep.out_dir) / "results";
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string file = entry.path().filename().string();
      if (file.rfind("shard-", 0) != 0 || entry.path().extension() != ".jsonl") continue;
      std::ifstream in(entry.path());
      for (std::string line; std::getline(in, line);) {
        ordered_json row;
        try {
          row = parse_ordered_json(line, entry.path().string(), json_kind::run_json);
        } catch (const std::exception&) {
          continue;  // a line cut short by a killed process: the run is redone or read from disk
        }
        if (!row.is_object() || !row.contains("index") || !row["index"].is_number_unsigned())
          continue;
        const std::size_t i = row["index"].get<std::size_t>();
        // Rows of an older version of the sweep file are not this run's.
        if (i >= sweep.runs.size() || row.value("name", "") != sweep.runs[i].name) continue;
        auto it = newest.find(i);
        if (it == newest.end() ||
            row.value("finished_at", "") >= it->second.value("finished_at", ""))
          newest[i] = row;
      }
    }
  }
  CollectSummary summary;
  std::vector<ordered_json> rows;
  for (const auto& run : sweep.runs) {
    const auto shard_row = newest.find(run.index);
    json extra = json::object();
    if (shard_row != newest.end() && shard_row->second.value("status", "") == "ok")
      for (const char* key : {"wall_ms", "started_at", "finished_at", "shard"})
        if (shard_row->second.contains(key)) extra[key] = shard_row->second[key];
    if (std::optional<ordered_json> row = complete_row(sweep, run, extra)) {
      rows.push_back(std::move(*row));
      ++summary.ok;
    } else if (shard_row != newest.end() && shard_row->second.value("status", "") == "failed") {
      rows.push_back(shard_row->second);
      ++summary.failed;
    } else if (run.invalid) {
      ++summary.invalid;
    } else {
      ++summary.missing;
      summary.missing_names.push_back(run.name);
    }
  }
  std::string jsonl;
  for (const auto& row : rows) jsonl += dump_json(row) + "\n";
  OutputSet out(sweep.out_dir);
  out.stage_bytes("results.jsonl", jsonl);
  out.stage_bytes("results.csv", results_csv(rows));
  // What a report needs beyond the rows: which columns were swept.
  const json meta = {{"schema_version", kResultsSchemaVersion},
                     {"sweep_file", sweep.path},
                     {"swept_keys", sweep.swept_keys},
                     {"runs", sweep.runs.size()}};
  out.stage_bytes("sweep.json", dump_json(meta, 2) + "\n");
  out.commit();
  summary.files = out.committed();
  return summary;
}

}  // namespace mha
