// The JSON text of what the tool writes (run.json, tokens.json, a sweep's
// rows and sweep.json, --json on stdout): nlohmann's dump, with any byte that
// is not UTF-8 written as U+FFFD instead of throwing type_error 316. Text a
// user gives is refused at the edge when it is not UTF-8 (mha/base/utf8.hpp),
// so this reaches only what is not text: a path given in other bytes.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace mha {

std::string dump_json(const nlohmann::json& j, int indent = -1);
std::string dump_json(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace mha
