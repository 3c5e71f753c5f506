// A progress bar on stderr for long work (model loading, offline batches).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace deepinfer {

// Draws "label [=====>    ] 42% 1.2/2.9 GB" in place when stderr is a terminal, and a
// few plain lines otherwise (so logs stay readable). Not thread-safe; one owner advances it.
class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total, std::string unit = "");
  ~ProgressBar();
  void advance(uint64_t amount);
  // Text drawn after the counts, e.g. "1234 tok/s"; shown from the next draw on.
  void set_detail(std::string detail) { detail_ = std::move(detail); }
  void finish();

 private:
  void draw(bool final_line);
  std::string label_;
  std::string unit_;
  std::string detail_;
  uint64_t total_;
  uint64_t done_ = 0;
  int last_reported_percent_ = -1;
  bool is_terminal_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace deepinfer
