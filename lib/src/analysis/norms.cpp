// `--method norms` (Kobayashi et al. 2020): ||a_ij f_h(x_j)|| of the chosen
// layers and heads (checkpoint/attention_analysis.hpp's value_norms), streamed
// to attention_norms.npy (layers, B, heads, T, T) as the shared pass gives them.
#include <algorithm>
#include <memory>

#include "mha/analysis/analysis.hpp"

namespace mha {

namespace {

std::uint64_t memory(const AnalysisSizes& s) {
  return bytes_of({s.B, s.h, s.T}, 8) + bytes_of({s.T, s.T}) +
         (s.in_memory ? bytes_of({s.Ls, s.B, s.Hs, s.T, s.T}) : 0);
}

AnalysisFinish ask(AnalysisRun& run, AnalysisPass& pass) {
  const ModelInput& in = run.in;
  const std::vector<std::size_t>& layers = run.call.map_layers;
  const std::size_t B = in.B, T = in.T, Ls = layers.size(), Hs = run.call.map_heads.size();
  const AnalysisOutputs::Stream* stream = &run.out.stream("attention_norms.npy", {Ls, B, Hs, T, T});
  // Each chosen head's norms summed over its real queries and keys: the summary's figures.
  auto sums = std::make_shared<std::vector<double>>(Ls * Hs, 0.0);
  pass.options.norms = true;
  pass.options.norms_sink = [stream, sums, &in, B, Hs, T](std::size_t slot, std::size_t b,
                                                          std::size_t hs, const float* v) {
    stream->write(((slot * B + b) * Hs + hs) * T * T, v, T * T);
    double sum = 0;
    for (std::size_t i = 0; i < in.lengths[b]; ++i)
      for (std::size_t j = 0; j < in.lengths[b]; ++j) sum += v[i * T + j];
    (*sums)[slot * Hs + hs] += sum;
  };
  pass.layer_done.push_back([stream, &layers, B, Hs, T](std::size_t l) {
    const auto it = std::find(layers.begin(), layers.end(), l);
    if (it != layers.end())
      stream->written(std::size_t(it - layers.begin()) * B * Hs * T * T, B * Hs * T * T);
  });
  return [sums, B, T, Ls, Hs](AnalysisRun& run, const AnalysisPass&) {
    run.add("attention_norms.npy", {Ls, B, Hs, T, T},
            "||a_ij f_h(x_j)||, f_h(x) = (x W_V^h + b_V^h) W_O^h: each head's weight times the "
            "norm of what key j sends (layers and heads as chosen)");
    std::size_t real_rows = 0;
    for (std::size_t b = 0; b < B; ++b) real_rows += run.in.lengths[b];
    for (double& v : *sums) v /= double(std::max<std::size_t>(1, real_rows));
    run.lines.push_back(
        "norms: the heads whose weighted values are largest (sum over keys, mean over real "
        "queries): " +
        top_entries(*sums, [&](std::size_t i) {
          return head_name(run.call.map_layers[i / Hs], run.call.map_heads[i % Hs]);
        }));
  };
}

}  // namespace

extern const Analysis norms_analysis = [] {
  Analysis a{};
  a.name = "norms";
  a.what = "value-weighted attention norms";
  a.images = true;
  a.encoder_decoder = true;
  a.reads_maps = true;
  a.options = {"--layer_indices", "--head_indices"};
  a.memory = memory;
  a.ask = ask;
  return a;
}();

}  // namespace mha
