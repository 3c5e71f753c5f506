// Shared setup of the model-running subcommands.
#include "session.h"

#include <omp.h>

#include <cstring>

namespace deepinfer::cli {

std::set<std::string> model_value_flags(std::set<std::string> extra) {
  extra.insert({"--model", "--device", "--threads"});
  return extra;
}

std::set<std::string> model_bool_flags(std::set<std::string> extra) {
  extra.insert("--batch-invariant");
  return extra;
}

BackendOptions backend_options_from_args(const Args& args) {
  BackendOptions options;
  options.batch_invariant = args.has("--batch-invariant");
  return options;
}

Result<LoadedModel> load_model_from_args(const Args& args) {
  auto threads = args.get_int("--threads", 0);
  if (!threads.ok()) return threads.error();
  if (*threads < 0) return Error{"--threads must be >= 1 (0 or absent: all cores)"};
  if (*threads > 0) omp_set_num_threads(static_cast<int>(*threads));
  auto dir = args.get_string("--model");
  if (!dir.ok()) return dir.error();
  auto backend = make_backend(args.find("--device").value_or("cpu"), backend_options_from_args(args));
  if (!backend.ok()) return backend.error();
  LoadedModel loaded;
  loaded.backend = std::move(*backend);
  auto model = load_model(*dir, *loaded.backend);
  if (!model.ok()) return model.error();
  loaded.model = std::move(*model);
  return loaded;
}

int report_error(const char* command, const Error& error) {
  std::fprintf(stderr, "deepinfer %s: error: %s\n", command, error.message.c_str());
  return 1;
}

bool wants_help(int argc, char** argv, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(usage, stdout);
      return true;
    }
  }
  return false;
}

}  // namespace deepinfer::cli
