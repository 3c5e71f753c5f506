// What the files of deepinfer._core share: the bind functions PYBIND11_MODULE calls, and the
// conversion of a request's sampling fields (vLLM names, as JSON text) into SamplingParams.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "deepinfer/sampling_params.h"

namespace deepinfer::python {

namespace py = pybind11;

// fields_json: a JSON object of OpenAI / vLLM-named sampling fields (engine/sampling_json.h), read
// over SamplingParams' defaults (vLLM's) and checked by SamplingParams::validate(vocab_size).
// compile_grammar also compiles a structured-output spec, so a schema the engine cannot enforce
// fails here instead of at generate time. Raises ValueError naming the field.
SamplingParams parse_sampling_params(const std::string& fields_json, int64_t vocab_size, bool compile_grammar);

void bind_engine(py::module_& module);     // Engine, Stream and the result types (engine_binding.cpp)
void bind_tokenizer(py::module_& module);  // Tokenizer with the native chat templates (tokenizer_binding.cpp)

}  // namespace deepinfer::python
