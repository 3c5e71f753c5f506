// ShutdownDeadline: the server's shutdown ends within a bound whatever is stuck. Once begun, a
// watchdog thread waits for the deadline; if the process is still there, it writes the stage the
// shutdown was in to stderr and ends the process with std::_Exit: no destructor, lock or join
// that could block.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace deepinfer::server {

class ShutdownDeadline {
 public:
  explicit ShutdownDeadline(double timeout_s);
  // Stops the watchdog: the shutdown finished in time (or never began).
  ~ShutdownDeadline();
  ShutdownDeadline(const ShutdownDeadline&) = delete;
  ShutdownDeadline& operator=(const ShutdownDeadline&) = delete;

  // Starts the clock and the watchdog; later calls do nothing. Thread-safe.
  void begin();
  bool begun() const;
  double timeout_s() const { return timeout_s_; }
  // begin()'s time + fraction of the timeout: when a stage of the shutdown stops waiting.
  std::chrono::steady_clock::time_point at_fraction(double fraction) const;
  // What the shutdown is doing, for the watchdog's message. Thread-safe.
  void set_stage(std::string stage);
  // Writes "shutdown: <why>; exiting now" to stderr and ends the process with status 1, as the
  // watchdog does at the deadline. Thread-safe; never returns.
  [[noreturn]] static void give_up(const std::string& why);

 private:
  const double timeout_s_;
  mutable std::mutex mutex_;
  std::condition_variable finished_cv_;
  bool begun_ = false;
  bool finished_ = false;
  std::chrono::steady_clock::time_point began_;
  std::string stage_ = "closing connections";
  std::thread watchdog_;
};

}  // namespace deepinfer::server
