// One member of a zip archive other than an .npz (npz.hpp): a Keras .keras
// file is a zip of config.json, metadata.json and model.weights.h5, of which
// only the last is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mha {

// The member names in archive order. Throws mha::Error (invalid_input)
// naming `path` when it is not a readable zip archive.
std::vector<std::string> zip_member_names(const std::string& path);

// The bytes of member `member`, inflated into memory. Its uncompressed size
// as the archive's directory records it is checked against `max_bytes`
// before anything is inflated, and reading stops as soon as the member yields
// more than it declared (a zip bomb costs nothing); a member that yields
// less, or fails its CRC, is refused. `limit` says in messages what
// `max_bytes` is ("max_memory 8 GiB"). Errors name the archive and member.
std::string read_zip_member(const std::string& path, const std::string& member,
                            std::uint64_t max_bytes, const std::string& limit);

}  // namespace mha
