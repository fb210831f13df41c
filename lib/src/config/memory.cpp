#include "mha/config/memory.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "mha/base/error.hpp"

namespace mha {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string MemoryEstimate::describe() const {
  return format_bytes(total()) + " (inputs " + format_bytes(inputs) + ", weights " +
         format_bytes(weights) + ", projections " + format_bytes(projections) + ", output " +
         format_bytes(output) + ", kernel scratch " + format_bytes(scratch) + ")";
}

MemoryEstimate estimate_memory(const Dims& d, std::size_t itemsize, bool save_attention,
                               int threads) {
  const double w = static_cast<double>(itemsize);
  const double B = d.B, T = d.T, S = d.S, h = d.h;
  const double hdk = h * d.d_k, hdv = h * d.d_v;
  const double kdk = static_cast<double>(d.kv() * d.d_k), kdv = static_cast<double>(d.kv() * d.d_v);
  MemoryEstimate m;
  // Files are read whole (up to 8 bytes per element) before conversion.
  double in = B * T * d.d_model;
  if (!d.key_is_query) in += B * S * d.kdim;
  if (!d.value_is_key) in += B * S * d.vdim;
  m.inputs = in * (w + 8);
  m.weights =
      (d.d_model * hdk + d.kdim * kdk + d.vdim * kdv + hdv * d.d_out + hdk + kdk + kdv + d.d_out) *
      (2 * w + 8);  // kernels, a packed QKV copy, file images
  m.projections = (B * T * hdk + B * S * (kdk + kdv) + B * T * hdv) * w;
  m.output = B * T * d.d_out * w;
  // Fused: (512 x 512) logits and (512 x d_v) partial output per thread;
  // exact: (128 x S) slabs, twice for the mean over heads.
  const double per_thread =
      save_attention ? 2 * 128 * S + 128 * d.d_v : 512.0 * 512 + 512.0 * d.d_v + 1024;
  m.scratch = per_thread * threads * w;
  return m;
}

std::uint64_t default_max_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t{1} << 62;  // unknown: no limit
  return static_cast<std::uint64_t>(0.8 * static_cast<double>(pages) * static_cast<double>(page));
}

std::uint64_t parse_byte_size(const std::string& text, const std::string& where) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double scale = 0;
  const std::pair<const char*, double> units[] = {{"", 1},
                                                  {"B", 1},
                                                  {"K", 1e3},
                                                  {"KB", 1e3},
                                                  {"KiB", 1024.0},
                                                  {"M", 1e6},
                                                  {"MB", 1e6},
                                                  {"MiB", 1048576.0},
                                                  {"G", 1e9},
                                                  {"GB", 1e9},
                                                  {"GiB", 1073741824.0},
                                                  {"T", 1e12},
                                                  {"TB", 1e12},
                                                  {"TiB", 1099511627776.0}};
  for (const auto& [name, factor] : units)
    if (unit == name) scale = factor;
  const double bytes = value * scale;
  if (end == begin || scale == 0 || !std::isfinite(bytes) || bytes < 1 || bytes > 9.2e18)
    fail_input(where + ": expected a size such as 512MiB, 8GiB or a number of bytes, got '" + text +
               "'");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace mha
