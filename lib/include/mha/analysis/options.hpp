// What several analyses read besides the rows: a corpus file (corpus; `mha
// tokenize --texts` too), and the metric, target and foil of the
// interventions (ablation, patching), checked as the CLI and mha.Model take them.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "mha/pipeline/ablation.hpp"
#include "mha/run/model_run.hpp"

namespace mha {

// A file of texts, as `mha analyze --texts` and `mha tokenize --texts` take
// it: a JSON array of strings (a .json file, or any file starting with '['),
// one text per line (empty lines skipped), or, for a .jsonl file, one JSON
// object with a "text" string per line. Throws
// mha::Error (invalid_input) naming the file and line (or for text that is
// not UTF-8), or for no text at all. `lines`, if given, gets each text's line
// number (1-based); it stays empty for a JSON array (text i is element i).
std::vector<std::string> read_corpus(const std::string& path,
                                     std::vector<std::size_t>* lines = nullptr);

// The metric named (loss, logit_diff, kl; "": logit_diff with a target and
// foil, else loss); throws mha::Error (invalid_input) naming --metric.
Metric metric_of(const std::string& name, const std::optional<std::string>& target,
                 const std::optional<std::string>& foil);
// Ablation's and patching's options from the flags (or mha.Model's
// keywords): the metric, the target and foil tokens (one token each, refused
// by name otherwise; an image classifier's: labels of its classes, or their
// ids), the layers and heads checked by check_model_call.
InterventionOptions intervention_options(const Model& model, const ModelCall& call,
                                         const std::string& metric,
                                         const std::optional<std::string>& target,
                                         const std::optional<std::string>& foil);

}  // namespace mha
