// Leveled logging to stderr; the level comes from DEEPINFER_LOG (error, warn, info, debug).
#pragma once

#include <sstream>
#include <string>

namespace deepinfer {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_line(LogLevel level, const std::string& message);  // thread-safe

}  // namespace deepinfer

#define DI_LOG(level, ...)                                                              \
  do {                                                                                  \
    if (::deepinfer::LogLevel::level <= ::deepinfer::log_level()) {                     \
      std::ostringstream di_log_os_;                                                    \
      di_log_os_ << __VA_ARGS__;                                                        \
      ::deepinfer::log_line(::deepinfer::LogLevel::level, di_log_os_.str());            \
    }                                                                                   \
  } while (0)
