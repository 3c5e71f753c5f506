// Command-line flags of the bench tools: every flag is `--name VALUE`; unknown or valueless
// flags are errors naming the flag.
#pragma once

#include <cstdio>
#include <cstring>
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

// A bench tool's main(): --help prints usage; an error from run is printed as "<name>: <message>"
// with exit code 1.
inline int tool_main(int argc, char** argv, const char* name, const char* usage, Result<void> (*run)(int, char**)) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(usage, stdout);
    return 0;
  }
  const Result<void> result = run(argc, argv);
  if (!result.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, result.error().message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace deepinfer::bench
