// NumPy .npz archives (zip files of .npy members, stored or deflated), as
// numpy.savez and numpy.savez_compressed write them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mha/io/npy.hpp"

namespace mha {

// One member as the archive's directory and its .npy header describe it,
// known before any of its data is inflated.
struct NpzMember {
  std::string key;          // the name without ".npy"
  std::string name;         // "weights.npz:W_q": how messages name it
  std::uint64_t bytes = 0;  // the uncompressed size the directory records
  NpyHeaderInfo header;     // from the member's first bytes; its data fill `bytes`
};

// What a caller needs of the members, checked on them all before any is
// inflated (names of a layout, sizes against a memory cap); it throws
// mha::Error to refuse the archive.
using NpzCheck = std::function<void(const std::string& path, const std::vector<NpzMember>&)>;

// The members in archive order, from the directory and the first bytes of
// each (its .npy header, streamed from libzip: only those bytes are
// inflated). Errors name the archive and the member: "weights.npz: member
// 'W_q.npy': ..."; a header whose data would not fill the member's recorded
// size exactly is refused ("weights.npz:W_q: data is 128 bytes, expected
// ..."). Limits, on the sizes the directory records: 4 GiB uncompressed per
// member and 4 GiB for all members together (a directory of .npy files has no
// such limit); encrypted members and compression methods other than stored
// and deflated are refused.
std::vector<NpzMember> read_npz_members(const std::string& path);

// Member names without the ".npy" suffix, mapped to their arrays: the
// members as read_npz_members reads them, `check` on them, then each member
// inflated and parsed, one at a time.
std::map<std::string, NpyArray> read_npz(const std::string& path, const NpzCheck& check = {});

// The members' .npy bytes, unparsed, one at a time in archive order, after
// the same checks and with the same limits as read_npz. `key` is the name
// without ".npy".
void for_each_npz_member(
    const std::string& path,
    const std::function<void(const NpzMember& member, const std::string& bytes)>& f,
    const NpzCheck& check = {});

// The next `n` bytes of a member, inflated as they are read, in order from
// its first byte (its .npy header, then the data). Throws mha::Error naming
// the archive and member when the member ends early or fails to inflate.
using NpzMemberRead = std::function<void(std::size_t n, unsigned char* out)>;

// Each member after the same checks as read_npz, streamed instead of held:
// `f` reads as much of it as it needs, in order (mha inspect scans members
// in bounded memory this way). A member read to its end is checked as
// read_npz checks it (its size and CRC).
void for_each_npz_member_streamed(
    const std::string& path,
    const std::function<void(const NpzMember& member, const NpzMemberRead& read)>& f,
    const NpzCheck& check = {});

// Writes an uncompressed .npz (members "NAME.npy") to `path` directly; callers
// that need atomicity write to a temporary path (see OutputSet).
void write_npz(const std::string& path,
               const std::vector<std::pair<std::string, NpyArray>>& members);

}  // namespace mha
