#include "mha/io/out_dir.hpp"
#include "mha/io/json_file.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/io/checksum.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace mha {

namespace {

// A name a run.json may list: a file directly in out_dir.
bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

json read_run_json(const std::string& path) {
  json j = read_json_file(path, json_kind::run_json);
  if (!j.is_object())
    fail_input(path + ": not a JSON object; expected the run.json `mha run` writes");
  return j;
}

}  // namespace

const std::vector<std::string>& run_output_names() {
  static const std::vector<std::string> names = {"run.json",
                                                 "output.npy",
                                                 "attention.npy",
                                                 "self_attention.npy",
                                                 "cross_attention.npy",
                                                 "encoder_attention.npy",
                                                 "decoder_attention.npy",
                                                 "hidden_states.npy",
                                                 "encoder_hidden_states.npy",
                                                 "decoder_hidden_states.npy",
                                                 "images.npy",
                                                 "q.npy",
                                                 "k.npy",
                                                 "memory.npy",
                                                 "attention.png",
                                                 "weights.npz",
                                                 "query.npy",
                                                 "key.npy",
                                                 "value.npy",
                                                 "tokens.json"};
  return names;
}

std::optional<std::map<std::string, ListedOutput>> listed_outputs(const std::string& dir) {
  const std::string path = (fs::path(dir) / "run.json").string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const json j = read_run_json(path);
  std::map<std::string, ListedOutput> listed;
  const auto it = j.find("outputs");
  if (it == j.end()) return listed;
  if (it->is_array()) {  // a model run's list of names, before checksums
    for (const json& name : *it)
      if (name.is_string() && plain_name(name.get<std::string>()))
        listed[name.get<std::string>()] = {};
    return listed;
  }
  if (!it->is_object())
    fail_input(path + ": 'outputs' is not an object; expected the run.json `mha run` writes");
  for (const auto& [name, entry] : it->items()) {
    if (!plain_name(name)) continue;
    ListedOutput& o = listed[name];
    if (!entry.is_object()) continue;
    if (const auto b = entry.find("bytes"); b != entry.end() && b->is_number_unsigned())
      o.bytes = b->get<std::uint64_t>();
    if (const auto c = entry.find("crc32"); c != entry.end() && c->is_string())
      o.crc32 = c->get<std::string>();
  }
  return listed;
}

std::vector<std::string> earlier_run_outputs(
    const std::string& dir, const std::function<bool(const std::string&)>& is_input) {
  std::vector<std::string> names = run_output_names();
  // A run.json that cannot be read lists nothing more; it is removed all the same.
  // A name it lists beyond the run's own is removed only when the file there is
  // the one it recorded (size and crc32): a run.json can be written by anyone,
  // and listing a checkpoint's config.json must not delete it.
  try {
    if (const auto listed = listed_outputs(dir))
      for (const auto& [name, o] : *listed) {
        if (std::find(names.begin(), names.end(), name) != names.end()) continue;
        if (!o.bytes || !o.crc32) continue;
        const std::string path = (fs::path(dir) / name).string();
        struct stat st {};
        if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
            static_cast<std::uint64_t>(st.st_size) != *o.bytes)
          continue;
        const FileChecksum sum = file_checksum(path);
        if (sum.bytes == *o.bytes && crc32_hex(sum.crc32) == *o.crc32) names.push_back(name);
      }
  } catch (const Error&) {
  }
  std::vector<std::string> earlier;
  for (const std::string& name : names)
    if (!is_input || !is_input((fs::path(dir) / name).string())) earlier.push_back(name);
  return earlier;
}

void check_run_output(const std::string& file) {
  const fs::path p(file);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  const std::string name = p.filename().string();
  const auto listed = listed_outputs(dir);
  if (!listed) return;
  const std::string run_json = (fs::path(dir) / "run.json").string();
  const auto it = listed->find(name);
  if (it == listed->end()) {
    const auto& names = run_output_names();
    if (std::find(names.begin(), names.end(), name) == names.end()) return;  // not a run's file
    fail_input(file + ": not among the outputs " + run_json +
               " lists; it was left by an earlier run or put there since (run again to "
               "write it)");
  }
  const ListedOutput& o = it->second;
  if (!o.bytes && !o.crc32) return;  // a run.json from before outputs carried checksums
  const FileChecksum sum = file_checksum(file);
  if (o.bytes && sum.bytes != *o.bytes)
    fail_input(file + ": " + std::to_string(sum.bytes) + " bytes, but " + run_json + " records " +
               std::to_string(*o.bytes) + "; the file changed after its run");
  if (o.crc32 && crc32_hex(sum.crc32) != *o.crc32)
    fail_input(file + ": crc32 " + crc32_hex(sum.crc32) + ", but " + run_json + " records " +
               *o.crc32 + "; the file changed after its run");
}

}  // namespace mha
