// `--method norms` (Kobayashi et al. 2020): ||a_ij f_h(x_j)|| of the chosen
// layers and heads (pipeline/attention_analysis.hpp's value_norms), streamed
// to attention_norms.npy (layers, B, heads, T, T) as the shared pass gives them;
// an encoder-decoder's three kinds of maps each in an array of its own.
#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include "mha/analysis/analysis.hpp"

namespace mha {

namespace {

std::uint64_t memory(const AnalysisSizes& s) {
  if (const AnalysisStacks* k = s.stacks) {  // a thread's (queries, keys) block each
    const std::size_t n = std::max(k->S, k->T);
    return 4 * std::uint64_t(s.threads) * n * n +
           (s.in_memory ? 4 * std::uint64_t(s.B) * s.Hs *
                              (k->Les * k->S * k->S + k->Lds * (k->T * k->T + k->T * k->S))
                        : 0);
  }
  return bytes_of({s.B, s.h, s.T}, 8) + bytes_of({s.T, s.T}) +
         (s.in_memory ? bytes_of({s.Ls, s.B, s.Hs, s.T, s.T}) : 0);
}

// An encoder-decoder's: each kind of map's (encoder, decoder, cross) in an array of its own.
AnalysisFinish seq2seq_norms(AnalysisRun& run, AnalysisPass& pass) {
  const AnalysisStacks& s = run.stacks;
  const std::size_t B = run.in.B, Hs = run.call.map_heads.size();
  std::array<const AnalysisOutputs::Stream*, 3> streams{};
  for (MapKind k : kMapKinds)
    streams[int(k)] = &run.out.stream(std::string(kind_name(k)) + "_attention_norms.npy",
                                      {s.layers(k, true), B, Hs, s.queries(k), s.keys(k)});
  pass.options.norms = true;
  pass.options.norms_sink = [streams, s, B, Hs](MapKind k, std::size_t slot, std::size_t b,
                                                std::size_t hs, const float* v) {
    const std::size_t n = s.queries(k) * s.keys(k);
    streams[int(k)]->write(((slot * B + b) * Hs + hs) * n, v, n);
  };
  return [B, Hs](AnalysisRun& run, const AnalysisPass&) {
    const AnalysisStacks& s = run.stacks;
    const std::string side[3] = {"source", "target", "target"},
                      key_side[3] = {"source", "target", "source"};
    for (MapKind k : kMapKinds)
      run.add(std::string(kind_name(k)) + "_attention_norms.npy",
              {s.layers(k, true), B, Hs, s.queries(k), s.keys(k)},
              std::string("||a_ij f_h(x_j)||, f_h(x) = (x W_V^h + b_V^h) W_O^h, of the ") +
                  kind_name(k) + " attention: each head's weight times the norm of what key j (" +
                  key_side[int(k)] + ") sends to query i (" + side[int(k)] +
                  "), layers and heads as chosen");
  };
}

AnalysisFinish ask(AnalysisRun& run, AnalysisPass& pass) {
  if (run.seq2seq) return seq2seq_norms(run, pass);
  const ModelInput& in = run.in;
  const std::vector<std::size_t>& layers = run.call.map_layers;
  const std::size_t B = in.B, T = in.T, Ls = layers.size(), Hs = run.call.map_heads.size();
  const AnalysisOutputs::Stream* stream = &run.out.stream("attention_norms.npy", {Ls, B, Hs, T, T});
  // Each chosen head's norms summed over its real queries and keys: the summary's figures.
  auto sums = std::make_shared<std::vector<double>>(Ls * Hs, 0.0);
  pass.options.norms = true;
  pass.options.norms_sink = [stream, sums, &in, B, Hs, T](MapKind, std::size_t slot, std::size_t b,
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
