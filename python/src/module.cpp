// deepinfer._core: the native half of the Python package, bound with pybind11: deepinfer::LLM, the
// tokenizer and chat templates, sampling-field checks, and the CLI's `serve`. The vLLM-shaped API
// over it is Python (python/deepinfer/).
#include <pybind11/stl.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bindings.h"
#include "commands.h"
#include "engine/sampling_json.h"
#include "engine/structured_output.h"
#include "grammar/compiler.h"

namespace deepinfer::python {

SamplingParams parse_sampling_params(const std::string& fields_json, int64_t vocab_size, bool compile_grammar) {
  const nlohmann::json fields = nlohmann::json::parse(fields_json, nullptr, /*allow_exceptions=*/false);
  if (fields.is_discarded()) throw py::value_error("sampling params: the fields are not JSON");
  auto params = sampling_params_from_json(fields);
  if (!params.ok()) throw py::value_error(params.error().message);
  if (auto valid = params->validate(vocab_size); !valid.ok()) throw py::value_error(valid.error().message);
  if (compile_grammar && params->structured_output) {
    auto grammar = grammar::build_grammar(to_grammar_spec(*params->structured_output));
    if (!grammar.ok()) throw py::value_error("structured output: " + grammar.error().message);
  }
  return std::move(*params);
}

namespace {

// `deepinfer serve ARGS...` in this process; returns its exit code. The server installs its own
// SIGINT / SIGTERM handling (graceful shutdown), so it runs with the GIL released.
int serve(const std::vector<std::string>& args) {
  std::vector<std::string> words = {"serve"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  py::gil_scoped_release release;
  try {
    return cli::run_serve(static_cast<int>(words.size()), argv.data());
  } catch (const std::exception& e) {  // as the CLI's main() reports it
    std::fprintf(stderr, "deepinfer serve: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace
}  // namespace deepinfer::python

PYBIND11_MODULE(_core, module) {
  using namespace deepinfer::python;
  module.doc() = "deepinfer's native engine; use the deepinfer package's API instead.";
  module.attr("__version__") = DEEPINFER_VERSION;
  module.def(
      "check_sampling_params",
      [](const std::string& fields_json) {
        // Token ids are checked against the model's vocabulary when a request is added.
        parse_sampling_params(fields_json, int64_t{1} << 31, /*compile_grammar=*/true);
      },
      py::arg("fields_json"), "Raises ValueError naming the first sampling field out of range.");
  module.def("serve", &serve, py::arg("args"), "Runs `deepinfer serve ARGS...`; returns its exit code.");
  bind_engine(module);
  bind_tokenizer(module);
}
