#include "mha/view/sweep_view.hpp"
#include "mha/io/json_file.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "mha/base/error.hpp"
#include "mha/view/page.hpp"

namespace mha {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

// Columns that describe a run's result or bookkeeping, never a swept setting.
const std::set<std::string>& result_columns() {
  static const std::set<std::string> kColumns = {"schema_version",
                                                 "index",
                                                 "name",
                                                 "status",
                                                 "attention",
                                                 "flops",
                                                 "gflops_per_s",
                                                 "peak_rss_bytes",
                                                 "load_ms",
                                                 "compute_ms",
                                                 "compute_ms_median",
                                                 "compute_ms_min",
                                                 "compute_ms_max",
                                                 "write_ms",
                                                 "wall_ms",
                                                 "started_at",
                                                 "finished_at",
                                                 "shard",
                                                 "output_crc32",
                                                 "output_mean",
                                                 "output_std",
                                                 "output_min",
                                                 "output_max",
                                                 "attention_entropy",
                                                 "attention_entropy_fraction",
                                                 "attention_max_weight",
                                                 "attention_distance",
                                                 "attention_diagonal",
                                                 "attention_first_key",
                                                 "attention_causal",
                                                 "attention_entropy_per_head",
                                                 "run_dir",
                                                 "exit_code",
                                                 "error"};
  return kColumns;
}

bool is_ok(const ordered_json& row) {
  return row.value("status", "") == "ok";
}

std::string value_text(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s.empty() ? "(none)" : s;
}

bool numeric_key(const SweepView& v, const std::string& key) {
  for (const auto& row : v.rows)
    if (is_ok(row) && row.contains(key) && !row[key].is_number()) return false;
  return true;
}

std::size_t distinct_values(const SweepView& v, const std::string& key) {
  std::set<std::string> seen;
  for (const auto& row : v.rows)
    if (is_ok(row) && row.contains(key)) seen.insert(row[key].dump());
  return seen.size();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail_input(path + ": cannot be read; expected a sweep's results (run `mha sweep` first)");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The swept keys a chart splits its series by: the group, then every other
// swept key that varies (neither x nor the one averaged over), so that
// unrelated runs (two texts of a model sweep) are never averaged into one
// point unless asked.
std::vector<std::string> series_keys(const SweepView& v, const ChartChoice& c) {
  std::vector<std::string> keys;
  if (!c.group.empty()) keys.push_back(c.group);
  for (const auto& key : v.swept_keys)
    if (key != c.x && key != c.group && key != c.mean && distinct_values(v, key) > 1)
      keys.push_back(key);
  return keys;
}

// A row's series name: "group=value · key=value", empty for none.
std::string series_name(const std::vector<std::string>& keys, const ordered_json& row) {
  std::string name;
  for (const auto& key : keys)
    name +=
        (name.empty() ? "" : " · ") + key + "=" + (row.contains(key) ? value_text(row[key]) : "?");
  return name;
}

}  // namespace

YRange y_range(const SweepView& v, const std::string& y) {
  if (y != "compute_ms" && y != "compute_ms_median") return {};
  for (const auto& row : v.rows)
    if (is_ok(row) && row.contains("compute_ms_median") && row["compute_ms_median"].is_number())
      return {"compute_ms_median", "compute_ms_min", "compute_ms_max"};
  return {};
}

std::string chart_title(const ChartChoice& c, const YRange& range) {
  return c.y + (range.value.empty() ? "" : " (median, bars: min to max)") + " against " + c.x +
         (c.group.empty() ? "" : " for each " + c.group) +
         (c.mean.empty() ? "" : ", mean over " + c.mean);
}

SweepView read_sweep_view(const std::string& dir) {
  SweepView v;
  v.dir = dir;
  const std::string results = (fs::path(dir) / "results.jsonl").string();
  std::istringstream lines(read_text(results));
  std::string line;
  for (std::size_t n = 1; std::getline(lines, line); ++n) {
    if (line.empty()) continue;
    ordered_json row;
    try {
      row = parse_ordered_json(line, results, json_kind::run_json);
    } catch (const Error&) {
    }
    if (!row.is_object())
      fail_input(results + ": line " + std::to_string(n) +
                 " is not a JSON object; expected one results row per line");
    v.rows.push_back(std::move(row));
  }
  if (std::none_of(v.rows.begin(), v.rows.end(), is_ok))
    fail_input(results + ": no finished (ok) run to chart" +
               (v.rows.empty() ? std::string(" (the file is empty)") : std::string()));
  const std::string meta = (fs::path(dir) / "sweep.json").string();
  std::error_code ec;
  if (fs::is_regular_file(meta, ec)) {
    const ordered_json m = read_ordered_json_file(meta, json_kind::run_json);
    if (!m.is_object() || !m.contains("swept_keys") || !m["swept_keys"].is_array())
      fail_input(meta + ": expected a JSON object with \"swept_keys\", as `mha sweep` writes");
    for (const auto& k : m["swept_keys"])
      if (k.is_string()) v.swept_keys.push_back(k.get<std::string>());
    v.description = m.value("description", "");
  } else {
    for (const auto& [key, value] : v.rows.front().items())
      if (!result_columns().count(key) && distinct_values(v, key) > 1) v.swept_keys.push_back(key);
  }
  // y candidates, in the rows' column order.
  std::set<std::string> seen;
  for (const auto& row : v.rows) {
    if (!is_ok(row)) continue;
    for (const auto& [key, value] : row.items()) {
      if (seen.count(key) || key == "index" || key == "schema_version" || key == "exit_code")
        continue;
      seen.insert(key);
      bool numeric = false, other = false;
      for (const auto& r : v.rows) {
        if (!is_ok(r) || !r.contains(key) || r[key].is_null()) continue;
        const auto& x = r[key];
        if (x.is_number() || x.is_boolean())
          numeric = true;
        else if (x.is_array() && std::all_of(x.begin(), x.end(), [](const ordered_json& e) {
                   return e.is_number() || e.is_null();
                 }))
          numeric = true;
        else
          other = true;
      }
      if (numeric && !other) v.numeric_columns.push_back(key);
    }
  }
  return v;
}

ChartChoice choose_chart(const SweepView& v, const ChartChoice& wanted) {
  ChartChoice c = wanted;
  const auto has = [](const std::vector<std::string>& list, const std::string& key) {
    return std::find(list.begin(), list.end(), key) != list.end();
  };
  // Default y: an attention sweep's compute time; a model sweep's perplexity
  // (analyses with loss), else its time.
  if (c.y.empty()) {
    for (const char* key : {"compute_ms", "perplexity", "forward_ms", "total_ms"})
      if (has(v.numeric_columns, key)) {
        c.y = key;
        break;
      }
    if (c.y.empty()) c.y = v.numeric_columns.at(0);
  }
  if (!has(v.numeric_columns, c.y))
    fail_input("--y " + c.y + ": not a numeric column of " + v.dir +
               "/results.jsonl; expected one of " + join(v.numeric_columns));
  if (c.x.empty()) {
    // The grid's innermost axis: the last swept key with numbers that vary.
    for (auto k = v.swept_keys.rbegin(); k != v.swept_keys.rend(); ++k)
      if (numeric_key(v, *k) && distinct_values(v, *k) > 1) {
        c.x = *k;
        break;
      }
    if (c.x.empty() && !v.swept_keys.empty()) c.x = v.swept_keys.front();
    if (c.x.empty()) c.x = "index";
  } else if (!has(v.swept_keys, c.x) && c.x != "index") {
    fail_input("--x " + c.x + ": not a swept key of " + v.dir + "; expected one of " +
               join(v.swept_keys) + " (or index)");
  }
  if (c.group.empty()) {
    for (auto k = v.swept_keys.rbegin(); k != v.swept_keys.rend(); ++k)
      if (*k != c.x && distinct_values(v, *k) > 1) {
        c.group = *k;
        break;
      }
  } else if (c.group == "none") {
    c.group.clear();
  } else if (!has(v.swept_keys, c.group) || c.group == c.x) {
    fail_input("--group " + c.group + ": not a swept key of " + v.dir + " other than --x " + c.x +
               "; expected one of " + join(v.swept_keys) + " (or none)");
  }
  if (c.mean == "none") c.mean.clear();
  if (!c.mean.empty() && (!has(v.swept_keys, c.mean) || c.mean == c.x || c.mean == c.group))
    fail_input("--mean " + c.mean + ": not a swept key of " + v.dir + " other than --x " + c.x +
               (c.group.empty() ? "" : " and --group " + c.group) + "; expected one of " +
               join(v.swept_keys));
  return c;
}

LineChart sweep_chart(const SweepView& v, const ChartChoice& c) {
  LineChart chart;
  const YRange range = y_range(v, c.y);
  chart.title = chart_title(c, range);
  chart.x_label = c.x;
  chart.y_label = c.y + (range.value.empty() ? "" : " (median)");
  // series name -> x -> (sum, count, lowest lo, highest hi); series in order
  // of first appearance.
  struct Point {
    double sum = 0;
    int count = 0;
    double lo = INFINITY, hi = -INFINITY;
  };
  std::vector<std::string> order;
  std::map<std::string, std::map<double, Point>> points;
  std::map<std::string, std::string> x_text;  // categorical x: value -> position
  std::vector<std::string> categories;
  const bool numeric_x = numeric_key(v, c.x);
  const std::vector<std::string> split = series_keys(v, c);
  auto add = [&](const std::string& series, double x, double y, double lo = NAN, double hi = NAN) {
    if (!points.count(series)) order.push_back(series);
    auto& p = points[series][x];
    if (std::isfinite(y)) p.sum += y, p.count += 1;
    if (std::isfinite(lo) && std::isfinite(hi))
      p.lo = std::min(p.lo, lo), p.hi = std::max(p.hi, hi);
  };
  for (const auto& row : v.rows) {
    if (!is_ok(row) || !row.contains(c.x) || !row.contains(c.y)) continue;
    double x;
    if (numeric_x) {
      x = row[c.x].get<double>();
    } else {
      const std::string t = value_text(row[c.x]);
      auto it = std::find(categories.begin(), categories.end(), t);
      if (it == categories.end()) categories.push_back(t), it = categories.end() - 1;
      x = static_cast<double>(it - categories.begin());
    }
    const std::string group = series_name(split, row);
    // With repeated timings, the median and its range (a row without them,
    // from an older run, keeps its own compute_ms and no range).
    auto number = [&](const std::string& key) {
      return row.contains(key) && row[key].is_number() ? row[key].get<double>() : NAN;
    };
    const bool ranged = !range.value.empty() && row.contains(range.value);
    const auto& y = row[ranged ? range.value : c.y];
    if (ranged) {
      add(group.empty() ? c.y : group, x, number(range.value), number(range.lo), number(range.hi));
    } else if (y.is_array()) {
      // A list column: one line per head, or per layer for a *_per_layer column.
      const std::string suffix = "_per_layer";
      const bool layers = c.y.size() > suffix.size() &&
                          c.y.compare(c.y.size() - suffix.size(), suffix.size(), suffix) == 0;
      const std::string per = layers ? "layer " : "head ";
      for (std::size_t i = 0; i < y.size(); ++i)
        add((group.empty() ? "" : group + " · ") + per + std::to_string(i), x,
            y[i].is_number() ? y[i].get<double>() : NAN);
    } else if (y.is_number() || y.is_boolean()) {
      add(group.empty() ? c.y : group, x,
          y.is_boolean() ? (y.get<bool>() ? 1.0 : 0.0) : y.get<double>());
    }
  }
  // A part every series shares (method=loss when only loss runs have a perplexity)
  // names nothing apart: it is left out of the legend.
  const auto parts = [](const std::string& name) {
    std::vector<std::string> out;
    for (std::size_t at = 0, next; at <= name.size(); at = next + 4) {  // " · " is 4 bytes
      next = name.find(" · ", at);
      if (next == std::string::npos) next = name.size();
      out.push_back(name.substr(at, next - at));
    }
    return out;
  };
  const auto shown = [&](const std::string& name) {
    if (order.size() < 2) return name;
    std::string out;
    for (const auto& part : parts(name)) {
      const bool everywhere = std::all_of(order.begin(), order.end(), [&](const std::string& o) {
        const auto p = parts(o);
        return std::find(p.begin(), p.end(), part) != p.end();
      });
      if (!everywhere) out += (out.empty() ? "" : " · ") + part;
    }
    return out.empty() ? name : out;
  };
  for (const auto& name : order) {
    ChartSeries s;
    s.name = shown(name);
    for (const auto& [x, p] : points[name]) {
      s.x.push_back(x);
      s.y.push_back(p.count ? p.sum / p.count : NAN);
      s.lo.push_back(p.lo <= p.hi ? p.lo : NAN);
      s.hi.push_back(p.lo <= p.hi ? p.hi : NAN);
    }
    if (range.value.empty()) s.lo.clear(), s.hi.clear();
    chart.series.push_back(std::move(s));
  }
  if (!numeric_x) chart.x_categories = categories;
  return chart;
}

std::string sweep_page(const SweepView& v, const ChartChoice& c) {
  nlohmann::ordered_json data;
  data["kind"] = "sweep";
  data["title"] = v.dir;
  data["description"] = v.description;
  data["version"] = MHA_VERSION;
  data["swept_keys"] = v.swept_keys;
  data["numeric_columns"] = v.numeric_columns;
  data["choice"] = {{"y", c.y}, {"x", c.x}, {"group", c.group}, {"mean", c.mean}};
  // Which columns give compute_ms its median and range (empty: none).
  const YRange range = y_range(v, "compute_ms");
  data["ranges"] = nlohmann::ordered_json::object();
  if (!range.value.empty())
    for (const char* y : {"compute_ms", "compute_ms_median"})
      data["ranges"][y] = {{"value", range.value}, {"lo", range.lo}, {"hi", range.hi}};
  data["rows"] = v.rows;
  return html_page("mha sweep report: " + v.dir, std::string(page_asset("sweep.html")),
                   data.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                   {"chart.min.js", "sweep.js"});
}

}  // namespace mha
