// `--method flow` (Abnar & Zuidema 2020): attention flow to the last layer,
// the max flow through the layers' graph (pipeline/attention_analysis.hpp),
// up to kMaxFlowTokens tokens.
#include <string>

#include "mha/analysis/analysis.hpp"
#include "mha/base/error.hpp"

namespace mha {

namespace {

std::uint64_t memory(const AnalysisSizes& s) {
  return bytes_of({s.B, s.T, s.T});
}

void check(AnalysisRun& run) {
  if (run.in.T > kMaxFlowTokens)
    fail_input("--method flow: " + std::to_string(run.in.T) +
               " tokens; attention flow takes T^2 "
               "max-flow problems on a graph of layers x T^2 edges, so it is run up to " +
               std::to_string(kMaxFlowTokens) + " tokens (rollout has no limit)");
}

AnalysisFinish ask(AnalysisRun&, AnalysisPass& pass) {
  pass.options.flow = true;
  return [](AnalysisRun& run, const AnalysisPass& pass) {
    const ModelInput& in = run.in;
    const std::size_t B = in.B, T = in.T;
    const std::vector<float>& flow = pass.result.flow;
    run.out.array("flow.npy", DType::f4, {B, T, T}, flow.data());
    run.add("flow.npy", {B, T, T},
            "attention flow to the last layer: the max flow from input token j to position i "
            "through the layers' graph of 0.5 A + 0.5 I (heads' mean, rows renormalised); 0 "
            "beyond each row's tokens");
    per_row_lines(run, "flow", [&](std::size_t b) {
      const float* row = flow.data() + (b * T + in.lengths[b] - 1) * T;
      return std::vector<double>(row, row + in.lengths[b]);
    });
  };
}

}  // namespace

extern const Analysis flow_analysis = [] {
  Analysis a{};
  a.name = "flow";
  a.what = "attention flow (max flow through the layers' graph), up to 128 tokens";
  a.images = true;
  a.reads_maps = true;
  a.memory = memory;
  a.check = check;
  a.ask = ask;
  return a;
}();

}  // namespace mha
