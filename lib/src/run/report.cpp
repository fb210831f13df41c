#include "mha/run/report.hpp"

#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "mha/io/npy.hpp"
#include "mha/model/precision.hpp"

namespace mha {
namespace {

// zlib's crc32 continued over `bytes`, in pieces its 32-bit length can take.
unsigned long crc32_update(unsigned long crc, const void* bytes, std::size_t n) {
  const auto* p = static_cast<const Bytef*>(bytes);
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  for (std::size_t done = 0; done < n; done += kPiece)
    crc = ::crc32(crc, p + done, static_cast<uInt>(std::min(kPiece, n - done)));
  return crc;
}

nlohmann::json finite_or_null(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json RunReport::to_json() const {
  nlohmann::json config_json = config.to_json();
  // The resolved sizes replace whatever the config left to inference.
  config_json["h"] = dims.h;
  config_json["d_model"] = dims.d_model;
  config_json["d_k"] = dims.d_k;
  config_json["d_v"] = dims.d_v;
  config_json["kv_heads"] = dims.kv();
  config_json["kdim"] = dims.kdim;
  config_json["vdim"] = dims.vdim;
  config_json["d_out"] = dims.d_out;
  config_json["batch"] = dims.B;
  config_json["seq_len"] = dims.T;
  config_json["kv_seq_len"] = dims.S;
  config_json["scale"] = scale;
  config_json["use_bias"] = use_bias;
  config_json["threads"] = threads;
  std::uint64_t flops = dims.flops();
  if (stack) {  // every layer's attentions and feed-forward GEMMs
    const std::uint64_t rows = dims.B * dims.T;
    const std::uint64_t per_layer = dims.flops() +
                                    (stack->kind == LayerKind::decoder ? stack->cross.flops() : 0) +
                                    2 * 2 * rows * dims.d_model * stack->d_ff;
    flops = per_layer * stack->num_layers;
    config_json["num_layers"] = stack->num_layers;
    config_json["d_ff"] = stack->d_ff;
    config_json["final_norm"] = stack->final_norm;
    if (stack->kind == LayerKind::decoder) config_json["kv_seq_len"] = stack->cross.S;
  }
  const double gflops = compute_ms > 0 ? static_cast<double>(flops) / (compute_ms * 1e6) : 0.0;
  nlohmann::json report = {
      {"schema_version", kRunSchemaVersion},
      {"tool", {{"name", "mha"}, {"version", MHA_VERSION}}},
      {"status", "complete"},
      {"config", config_json},
      {"attention", dims.key_is_query ? "self" : "cross"},
      {"sources", sources},
      {"outputs", outputs},
      {"flops", flops},
      {"timings_ms", {{"load", load_ms}, {"compute", compute_ms}, {"write", write_ms}}},
      {"gflops_per_s", gflops},
      {"peak_rss_bytes", peak_rss_bytes},
  };
  if (!attention_stats.is_null()) report["attention_stats"] = attention_stats;
  if (!output_stats.is_null()) report["output_stats"] = output_stats;
  if (!layer_stats.is_null()) report["layer_stats"] = layer_stats;
  return report;
}

// data: C-order tensor of `shape`. Two passes in double, mean then the
// squared deviations from it, as NumPy's std does.
template <class T>
nlohmann::json npy_stats(const T* data, const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  const std::string header = npy_header(npy_dtype<T>(), shape);
  unsigned long crc = crc32_update(::crc32(0L, Z_NULL, 0), header.data(), header.size());
  crc = crc32_update(crc, data, n * sizeof(T));
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", crc & 0xffffffffUL);

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
  return {{"crc32", hex},
          {"mean", finite_or_null(mean)},
          {"std", finite_or_null(std_dev)},
          {"min", finite_or_null(lo)},
          {"max", finite_or_null(hi)}};
}

template nlohmann::json npy_stats<float>(const float*, const std::vector<std::size_t>&);
template nlohmann::json npy_stats<double>(const double*, const std::vector<std::size_t>&);
template nlohmann::json npy_stats<float16>(const float16*, const std::vector<std::size_t>&);

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
