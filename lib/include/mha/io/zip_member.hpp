// One member of a zip archive other than an .npz (npz.hpp): a Keras .keras
// file is a zip of config.json, metadata.json and model.weights.h5, of which
// only the last is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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
// `max_bytes` is ("max_memory 8 GiB"). `check_head`, when given, sees the
// member's first `head_bytes` bytes (a signature) as soon as they are
// inflated, before the rest is, and throws to refuse the member. Errors name
// the archive and member.
std::string read_zip_member(const std::string& path, const std::string& member,
                            std::uint64_t max_bytes, const std::string& limit,
                            std::size_t head_bytes = 0,
                            const std::function<void(const std::string& head)>& check_head = {});

}  // namespace mha
