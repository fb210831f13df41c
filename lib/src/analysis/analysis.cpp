// What every analysis's file shares (mha/analysis/analysis.hpp): run.json's
// array entries and the summary's figures.
#include "mha/analysis/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mha/base/message.hpp"

namespace mha {

void AnalysisRun::add(const std::string& name, const std::vector<std::size_t>& shape,
                      const std::string& meaning) {
  arrays[name] = {{"shape", shape}, {"meaning", meaning}};
  outputs.push_back(name);
}

std::string top_entries(const std::vector<double>& values,
                        const std::function<std::string(std::size_t)>& label, std::size_t n) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isnan(values[i])) order.push_back(i);
  n = std::min(n, order.size());
  if (std::all_of(order.begin(), order.end(), [&](std::size_t i) { return values[i] == 0; }))
    return "all 0";
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](std::size_t a, std::size_t b) { return values[a] > values[b]; });
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    char v[32];
    std::snprintf(v, sizeof v, " %.3g", values[order[i]]);
    out += (i ? ", " : "") + label(order[i]) + v;
  }
  return out;
}

const char* kind_name(MapKind k) {
  return k == MapKind::encoder ? "encoder" : k == MapKind::decoder ? "decoder" : "cross";
}

std::string head_name(std::size_t layer, std::size_t head) {
  return "L" + std::to_string(layer) + "H" + std::to_string(head);
}

std::uint64_t bytes_of(std::initializer_list<std::size_t> shape, std::uint64_t itemsize) {
  std::uint64_t n = itemsize;
  for (std::size_t v : shape) n *= v;
  return n;
}

void hold_layers(AnalysisRun& run) {
  if (run.io.layers_read) return;
  const std::uint64_t bytes = run.model().layer_float32_bytes() * run.c().num_layers;
  if (run.need + bytes > run.max_memory) return;
  run.resident = read_layers(run.model(), run.threads);
  run.io.layers_read = &run.resident;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void per_row_lines(AnalysisRun& run, const char* method,
                   const std::function<std::vector<double>(std::size_t)>& row_of) {
  const ModelInput& in = run.in;
  for (std::size_t b = 0; b < std::min(in.B, kSummaryRows); ++b) {
    if (in.lengths[b] == 0) continue;
    const std::vector<std::string>& tok = in.tokens[b];
    run.lines.push_back(std::string(method) + ": row " + std::to_string(b) + ", into " +
                        echo(tok[in.lengths[b] - 1], 20) + " from " +
                        top_entries(row_of(b), [&](std::size_t j) { return echo(tok[j], 20); }));
  }
}

}  // namespace mha
