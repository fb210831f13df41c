// `--method detectors`: TransformerLens's detect_head scores (previous-token,
// duplicate-token, induction) of the chosen heads, on the shared pass's maps
// (pipeline/attention_analysis.hpp).
#include <string>

#include "mha/analysis/analysis.hpp"

namespace mha {

namespace {

using nlohmann::json;

AnalysisFinish ask(AnalysisRun&, AnalysisPass& pass) {
  pass.options.detectors = true;
  return [](AnalysisRun& run, const AnalysisPass& pass) {
    const std::vector<double>& scores = pass.result.head_scores;
    const auto& dets = all_detectors();
    const std::size_t Ls = run.call.map_layers.size(), Hs = run.call.map_heads.size();
    run.out.array("head_scores.npy", DType::f8, {dets.size(), Ls, Hs}, scores.data());
    run.add("head_scores.npy", {dets.size(), Ls, Hs},
            "TransformerLens's detect_head scores (mul): sum(A * P) / sum(A) per head, the mean "
            "over rows; detectors in the order of run.json's \"detectors\"");
    json names = json::array();
    for (Detector det : dets) names.push_back(to_string(det));
    run.summary["detectors"] = names;
    for (std::size_t k = 0; k < dets.size(); ++k) {
      const std::vector<double> of(scores.begin() + static_cast<std::ptrdiff_t>(k * Ls * Hs),
                                   scores.begin() + static_cast<std::ptrdiff_t>((k + 1) * Ls * Hs));
      run.lines.push_back(std::string("detectors: ") + to_string(dets[k]) + ": " +
                          top_entries(of, [&](std::size_t i) {
                            return head_name(run.call.map_layers[i / Hs],
                                             run.call.map_heads[i % Hs]);
                          }));
    }
  };
}

}  // namespace

extern const Analysis detectors_analysis = [] {
  Analysis a{};
  a.name = "detectors";
  a.what = "previous-token, duplicate-token and induction scores";
  a.reads_maps = true;
  a.options = {"--layer_indices", "--head_indices"};
  a.ask = ask;
  return a;
}();

}  // namespace mha
