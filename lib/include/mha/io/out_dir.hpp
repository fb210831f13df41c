// An out_dir belongs to one run. A run removes the outputs of an earlier run
// in the same directory as it commits its own (earlier_run_outputs), and a
// reader given a run's file checks it is one its run.json lists, unchanged
// since (check_run_output): `mha view`, `inspect` and `plot` never show one
// run's maps under another run's run.json.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mha {

// The lock file `mha run` holds in its out_dir while it runs (io/dir_lock.hpp).
inline constexpr const char* kOutDirLock = ".mha.lock";

// Every file name `mha run` (a layer, a stack or a whole model) may write
// into its out_dir, run.json first.
const std::vector<std::string>& run_output_names();

// The files a new run in `dir` removes when it commits: run.json, every name
// of run_output_names() and every output an existing run.json lists (plain
// file names only), except the files `is_input` says the new run reads.
std::vector<std::string> earlier_run_outputs(
    const std::string& dir, const std::function<bool(const std::string&)>& is_input);

// What a run.json records of one output.
struct ListedOutput {
  std::optional<std::uint64_t> bytes;
  std::optional<std::string> crc32;  // 8 lowercase hex digits
};
// The outputs `dir`/run.json lists, by file name; nullopt when there is no
// run.json. Throws mha::Error (input) when it is not a run.json.
std::optional<std::map<std::string, ListedOutput>> listed_outputs(const std::string& dir);

// For a reader given `file` (not a pipe): when its directory holds a run.json
// and the file's name is a run output's (run_output_names) or listed there,
// the file must be listed and have the recorded size and crc32. Throws
// mha::Error (input) naming the file and what differs.
void check_run_output(const std::string& file);

}  // namespace mha
