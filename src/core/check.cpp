// Invariant failure reporting.
#include "core/check.h"

namespace deepinfer {

void fail_invariant(const char* file, int line, const char* cond, const std::string& detail) {
  std::ostringstream os;
  os << "internal error (a deepinfer bug, please report it): " << file << ":" << line << ": check `" << cond
     << "` failed";
  if (!detail.empty()) os << ": " << detail;
  throw InvariantError(os.str());
}

}  // namespace deepinfer
