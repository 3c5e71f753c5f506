// Where a test fixture lives: tests/data/NAME (most written by tools/reference/).
#pragma once

#include <string>

namespace deepinfer::testing {

inline std::string fixture_dir(const std::string& name) { return std::string(DEEPINFER_TEST_DATA_DIR) + "/" + name; }

}  // namespace deepinfer::testing
