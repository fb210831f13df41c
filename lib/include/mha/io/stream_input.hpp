// Input files that are not regular files: a FIFO, a process substitution
// (`--query <(python make.py)`, which the shell passes as /dev/fd/N), a
// character device. They have no size to check a header against and can be
// read only once, so the first read takes the whole stream into memory,
// refusing it while reading once it passes a cap (an endless stream such as
// /dev/zero fails at the cap, not when memory runs out), and every later read
// of the same path in this process gets those bytes: `mha run` reads a .npy's
// header when it plans and its data when it loads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace mha {

// The most a stream input may hold: the cap .npz archives already have.
constexpr std::uint64_t kMaxStreamInputBytes = std::uint64_t{4} << 30;

// Whether `path` exists and is not a regular file or a directory.
bool is_stream_input(const std::string& path);

// How many bytes a stream should hold in all, judged from the bytes read so
// far (a .npy's header says it): 0 while that is not known yet. It may throw
// to refuse the stream early (a .npy without its magic string).
using ExpectedSize = std::function<std::uint64_t(const std::string& so_far)>;

// The whole contents of the stream input `path`, read on the first call
// (thread-safe). Throws mha::Error (invalid_input) naming the path if it
// cannot be read, holds more than kMaxStreamInputBytes, or holds more than
// `expected` says once it can say.
const std::string& stream_input_bytes(const std::string& path, const ExpectedSize& expected = {});

}  // namespace mha
