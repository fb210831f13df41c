#include "mha/report.hpp"

#include <sys/resource.h>

namespace mha {

nlohmann::json RunReport::to_json() const {
  nlohmann::json config_json = config.to_json();
  // The resolved sizes replace whatever the config left to inference.
  config_json["h"] = dims.h;
  config_json["d_model"] = dims.d_model;
  config_json["d_k"] = dims.d_k;
  config_json["d_v"] = dims.d_v;
  config_json["kdim"] = dims.kdim;
  config_json["vdim"] = dims.vdim;
  config_json["d_out"] = dims.d_out;
  config_json["batch"] = dims.B;
  config_json["seq_len"] = dims.T;
  config_json["kv_seq_len"] = dims.S;
  config_json["scale"] = scale;
  config_json["use_bias"] = use_bias;
  config_json["threads"] = threads;
  const std::uint64_t flops = dims.flops();
  const double gflops = compute_ms > 0 ? static_cast<double>(flops) / (compute_ms * 1e6) : 0.0;
  return {
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
}

std::uint64_t peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace mha
