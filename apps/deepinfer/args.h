// A small command-line flag parser for the CLI subcommands: --name VALUE and --flag forms.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/result.h"

namespace deepinfer::cli {

class Args {
 public:
  // value_flags take a value (--model DIR), bool_flags do not (--ignore-eos). Unknown flags and
  // missing values are errors naming the flag. argv[0] is the subcommand name.
  static Result<Args> parse(int argc, char** argv, const std::set<std::string>& value_flags,
                            const std::set<std::string>& bool_flags);

  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  std::optional<std::string> find(const std::string& flag) const;
  // Typed getters: errors name the flag and the bad value.
  Result<std::string> get_string(const std::string& flag) const;  // required
  Result<int64_t> get_int(const std::string& flag, int64_t fallback) const;
  Result<double> get_double(const std::string& flag, double fallback) const;
  // "1,2,3" -> {1, 2, 3}
  Result<std::vector<int32_t>> get_int_list(const std::string& flag) const;
  // A copy with flag set to value ("" for a bool flag), or without flag where value is empty.
  Args with(const std::string& flag, const std::optional<std::string>& value) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace deepinfer::cli
