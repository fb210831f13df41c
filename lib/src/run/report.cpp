#include "mha/run/report.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "mha/config/precision.hpp"
#include "mha/io/checksum.hpp"
#include "mha/io/npy.hpp"

namespace mha {
namespace {

std::optional<double> finite(double x) {
  return std::isfinite(x) ? std::optional<double>(x) : std::nullopt;
}

}  // namespace

Source Source::from_file(const std::string& path, const std::string& layout) {
  Source s;
  s.file = path;
  s.layout = layout;
  return s;
}

Source Source::drawn(const std::string& distribution, std::uint64_t seed) {
  Source s;
  s.kind = Kind::random;
  s.random = distribution;
  s.seed = seed;
  return s;
}

Source Source::zeros() {
  Source s;
  s.kind = Kind::zeros;
  return s;
}

Source Source::alias(const std::string& tensor) {
  Source s;
  s.kind = Kind::same_as;
  s.same_as = tensor;
  return s;
}

AttentionSummary summarize(const AttentionStats& stats, bool averaged_over_heads) {
  AttentionSummary s;
  for (std::size_t i = 0; i < stats.heads(); ++i) s.heads.push_back(stats.head(i));
  s.mean = stats.mean();
  s.averaged_over_heads = averaged_over_heads;
  return s;
}

Config RunReport::resolved_config() const {
  Config c = config;
  auto size = [](std::size_t n) {
    return std::optional<std::int64_t>(static_cast<std::int64_t>(n));
  };
  c.h = size(dims.h);
  c.d_model = size(dims.d_model);
  c.d_k = size(dims.d_k);
  c.d_v = size(dims.d_v);
  c.kv_heads = size(dims.kv());
  c.kdim = size(dims.kdim);
  c.vdim = size(dims.vdim);
  c.d_out = size(dims.d_out);
  c.batch = size(dims.B);
  c.seq_len = size(dims.T);
  c.kv_seq_len = size(dims.S);
  c.scale = scale;
  c.use_bias = use_bias;
  c.threads = threads;
  if (stack) {
    c.num_layers = size(stack->num_layers);
    c.d_ff = size(stack->d_ff);
    c.final_norm = stack->final_norm;
    if (stack->kind == LayerKind::decoder) c.kv_seq_len = size(stack->cross.S);  // the memory's
  }
  return c;
}

RepeatTimes RepeatTimes::of(std::vector<double> samples) {
  RepeatTimes r;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size(), mid = n / 2;
  if (n > 0) {
    r.min = sorted.front();
    r.max = sorted.back();
    r.median = n % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  }
  r.samples = std::move(samples);
  return r;
}

std::uint64_t run_flops(const Dims& dims, const std::optional<StackShape>& stack) {
  if (!stack) return dims.flops();
  const std::uint64_t rows = dims.B * dims.T;
  const std::uint64_t per_layer = dims.flops() +
                                  (stack->kind == LayerKind::decoder ? stack->cross.flops() : 0) +
                                  2 * 2 * rows * dims.d_model * stack->d_ff;
  return per_layer * stack->num_layers;
}

// data: C-order tensor of `shape`. Two passes in double, mean then the
// squared deviations from it, as NumPy's std does.
template <class T>
NpyStats npy_stats(const T* data, const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  const std::string header = npy_header(npy_dtype<T>(), shape);
  std::uint32_t crc = crc32_update(0, header.data(), header.size());
  crc = crc32_update(crc, data, n * sizeof(T));

  double sum = 0, lo = INFINITY, hi = -INFINITY;
  bool nan = false;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = to_double(data[i]);
    nan |= std::isnan(x);
    sum += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  const double mean = n ? sum / static_cast<double>(n) : NAN;
  double squares = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double dev = to_double(data[i]) - mean;
    squares += dev * dev;
  }
  const double std_dev = n ? std::sqrt(squares / static_cast<double>(n)) : NAN;
  if (nan || !n) lo = hi = NAN;  // as NumPy's min and max
  return {crc32_hex(crc), finite(mean), finite(std_dev), finite(lo), finite(hi)};
}

template NpyStats npy_stats<float>(const float*, const std::vector<std::size_t>&);
template NpyStats npy_stats<double>(const double*, const std::vector<std::size_t>&);
template NpyStats npy_stats<float16>(const float16*, const std::vector<std::size_t>&);

std::uint64_t peak_rss_bytes() {
  // VmHWM, which a sweep worker resets before each run (clear_refs), else
  // the process's lifetime maximum.
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %llu kB", &kib) == 1) {
        found = true;
        break;
      }
    std::fclose(f);
    if (found) return static_cast<std::uint64_t>(kib) * 1024;
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace mha
