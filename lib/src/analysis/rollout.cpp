// `--method rollout` (Abnar & Zuidema 2020): R_l = Â_l R_(l-1) over the
// layers (pipeline/attention_analysis.hpp), each layer's R streamed to
// rollout.npy (layers, B, T, T) as the shared pass gives it; an
// encoder-decoder's three (pipeline/seq2seq_analysis.hpp).
#include <array>
#include <memory>
#include <string>

#include "mha/analysis/analysis.hpp"

namespace mha {

namespace {

std::uint64_t memory(const AnalysisSizes& s) {
  if (const AnalysisStacks* k = s.stacks) {  // the rollouts in double, twice each
    const std::uint64_t maps = k->S * k->S + k->T * k->T + k->T * k->S;
    return 16 * std::uint64_t(s.B) * maps +
           (s.in_memory ? 4 * std::uint64_t(s.B) *
                              (k->Le * k->S * k->S + k->Ld * (k->T * k->T + k->T * k->S))
                        : 0);
  }
  return bytes_of({s.B, s.T, s.T}, 8) * 2 + bytes_of({s.B, s.T, s.T}) +
         (s.in_memory ? bytes_of({s.L, s.B, s.T, s.T}) : 0);
}

// An encoder-decoder's: the encoder's, the decoder's over both inputs and its source part.
AnalysisFinish seq2seq_rollout(AnalysisRun& run, AnalysisPass& pass) {
  const AnalysisStacks& s = run.stacks;
  const std::size_t B = run.in.B;
  std::array<const AnalysisOutputs::Stream*, 3> streams{};
  for (MapKind k : kMapKinds)
    streams[int(k)] = &run.out.stream(std::string(kind_name(k)) + "_rollout.npy",
                                      {s.layers(k, false), B, s.queries(k), s.keys(k)});
  pass.options.rollout = true;
  pass.options.rollout_sink = [streams, s, B](MapKind k, std::size_t l, std::size_t b,
                                              const float* R) {
    const std::size_t n = s.queries(k) * s.keys(k);
    streams[int(k)]->write((l * B + b) * n, R, n);
  };
  return [](AnalysisRun& run, const AnalysisPass&) {
    const AnalysisStacks& s = run.stacks;
    const std::size_t B = run.in.B, S = s.S, T = s.T;
    run.add("encoder_rollout.npy", {s.Le, B, S, S},
            "the encoder's attention rollout up to layer l: the product of 0.5 A + 0.5 I (heads' "
            "mean, rows renormalised); row i: how much of each source token reaches position i");
    run.add("decoder_rollout.npy", {s.Ld, B, T, T},
            "the decoder's rollout over both inputs up to layer l, its target part: per layer M "
            "<- Â_self M, then M <- 0.5 M + 0.5 [0 | Ā_cross R_enc]; row t: how much of each "
            "decoder input reaches position t");
    run.add("cross_rollout.npy", {s.Ld, B, T, S},
            "its source part: how much of each source token reaches decoder position t (through "
            "the cross-attention and the encoder's rollout R_enc); with decoder_rollout each row "
            "sums to 1");
  };
}

AnalysisFinish ask(AnalysisRun& run, AnalysisPass& pass) {
  if (run.seq2seq) return seq2seq_rollout(run, pass);
  const ModelInput& in = run.in;
  const std::size_t B = in.B, T = in.T, L = run.c().num_layers;
  const AnalysisOutputs::Stream* stream = &run.out.stream("rollout.npy", {L, B, T, T});
  // What reaches each row's last token through every layer: the summary's figures.
  auto reach = std::make_shared<std::vector<std::vector<double>>>(B);
  pass.options.rollout = true;
  pass.options.rollout_sink = [stream, reach, &in, B, T, L](MapKind, std::size_t l, std::size_t b,
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
