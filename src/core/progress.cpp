// Progress bar rendering.
#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace deepinfer {
namespace {

std::string format_amount(uint64_t amount, const std::string& unit) {
  char buf[64];
  if (unit == "B") {
    std::snprintf(buf, sizeof(buf), "%.2f GB", static_cast<double>(amount) / 1e9);
  } else {
    std::snprintf(buf, sizeof(buf), "%llu%s%s", static_cast<unsigned long long>(amount), unit.empty() ? "" : " ",
                  unit.c_str());
  }
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      is_terminal_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {
  draw(false);
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::advance(uint64_t amount) {
  done_ += amount;
  if (done_ > total_) done_ = total_;
  draw(false);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  // Off a terminal the 100% line may already be printed.
  if (!is_terminal_ && last_reported_percent_ == 100) return;
  done_ = total_;
  draw(true);
}

void ProgressBar::draw(bool final_line) {
  const int percent = total_ == 0 ? 100 : static_cast<int>(done_ * 100 / total_);
  // Off a terminal, print only at 0/25/50/75/100% so log files stay short.
  if (!is_terminal_ && !final_line && (percent / 25 == last_reported_percent_ / 25)) return;
  if (is_terminal_ && !final_line && percent == last_reported_percent_) return;
  last_reported_percent_ = percent;
  constexpr int kWidth = 30;
  const int filled = percent * kWidth / 100;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "%s%s [%s] %3d%% %s/%s %.1fs%s%s%s", is_terminal_ ? "\r" : "", label_.c_str(), bar.c_str(),
               percent, format_amount(done_, unit_).c_str(), format_amount(total_, unit_).c_str(), seconds,
               detail_.empty() ? "" : " ", detail_.c_str(), (is_terminal_ && !final_line) ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace deepinfer
