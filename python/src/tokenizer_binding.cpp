// deepinfer._core.Tokenizer: a model directory's tokenizer.json and its chat template, rendered by
// the native renderer of the model's family (recipe/chat_template.h), as the CLI and server do.
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "recipe/chat_template.h"
#include "recipe/prompt.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::python {
namespace {

class PyTokenizer {
 public:
  explicit PyTokenizer(const std::string& model_dir) : tokenizer_(load(model_dir)) {
    auto family = detect_chat_family(model_dir);
    if (family.ok()) {
      family_ = *family;
    } else {
      family_error_ = family.error().message;  // raised by render_chat: plain encoding still works
    }
  }

  // Hugging Face's encode(text, add_special_tokens): the post-processor's BOS when asked. Text is
  // never matched against special tokens (tokenizer/tokenizer.h says why).
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const {
    auto ids = tokenizer_.encode(text);
    if (!ids.ok()) throw py::value_error(ids.error().message);
    return add_special_tokens ? tokenizer_.add_special_tokens(*ids) : std::move(*ids);
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
    return tokenizer_.decode(ids, skip_special_tokens);
  }

  // An OpenAI chat request ({"messages", "tools", "chat_template_kwargs", "add_generation_prompt"})
  // as the model's chat template renders it: the prompt text and its token ids.
  std::pair<std::string, std::vector<int32_t>> render_chat(const std::string& request_json) const {
    if (!family_) throw py::value_error(family_error_);
    const nlohmann::ordered_json request = nlohmann::ordered_json::parse(request_json, nullptr, false);
    if (request.is_discarded()) throw py::value_error("the chat request is not JSON");
    auto segments = render_chat_request(*family_, request);
    if (!segments.ok()) throw py::value_error(segments.error().message);
    auto ids = encode_prompt(tokenizer_, *segments, /*pool=*/nullptr);
    if (!ids.ok()) throw py::value_error(ids.error().message);
    return {prompt_text(*segments), std::move(*ids)};
  }

  const Tokenizer& native() const { return tokenizer_; }

 private:
  static Tokenizer load(const std::string& model_dir) {
    auto tokenizer = Tokenizer::load(model_dir);
    if (!tokenizer.ok()) throw py::value_error(tokenizer.error().message);
    return std::move(*tokenizer);
  }

  Tokenizer tokenizer_;
  std::optional<ChatFamily> family_;  // the chat template's family, or why it has none
  std::string family_error_;
};

}  // namespace

void bind_tokenizer(py::module_& module) {
  // The tokenizer is immutable and thread-safe: long texts encode while other threads run Python.
  const py::call_guard<py::gil_scoped_release> kWithoutGil;
  py::class_<PyTokenizer>(module, "Tokenizer")
      .def(py::init<const std::string&>(), py::arg("model_dir"))
      .def("encode", &PyTokenizer::encode, py::arg("text"), py::arg("add_special_tokens"), kWithoutGil)
      .def("decode", &PyTokenizer::decode, py::arg("token_ids"), py::arg("skip_special_tokens"), kWithoutGil)
      .def("render_chat", &PyTokenizer::render_chat, py::arg("request_json"), kWithoutGil)
      .def("token_to_id", [](const PyTokenizer& t, const std::string& token) { return t.native().token_to_id(token); })
      .def("id_to_token", [](const PyTokenizer& t, int32_t id) { return t.native().id_to_token(id); })
      .def_property_readonly("vocab_size", [](const PyTokenizer& t) { return t.native().vocab_size(); })
      .def_property_readonly("bos_token_id", [](const PyTokenizer& t) { return t.native().bos_id(); })
      .def_property_readonly("eos_token_id", [](const PyTokenizer& t) { return t.native().eos_id(); });
}

}  // namespace deepinfer::python
