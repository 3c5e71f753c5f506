// The shutdown watchdog.
#include "server/shutdown.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace deepinfer::server {

ShutdownDeadline::ShutdownDeadline(double timeout_s) : timeout_s_(timeout_s) {}

ShutdownDeadline::~ShutdownDeadline() {
  {
    std::lock_guard lock(mutex_);
    finished_ = true;
  }
  finished_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void ShutdownDeadline::begin() {
  std::lock_guard lock(mutex_);
  if (begun_) return;
  begun_ = true;
  began_ = std::chrono::steady_clock::now();
  const auto deadline = began_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     std::chrono::duration<double>(timeout_s_));
  watchdog_ = std::thread([this, deadline] {
    std::unique_lock lock(mutex_);
    if (finished_cv_.wait_until(lock, deadline, [&] { return finished_; })) return;
    std::ostringstream why;
    why << "did not finish within " << timeout_s_ << " s (--shutdown-timeout), stuck " << stage_;
    give_up(why.str());
  });
}

bool ShutdownDeadline::begun() const {
  std::lock_guard lock(mutex_);
  return begun_;
}

std::chrono::steady_clock::time_point ShutdownDeadline::at_fraction(double fraction) const {
  std::lock_guard lock(mutex_);
  return began_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeout_s_ * fraction));
}

void ShutdownDeadline::set_stage(std::string stage) {
  std::lock_guard lock(mutex_);
  stage_ = std::move(stage);
}

void ShutdownDeadline::give_up(const std::string& why) {
  // A plain write: the logger's lock may be held by the thread that is stuck.
  const std::string line = "[deepinfer error] shutdown: " + why + "; exiting now\n";
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
  std::_Exit(1);
}

}  // namespace deepinfer::server
