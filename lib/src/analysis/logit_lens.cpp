// `--method logit_lens` (nostalgebraist 2020): every layer's residual stream
// through the final norm and the LM head (pipeline/lens.hpp's logit_lens),
// from the hidden states the shared pass keeps.
#include <algorithm>
#include <cstdio>
#include <string>

#include "mha/analysis/analysis.hpp"
#include "mha/base/error.hpp"
#include "mha/io/json_text.hpp"
#include "mha/pipeline/lens.hpp"

namespace mha {

namespace {

using nlohmann::json;

// [state][b][t]: the top tokens' strings, rows cut at each length.
json top_tokens(const AnalysisRun& run, const LogitLens& lens) {
  const ModelInput& in = run.in;
  json top = json::array();
  for (std::size_t s = 0; s < lens.states; ++s) {
    json rows = json::array();
    for (std::size_t b = 0; b < in.B; ++b) {
      json row = json::array();
      for (std::size_t t = 0; t < in.lengths[b]; ++t) {
        json tokens = json::array();
        for (std::size_t j = 0; j < lens.k; ++j)
          tokens.push_back(
              run.whole.token_name(lens.top_ids[((s * in.B + b) * in.T + t) * lens.k + j]));
        row.push_back(tokens);
      }
      rows.push_back(row);
    }
    top.push_back(rows);
  }
  return top;
}

// How often each state ranks the actual next token first.
void summarise(AnalysisRun& run, const LogitLens& lens) {
  const ModelInput& in = run.in;
  const std::size_t S = lens.states, L = run.c().num_layers;
  std::vector<double> agree(S, 0.0);
  std::size_t n = 0;
  for (std::size_t b = 0; b < in.B; ++b)
    for (std::size_t t = 0; t + 1 < in.lengths[b]; ++t, ++n)
      for (std::size_t st = 0; st < S; ++st)
        agree[st] += lens.rank_next[(st * in.B + b) * in.T + t] == 0;
  for (double& a : agree) a = n ? a / double(n) : 0.0;
  run.summary["logit_lens"] = {{"top1_accuracy_last_state", agree[L]},
                               {"top1_accuracy_per_state", agree}};
  std::string line = "logit_lens: the next token ranked first, state 0 (embeddings) to " +
                     std::to_string(L) + " (output):";
  for (const double a : agree) {
    char v[16];
    std::snprintf(v, sizeof v, " %.2f", a);
    line += v;
  }
  run.lines.push_back(line);
}

// Its k most likely tokens: at least one, at most the vocabulary.
void check_model(const AnalyzeConfig& config, const ModelConfig& c) {
  if (config.top_k < 1 || std::uint64_t(config.top_k) > c.vocab_size)
    fail_input("--top_k: expected 1 to the vocabulary's " + std::to_string(c.vocab_size) +
               " for logit_lens, got " + std::to_string(config.top_k));
}

AnalysisFinish ask(AnalysisRun&, AnalysisPass& pass) {
  pass.hidden_states = true;
  return [](AnalysisRun& run, const AnalysisPass& pass) {
    const ModelInput& in = run.in;
    const std::size_t B = in.B, T = in.T;
    const std::size_t k = static_cast<std::size_t>(run.config.top_k);
    const LogitLens lens = logit_lens(run.model(), pass.hidden.data(), B, T, in.ids.data(),
                                      in.lengths, k, run.threads);
    const std::size_t S = lens.states;
    run.out.array("logit_lens_p_next.npy", DType::f4, {S, B, T}, lens.p_next.data());
    const std::vector<double> rank(lens.rank_next.begin(), lens.rank_next.end());
    run.out.array("logit_lens_rank.npy", DType::f8, {S, B, T}, rank.data());
    run.out.array("logit_lens_top_p.npy", DType::f4, {S, B, T, lens.k}, lens.top_p.data());
    run.out.array("logit_lens_top_ids.npy", DType::i4, {S, B, T, lens.k}, lens.top_ids.data());
    run.out.bytes("logit_lens.json", dump_json(json{{"top_tokens", top_tokens(run, lens)}}) + "\n");
    run.add("logit_lens_p_next.npy", {S, B, T},
            "state s (the input of layer s; s = layers: the output) through the final norm and "
            "the LM head: the probability of token t + 1 at position t; NaN where there is none");
    run.add("logit_lens_rank.npy", {S, B, T},
            "its rank among the vocabulary (0 = most likely); -1 "
            "where there is none");
    run.add("logit_lens_top_p.npy", {S, B, T, lens.k}, "the k most likely tokens' probabilities");
    run.add("logit_lens_top_ids.npy", {S, B, T, lens.k}, "their ids (int32)");
    run.add("logit_lens.json", {S, B, T, lens.k}, "their token strings, rows cut at each length");
    summarise(run, lens);
  };
}

}  // namespace

extern const Analysis logit_lens_analysis = [] {
  Analysis a{};
  a.name = "logit_lens";
  a.what = "each layer's residual stream read by the LM head";
  a.lm_head = true;
  a.options = {"--top_k"};
  a.check_model = check_model;
  a.ask = ask;
  return a;
}();

}  // namespace mha
