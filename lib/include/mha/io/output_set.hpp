// Writes a run's outputs all-or-nothing. Each file is first written to a
// temporary file in the destination directory; commit() renames them all to
// their final names. If anything fails before commit(), or the OutputSet is
// destroyed without commit(), the temporaries are removed and existing files
// under the final names are untouched.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "mha/io/checksum.hpp"
#include "mha/io/npy.hpp"

namespace mha {

class OutputSet {
 public:
  // Creates `dir` (and parents) if missing. Throws mha::Error (runtime) if it
  // cannot be created or is not a writable directory.
  explicit OutputSet(std::string dir);
  ~OutputSet();
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  const std::string& dir() const { return dir_; }
  std::string path(const std::string& filename) const;  // dir/filename

  // Stages `filename` with contents produced by `write` into a stream; a
  // stream error (disk full, ...) throws mha::Error (runtime) naming the file.
  void stage(const std::string& filename, const std::function<void(std::ostream&)>& write);
  void stage_bytes(const std::string& filename, const std::string& bytes);
  // A C-order float16 (mha::float16, precision.hpp), float or double tensor
  // as .npy, streamed without an extra copy.
  template <class T>
  void stage_npy(const std::string& filename, const T* data, const std::vector<std::size_t>& shape);
  void stage_npz(const std::string& filename,
                 const std::vector<std::pair<std::string, NpyArray>>& members);

  // A staged .npy (C order, little-endian) whose data arrives later, in any
  // order and from any thread: the header is written and the file's full size
  // reserved now (so a full disk fails here, before any compute), and
  // write_elements() puts elements at their flat offset with pwrite.
  class NpyStream {
   public:
    template <class T>
    void write_elements(std::size_t offset, const T* data, std::size_t count) const;
    // Starts writing elements [offset, offset + count), already written, to
    // disk (sync_file_range), and makes what has reached the disk durable in
    // the background (fdatasync on a thread of its own, one at a time), so
    // that commit() waits for the stream's tail only: on a virtual disk the
    // device's cache flush of a whole 151 MB stream at the end took ~90 ms.
    // Called from one thread at a time (write_elements may run on others).
    void start_writeback(std::size_t offset, std::size_t count) const;

   private:
    friend class OutputSet;
    struct Block {
      std::uint64_t at, bytes;  // file offset and length
      std::uint32_t crc32;
    };
    // The file's checksum from the blocks' own (crc32_combine in file order),
    // or read back from the file when they do not tile it.
    FileChecksum checksum(const std::string& header) const;
    // Waits for the background fdatasync; its error (errno), or 0.
    int finish_sync() const;
    int fd_ = -1;
    mutable std::thread syncer_;
    mutable std::atomic<bool> syncing_{false};
    mutable int sync_error_ = 0;  // written by syncer_, read after joining it
    std::size_t data_start_ = 0, itemsize_ = 0;
    std::string name_;
    mutable std::mutex blocks_mutex_;
    mutable std::vector<Block> blocks_;  // each write_elements call's crc32
  };
  const NpyStream& stage_npy_stream(const std::string& filename, DType dtype,
                                    const std::vector<std::size_t>& shape);

  // The crc32 and size of a staged file as it will be committed (a stream's
  // once its elements are all written), for run.json.
  FileChecksum checksum(const std::string& filename) const;

  // Files in dir() that commit() removes before it renames anything: the
  // outputs of an earlier run (run.json first), so that the directory never
  // holds one run's files beside another's, even if this process dies
  // half-way through the renames. A link is removed, never followed.
  void remove_on_commit(std::vector<std::string> filenames);

  // Removes the files remove_on_commit() named, then renames every staged
  // file to its final name (in staging order); streams are synced and
  // closed first.
  void commit();
  std::vector<std::string> committed() const { return committed_; }

 private:
  struct Staged {
    std::string tmp, final_path;
    std::shared_ptr<NpyStream> stream;  // open file of a stage_npy_stream, else null
    FileChecksum sum;                   // of a file written whole (not of a stream)
    std::string header;                 // a stream's .npy header
  };
  void remove_dead_temporaries() const;
  std::string temp_path(const std::string& filename);
  std::string dir_;
  std::vector<Staged> staged_;
  std::vector<std::string> committed_;
  std::vector<std::string> remove_;
};

// For applications: on SIGINT, SIGTERM or SIGHUP remove every temporary an
// OutputSet of this process has open, then die of the signal as usual; and
// ignore SIGXFSZ so that exceeding a file size limit is a reported write error.
// (SIGKILL cannot be caught: its temporaries stay, under names that start with
// '.' and contain ".tmp.", and no final name ever holds a partial file.)
void remove_temporaries_on_signal();

// Another file the handler above removes (a DirLock's lock file), until
// forget_on_signal(path).
void remove_on_signal(const std::string& path);
// The same, only while `path` still names the file (st_dev, st_ino): what a
// lock file is registered with before it is linked under a name another
// process may have taken first.
void remove_on_signal(const std::string& path, unsigned long long dev, unsigned long long ino);
void forget_on_signal(const std::string& path);

}  // namespace mha
