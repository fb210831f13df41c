// Progress of a batch of runs on stderr: a bar redrawn in place when stderr
// is a terminal, plain log lines otherwise (Slurm logs, pipes, CI).
//
//   [########------------]  12/40  1 failed  00:35 elapsed  ETA 01:20  h=8_seq_len=512
//
// Debian 12 packages no C++ progress-bar library, so this is the one piece of
// terminal drawing the tool does itself: one line, '\r' and an erase.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace mha::cli {

class Progress {
 public:
  // `total`: runs this invocation will do; `skipped`: runs already done.
  Progress(std::size_t total, std::size_t skipped);
  ~Progress();

  void started(const std::string& name);
  void finished(const std::string& name, bool ok, const std::string& detail);
  // A message above the bar (or a log line), e.g. a warning.
  void message(const std::string& text);
  // Redraws the bar if enough time passed (elapsed time moves on between runs).
  void tick();
  void done();

 private:
  void draw();
  void clear();
  std::string eta() const;
  bool tty_;
  std::size_t total_, skipped_, done_ = 0, failed_ = 0;
  std::string current_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

// "01:05" or "2:03:04".
std::string format_duration(double seconds);

}  // namespace mha::cli
