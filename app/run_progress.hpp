// mha run's progress line on stderr, for single runs long enough to wonder
// about (sweeps have their own bar, progress.hpp):
//
//   mha run: compute  1234/4096 blocks (30%)  00:05 elapsed  ETA 00:12
//
// Drawn in place, about 5 times a second, once the run has lasted 2 s
// (MHA_PROGRESS_AFTER_MS overrides), only when stderr is a terminal and info
// messages are logged (not under -q); never otherwise, so logs, pipes and
// sweep workers see nothing of it. It reads the run's StageProgress from its
// own thread; the run itself does nothing for it but count blocks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "mha/base/progress.hpp"

namespace mha::cli {

class RunProgressLine {
 public:
  RunProgressLine(const StageProgress& progress, bool enabled);
  ~RunProgressLine();  // stops and clears the line
  RunProgressLine(const RunProgressLine&) = delete;
  RunProgressLine& operator=(const RunProgressLine&) = delete;

  // Clears the line so that a log message can be printed; it is redrawn on
  // the next tick.
  void clear_for_message();
  void stop();

  // The line for a stage `seconds` into the run, `stage_seconds` into the
  // stage: exposed for tests.
  static std::string format(const char* stage, std::uint64_t done, std::uint64_t total,
                            double seconds, double stage_seconds);

 private:
  void loop();
  const StageProgress& progress_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::milliseconds after_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, drawn_ = false;
  std::thread thread_;
};

}  // namespace mha::cli
