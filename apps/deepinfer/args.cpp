// Flag parsing for the CLI subcommands.
#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace deepinfer::cli {

Result<Args> Args::parse(int argc, char** argv, const std::set<std::string>& value_flags,
                         const std::set<std::string>& bool_flags) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (value_flags.count(flag) != 0) {
      if (inline_value) {
        args.values_[flag] = *inline_value;
      } else if (i + 1 < argc) {
        args.values_[flag] = argv[++i];
      } else {
        return Error{"flag " + flag + " needs a value"};
      }
    } else if (bool_flags.count(flag) != 0 && !inline_value) {
      args.values_[flag] = "";
    } else {
      return Error{"unknown argument '" + std::string(argv[i]) + "' for '" + argv[0] + "' (see deepinfer " + argv[0] +
                   " --help)"};
    }
  }
  return args;
}

Args Args::with(const std::string& flag, const std::optional<std::string>& value) const {
  Args copy = *this;
  if (value) {
    copy.values_[flag] = *value;
  } else {
    copy.values_.erase(flag);
  }
  return copy;
}

std::optional<std::string> Args::find(const std::string& flag) const {
  const auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

Result<std::string> Args::get_string(const std::string& flag) const {
  auto value = find(flag);
  if (!value) return Error{"missing required flag " + flag};
  return *value;
}

Result<int64_t> Args::get_int(const std::string& flag, int64_t fallback) const {
  auto value = find(flag);
  if (!value) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(value->c_str(), &end, 10);
  if (value->empty() || *end != '\0' || errno == ERANGE) {
    return Error{"flag " + flag + " needs an integer, got '" + *value + "'"};
  }
  return static_cast<int64_t>(parsed);
}

Result<double> Args::get_double(const std::string& flag, double fallback) const {
  auto value = find(flag);
  if (!value) return fallback;
  char* end = nullptr;
  const double parsed = std::strtod(value->c_str(), &end);
  if (value->empty() || *end != '\0' || !std::isfinite(parsed)) {
    return Error{"flag " + flag + " needs a number, got '" + *value + "'"};
  }
  return parsed;
}

Result<std::vector<int32_t>> Args::get_int_list(const std::string& flag) const {
  auto value = find(flag);
  if (!value) return Error{"missing required flag " + flag};
  std::vector<int32_t> out;
  size_t start = 0;
  while (start <= value->size()) {
    const size_t comma = value->find(',', start);
    const std::string item = value->substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    errno = 0;
    char* end = nullptr;
    const long long parsed = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || parsed < INT32_MIN || parsed > INT32_MAX) {
      return Error{"flag " + flag + " needs comma-separated integers like 1,2,3; '" + item + "' is not one"};
    }
    out.push_back(static_cast<int32_t>(parsed));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace deepinfer::cli
