// Runs the deepinfer CLI (DEEPINFER_CLI, set by tests/CMakeLists.txt) in a shell and captures
// its exit code and output, for the tests that drive the binary end to end.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace deepinfer::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
};

// A shell command line's exit code and standard output.
inline CliResult run_shell(const std::string& command) {
  CliResult result;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// out gets stdout, and stderr too when with_stderr (else stderr is dropped).
inline CliResult run_cli(const std::string& args, bool with_stderr = true) {
  return run_shell(std::string(DEEPINFER_CLI) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

}  // namespace deepinfer::testing
