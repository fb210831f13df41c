// The options of a whole model's run, declared once: one key table, as the
// single-layer Config's (config/config.hpp), from which come `mha run`'s
// flags and their help (grouped by the runs they apply to), the keys of a
// model run's JSON file (model_job.hpp), which flags are refused with or
// without --model, and the names mha.Model gives them:
//
//   name           flag / JSON key   mha.Model        runs
//   model          --model DIR       Model(dir)       model
//   text           --text TEXT ...   model(input)     model
//   dtype          --dtype TYPE      Model(dtype=)    both (a model: float32 or bfloat16)
//   save_qk        --save_qk         model(qk=)       model
//   ...
//
// A flag's text becomes the JSON value the key has in a file
// (model_flag_value), and one setter per key checks and sets it, so a flag
// and a file take the same values and refuse the rest with the same message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mha/kernel/compute_type.hpp"
#include "mha/run/model_run.hpp"

namespace mha {

// Which of `mha run`'s runs an option applies to: one layer or stack (the
// Config's keys, docs/config.md), a whole model (--model DIR), or both.
enum class RunKind { layer, model, both };

// How a flag's text becomes its JSON value (model_flag_value).
enum class FlagValue {
  text,     // a string (a path, a directory, a dtype's name)
  texts,    // one string per use, repeated for a batch (--text a --text b): a list
  indices,  // comma-separated indices (3,5): a list
  integer,  // a decimal integer
  size,     // a size such as 8GiB, or a number of bytes: a string
  flag,     // bare (true), or true/false
};

struct ModelRunKey {
  const char* name;        // --name on the command line, "name" in a model run's JSON file
  const char* value_hint;  // "TEXT", "LIST", ...; "" for a bare flag
  // What it does in a model run. A key of both kinds of runs has the
  // Config's help for layer runs; this says what differs with --model ("" if nothing).
  const char* help;
  const char* python;  // mha.Model's name for it, "" for none
  RunKind applies;     // model or both (every other Config key is a layer run's)
  FlagValue value;
  // Checks `v` (a file's value, or a flag's made JSON) and sets it in `c`;
  // throws mha::Error (invalid_input) starting with `where` (the flag or the file's key).
  void (*set)(ModelRunConfig& c, const nlohmann::json& v, const std::string& where);
};

// Every option of a model run, in the order `mha run --help` lists them.
const std::vector<ModelRunKey>& model_run_keys();
// The key named (without "--"), or nullptr.
const ModelRunKey* find_model_run_key(const std::string& name);

// A flag's values (its text once per use, as given) as the JSON value the
// key has in a file; throws mha::Error (invalid_input) naming --name.
nlohmann::json model_flag_value(const ModelRunKey& key, const std::vector<std::string>& texts);

// The compute type a model runs in, from --dtype's text, mha.Model's dtype=
// or a file's "dtype": float32 or bfloat16. Anything else (float64, which a
// layer run takes, included) is refused naming `where` and the value.
ComputeType parse_model_dtype(const std::string& text, const std::string& where = "--dtype");

// "3,5" -> {3, 5}; throws mha::Error (invalid_input) naming --option.
std::vector<std::int64_t> index_list(const std::string& text, const char* option);

// The checks of a model job's values (model_job.hpp), shared with the
// setters; each throws mha::Error (invalid_input) starting with `where`.
namespace job_value {
std::string string(const nlohmann::json& v, const std::string& where);
// A string, or a non-empty list of strings.
std::vector<std::string> strings(const nlohmann::json& v, const std::string& where);
std::int64_t integer(const nlohmann::json& v, const std::string& where, std::int64_t lo,
                     std::int64_t hi);
// An index or a non-empty list of indices (check_model_call checks their range).
std::vector<std::int64_t> indices(const nlohmann::json& v, const std::string& where);
bool flag(const nlohmann::json& v, const std::string& where);
// A size such as "8GiB", or a number of bytes.
std::uint64_t bytes(const nlohmann::json& v, const std::string& where);
}  // namespace job_value

}  // namespace mha
