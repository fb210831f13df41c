// NumPy .npz archives (zip files of .npy members, stored or deflated), as
// numpy.savez and numpy.savez_compressed write them.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mha/io/npy.hpp"

namespace mha {

// Member names without the ".npy" suffix, mapped to their arrays. Errors name
// the archive and the member: "weights.npz: member 'W_q.npy': ...".
// Limits, checked on the sizes the archive declares before anything is
// inflated: 4 GiB uncompressed per member and 4 GiB for all members together
// (a directory of .npy files has no such limit); encrypted members and
// compression methods other than stored and deflated are refused.
std::map<std::string, NpyArray> read_npz(const std::string& path);

// The members' .npy bytes, unparsed, one at a time in archive order, after
// the same checks and with the same limits as read_npz (which parses them
// with parse_npy(bytes, "path:key")). `key` is the name without ".npy".
void for_each_npz_member(
    const std::string& path,
    const std::function<void(const std::string& key, const std::string& bytes)>& f);

// Writes an uncompressed .npz (members "NAME.npy") to `path` directly; callers
// that need atomicity write to a temporary path (see OutputSet).
void write_npz(const std::string& path,
               const std::vector<std::pair<std::string, NpyArray>>& members);

}  // namespace mha
