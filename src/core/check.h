// Invariant checks: DI_CHECK is always on, DI_DCHECK only in debug builds (hot loops).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace deepinfer {

// A broken internal invariant: a bug in deepinfer, never the user's input.
class InvariantError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void fail_invariant(const char* file, int line, const char* cond, const std::string& detail);

}  // namespace deepinfer

#define DI_CHECK(cond, ...)                                                                      \
  do {                                                                                           \
    if (!(cond)) [[unlikely]] {                                                                  \
      std::ostringstream di_check_os_;                                                           \
      di_check_os_ << "" __VA_OPT__(<< __VA_ARGS__);\
      ::deepinfer::fail_invariant(__FILE__, __LINE__, #cond, di_check_os_.str());                \
    }                                                                                            \
  } while (0)

#ifdef NDEBUG
#define DI_DCHECK(cond, ...) \
  do {                       \
  } while (0)
#else
#define DI_DCHECK(cond, ...) DI_CHECK(cond, __VA_ARGS__)
#endif
