// An advisory lock on an output directory, so that two processes never write
// one run's files at once. The lock is a flock(2) on a hidden file in the
// directory (`name`, e.g. ".mha.lock") that holds the holder's pid for the
// message a second process gets. The kernel releases a flock when its holder
// exits, however it exits: a lock file left by a killed process never blocks.
#pragma once

#include <string>

namespace mha {

class DirLock {
 public:
  // Creates `dir` (and parents) if missing, then takes the lock without
  // waiting. Throws mha::Error (invalid_input, exit code 2) naming the
  // directory and the holder's pid when another process holds it; (runtime)
  // when the lock file cannot be made, e.g. a link or a directory is in its
  // place (a link is never followed).
  DirLock(const std::string& dir, const std::string& name);
  // Removes the lock file, and the directory if this lock created it and it
  // is still empty (a run that failed leaves no trace).
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  void write_pid(int fd) const;  // closes fd and throws on failure
  // A new lock file, locked, under the name; -1 when another process made
  // one first.
  int make_lock_file() const;
  std::string dir_, path_;
  int fd_ = -1;
  bool created_dir_ = false;
};

}  // namespace mha
