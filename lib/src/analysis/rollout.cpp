// `--method rollout` (Abnar & Zuidema 2020): R_l = Â_l R_(l-1) over the
// layers (checkpoint/attention_analysis.hpp), each layer's R streamed to
// rollout.npy (layers, B, T, T) as the shared pass gives it.
#include <memory>

#include "mha/analysis/analysis.hpp"

namespace mha {

namespace {

std::uint64_t memory(const AnalysisSizes& s) {
  return bytes_of({s.B, s.T, s.T}, 8) * 2 + bytes_of({s.B, s.T, s.T}) +
         (s.in_memory ? bytes_of({s.L, s.B, s.T, s.T}) : 0);
}

AnalysisFinish ask(AnalysisRun& run, AnalysisPass& pass) {
  const ModelInput& in = run.in;
  const std::size_t B = in.B, T = in.T, L = run.c().num_layers;
  const AnalysisOutputs::Stream* stream = &run.out.stream("rollout.npy", {L, B, T, T});
  // What reaches each row's last token through every layer: the summary's figures.
  auto reach = std::make_shared<std::vector<std::vector<double>>>(B);
  pass.options.rollout = true;
  pass.options.rollout_sink = [stream, reach, &in, B, T, L](std::size_t l, std::size_t b,
                                                            const float* R) {
    stream->write((l * B + b) * T * T, R, T * T);
    if (l + 1 == L && in.lengths[b] > 0) {
      const float* row = R + (in.lengths[b] - 1) * T;
      (*reach)[b].assign(row, row + in.lengths[b]);
    }
  };
  pass.layer_done.push_back(
      [stream, B, T](std::size_t l) { stream->written(l * B * T * T, B * T * T); });
  return [reach, B, T, L](AnalysisRun& run, const AnalysisPass&) {
    run.add("rollout.npy", {L, B, T, T},
            "attention rollout up to layer l: the product of 0.5 A + 0.5 I (heads' mean, rows "
            "renormalised) from layer 0 to l; row i: how much of each input token reaches "
            "position i");
    per_row_lines(run, "rollout", [&](std::size_t b) { return (*reach)[b]; });
  };
}

}  // namespace

extern const Analysis rollout_analysis = [] {
  Analysis a{};
  a.name = "rollout";
  a.what = "attention rollout";
  a.images = true;
  a.encoder_decoder = true;
  a.reads_maps = true;
  a.memory = memory;
  a.ask = ask;
  return a;
}();

}  // namespace mha
