// A model job: `mha run --model` or `mha analyze` written as one JSON object,
// the form a sweep's runs take (docs/sweeps.md) and `--config FILE` reads:
//
//   {"model": "models/gpt2", "text": ["The cat sat", "A dog ran"],
//    "method": ["loss", "rollout"], "threads": 2, "out_dir": "out/gpt2"}
//
// Its keys are the flags' names. With "method" it is an analysis
// (AnalyzeConfig), without it a model run (ModelRunConfig). Values:
//   model, tokens, texts, out_dir,       strings (paths)
//   ablation, metric, target, foil,
//   clean, corrupt
//   text, method                         a string or a list of strings
//   layer_indices, head_indices          an index or a list of indices
//   top_k, threads, batch                integers
//   max_memory                           a size ("8GiB") or a number of bytes
//   dtype                                "float32" or "bfloat16" (Model)
//   save_attention, save_hidden_states   booleans (model runs only)
#pragma once

#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/run/analyze.hpp"
#include "mha/run/model_run.hpp"

namespace mha {

using ModelJob = std::variant<ModelRunConfig, AnalyzeConfig>;

// Every key a model job may have, in the order to_json writes them.
const std::vector<std::string>& model_job_keys();
// Whether `key` is one of them.
bool is_model_job_key(const std::string& key);

// The job an object describes. Throws mha::Error (invalid_input) naming
// `where` and the key: a key that is not a model job's (suggesting the
// nearest), a value of the wrong type, a key of analyses in a model run or
// the reverse, no "model".
ModelJob model_job_from_json(const nlohmann::json& object, const std::string& where);

// The job as the JSON it reads back from, every list a list and every key
// that was given (unset keys left out): the "config" of the run.json a job
// writes, which `mha sweep --resume` compares with the run it plans.
nlohmann::json to_json(const ModelRunConfig& config);
nlohmann::json to_json(const AnalyzeConfig& config);
nlohmann::json to_json(const ModelJob& job);

}  // namespace mha
