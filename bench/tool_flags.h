// Command-line flags of the bench tools: every flag is `--name VALUE`; unknown or valueless
// flags are errors naming the flag.
#pragma once

#include <map>
#include <set>
#include <string>

#include "core/result.h"

namespace deepinfer::bench {

inline Result<std::map<std::string, std::string>> parse_tool_flags(int argc, char** argv,
                                                                   const std::set<std::string>& known) {
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (!known.count(flag)) return Error{"unknown argument '" + flag + "' (try --help)"};
    if (i + 1 >= argc) return Error{"flag " + flag + " needs a value"};
    values[flag] = argv[++i];
  }
  return values;
}

}  // namespace deepinfer::bench
