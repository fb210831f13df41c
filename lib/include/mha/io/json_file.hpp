// The one JSON reader: every JSON document the tool reads (its own configs and
// sweep files, run.json, and a checkpoint's config.json, tokenizer_config.json,
// shard index and safetensors headers) goes through read_json_file() or
// parse_json(), which hold it to the limits of its kind:
//
//   - a size limit, checked against the file's size before anything is read;
//   - a depth limit (64), refused as the parser reaches it, so that no deep
//     value is built, printed or walked;
//   - duplicate keys refused (a later value would silently win);
//   - nothing after the document but whitespace (a NUL and garbage after a
//     valid object is not a valid file);
//   - a message that names the file and echoes no input but through echo().
//
//   nlohmann::json j = read_json_file(dir + "/config.json", json_kind::model_config);
//
// tokenizer.json, whose vocabulary is read by a streaming reader of its own
// (text/tokenizer_json.cpp), keeps the same limits with kTokenizerJson.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace mha {

struct JsonKind {
  const char* what;       // what the file is expected to be, for messages: "a config.json"
  std::size_t max_bytes;  // larger files are refused before they are read
  int max_depth = 64;     // containers nested deeper are refused
  bool comments = false;  // // and /* */ comments (the tool's own configs are written by hand)
  bool streams = false;   // may be a pipe, FIFO or device (the tool's own configs); else only
                          // a regular file is read
};

namespace json_kind {
extern const JsonKind tool_config;         // --config, 16 MiB, comments
extern const JsonKind sweep_file;          // mha sweep FILE, 16 MiB, comments
extern const JsonKind run_json;            // an out_dir's run.json, 64 MiB
extern const JsonKind model_config;        // a checkpoint's config.json, 4 MiB
extern const JsonKind tokenizer_config;    // tokenizer_config.json, 16 MiB
extern const JsonKind tokenizer_json;      // tokenizer.json, 64 MiB (streamed: text/)
extern const JsonKind shard_index;         // model.safetensors.index.json, 16 MiB
extern const JsonKind safetensors_header;  // the header of a .safetensors file, 100 MB
extern const JsonKind python_value;        // a Python argument converted to JSON
extern const JsonKind text_list;           // mha tokenize --texts: an array of strings, 64 MiB
}  // namespace json_kind

// The document in `text`, read from `source` (named in every message).
nlohmann::json parse_json(std::string_view text, const std::string& source, const JsonKind& kind);
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source,
                                          const JsonKind& kind);

// The whole file at `path`, bounded by kind.max_bytes before it is allocated.
// Anything but a regular file is refused by name unless kind.streams; a
// stream is then read up to one byte past the limit.
std::string read_json_text(const std::string& path, const JsonKind& kind);

// read_json_text, then parse_json.
nlohmann::json read_json_file(const std::string& path, const JsonKind& kind);
nlohmann::ordered_json read_ordered_json_file(const std::string& path, const JsonKind& kind);

// Throws mha::Error (invalid_input) naming `path` unless it is a regular file
// (or a link to one): a directory, FIFO, socket or device is refused before it
// is opened, so that a FIFO nobody writes to cannot block the run. `what` says
// what was expected: "a tokenizer.json file".
void require_regular_file(const std::string& path, const std::string& what);

}  // namespace mha
