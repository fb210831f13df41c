// `--method loss`: each next token's cross-entropy (pipeline/lens.hpp's
// token_loss; an encoder-decoder's target tokens, target_token_loss) on the
// shared pass's output; mean and perplexity in run.json.
#include <cmath>
#include <string>

#include "mha/analysis/analysis.hpp"
#include "mha/pipeline/lens.hpp"

namespace mha {

namespace {

// An encoder-decoder's: each target token's, at its decoder position.
void seq2seq_loss(AnalysisRun& run, const AnalysisPass& pass) {
  const std::vector<double> loss =
      target_token_loss(run.model(), pass.result.forward.output.data(), *run.seq2seq, run.threads);
  double sum = 0;
  std::size_t n = 0;
  for (double v : loss)
    if (!std::isnan(v)) sum += v, ++n;
  const double mean = n ? sum / double(n) : std::nan("");
  const std::size_t B = run.in.B, T = run.stacks.T;
  run.out.array("loss.npy", DType::f8, {B, T}, loss.data());
  run.add("loss.npy", {B, T},
          "cross-entropy (nats) of target token t at decoder position t (the target shifted "
          "right is what the decoder reads); NaN past each row's target");
  run.summary["loss"] = {{"mean", mean}, {"perplexity", std::exp(mean)}, {"tokens", n}};
  run.lines.push_back("loss: " + std::to_string(mean) + " nats over " + std::to_string(n) +
                      " target tokens, perplexity " + std::to_string(std::exp(mean)));
}

AnalysisFinish ask(AnalysisRun& run, AnalysisPass&) {
  if (run.seq2seq) return seq2seq_loss;
  return [](AnalysisRun& run, const AnalysisPass& pass) {
    const ModelInput& in = run.in;
    const std::size_t B = in.B, T = in.T;
    const TokenLoss loss = token_loss(run.model(), pass.result.forward.output.data(), in.ids.data(),
                                      B, T, in.lengths, run.threads);
    run.out.array("loss.npy", DType::f8, {B, T}, loss.loss.data());
    run.add("loss.npy", {B, T},
            "cross-entropy (nats) of token t + 1 given tokens 0..t; NaN past each row's last "
            "predicted token");
    run.summary["loss"] = {
        {"mean", loss.mean_loss}, {"perplexity", loss.perplexity}, {"tokens", loss.tokens}};
    run.lines.push_back("loss: " + std::to_string(loss.mean_loss) + " nats over " +
                        std::to_string(loss.tokens) + " tokens, perplexity " +
                        std::to_string(loss.perplexity));
  };
}

}  // namespace

extern const Analysis loss_analysis = [] {
  Analysis a{};
  a.name = "loss";
  a.what = "each next token's cross-entropy; mean and perplexity in run.json";
  a.lm_head = true;
  a.encoder_decoder = true;
  a.ask = ask;
  return a;
}();

}  // namespace mha
