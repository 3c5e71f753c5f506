// OpenAI-style JSON sampling fields -> SamplingParams.
#include "engine/sampling_json.h"

#include <cmath>
#include <limits>
#include <string>

#include "engine/structured_output.h"

namespace deepinfer {
namespace {

using nlohmann::json;

Error wrong_type(const std::string& field, const char* expected, const json& got) {
  std::string shown = got.dump();
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  return Error{"field '" + field + "' must be " + expected + ", got " + shown};
}

Result<double> number_field(const json& value, const std::string& field) {
  if (!value.is_number()) return wrong_type(field, "a number", value);
  return value.get<double>();
}

Result<int64_t> int_field(const json& value, const std::string& field) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  return wrong_type(field, "an integer", value);
}

Result<int32_t> int32_field(const json& value, const std::string& field) {
  auto v = int_field(value, field);
  if (!v.ok()) return v.error();
  if (*v < std::numeric_limits<int32_t>::min() || *v > std::numeric_limits<int32_t>::max()) {
    return wrong_type(field, "a 32-bit integer", value);
  }
  return static_cast<int32_t>(*v);
}

Result<bool> bool_field(const json& value, const std::string& field) {
  if (!value.is_boolean()) return wrong_type(field, "true or false", value);
  return value.get<bool>();
}

}  // namespace

Result<SamplingParams> sampling_params_from_json(const json& request, const SamplingParams& defaults) {
  if (!request.is_object()) return Error{"the request must be a JSON object"};
  SamplingParams p = defaults;
  const auto present = [&](const char* key) { return request.contains(key) && !request[key].is_null(); };
  const auto read_double = [&](const char* key, double& target) -> Result<void> {
    if (!present(key)) return {};
    auto v = number_field(request[key], key);
    if (!v.ok()) return v.error();
    target = *v;
    return {};
  };
  const auto read_int = [&](const char* key, int32_t& target) -> Result<void> {
    if (!present(key)) return {};
    auto v = int32_field(request[key], key);
    if (!v.ok()) return v.error();
    target = *v;
    return {};
  };
  const auto read_bool = [&](const char* key, bool& target) -> Result<void> {
    if (!present(key)) return {};
    auto v = bool_field(request[key], key);
    if (!v.ok()) return v.error();
    target = *v;
    return {};
  };
  DI_TRY(read_int("max_completion_tokens", p.max_tokens));
  DI_TRY(read_int("max_tokens", p.max_tokens));
  DI_TRY(read_double("temperature", p.temperature));
  DI_TRY(read_double("top_p", p.top_p));
  DI_TRY(read_int("top_k", p.top_k));
  DI_TRY(read_double("min_p", p.min_p));
  DI_TRY(read_int("n", p.n));
  DI_TRY(read_int("min_tokens", p.min_tokens));
  DI_TRY(read_double("presence_penalty", p.presence_penalty));
  DI_TRY(read_double("frequency_penalty", p.frequency_penalty));
  DI_TRY(read_double("repetition_penalty", p.repetition_penalty));
  DI_TRY(read_bool("ignore_eos", p.ignore_eos));
  DI_TRY(read_bool("include_stop_str_in_output", p.include_stop_str_in_output));
  DI_TRY(read_bool("skip_special_tokens", p.skip_special_tokens));
  if (present("seed")) {
    auto v = int_field(request["seed"], "seed");
    if (!v.ok()) return v.error();
    p.seed = static_cast<uint64_t>(*v);
  }
  if (present("stop")) {
    const json& stop = request["stop"];
    p.stop.clear();
    if (stop.is_string()) {
      p.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const json& s : stop) {
        if (!s.is_string()) return wrong_type("stop", "a string or a list of strings", stop);
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return wrong_type("stop", "a string or a list of strings", stop);
    }
  }
  if (present("stop_token_ids")) {
    const json& ids = request["stop_token_ids"];
    if (!ids.is_array()) return wrong_type("stop_token_ids", "a list of token ids", ids);
    p.stop_token_ids.clear();
    for (const json& id : ids) {
      auto v = int32_field(id, "stop_token_ids");
      if (!v.ok()) return v.error();
      p.stop_token_ids.push_back(*v);
    }
  }
  if (present("logit_bias")) {
    const json& bias = request["logit_bias"];
    if (!bias.is_object()) return wrong_type("logit_bias", "an object of token id -> bias", bias);
    p.logit_bias.clear();
    for (const auto& [key, value] : bias.items()) {
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
        return Error{"field 'logit_bias' has key \"" + key + "\"; keys must be token ids"};
      }
      auto v = number_field(value, "logit_bias");
      if (!v.ok()) return v.error();
      p.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(*v);
    }
  }
  // logprobs: an int (completions, JSONL) or a bool with top_logprobs (chat).
  if (present("logprobs")) {
    const json& logprobs = request["logprobs"];
    if (logprobs.is_boolean()) {
      if (logprobs.get<bool>()) p.logprobs = 0;
    } else {
      auto v = int32_field(logprobs, "logprobs");
      if (!v.ok()) return wrong_type("logprobs", "an integer or true/false", logprobs);
      p.logprobs = *v;
    }
  }
  if (present("top_logprobs")) {
    auto v = int32_field(request["top_logprobs"], "top_logprobs");
    if (!v.ok()) return v.error();
    p.logprobs = *v;
  }
  if (present("prompt_logprobs")) {
    auto v = int32_field(request["prompt_logprobs"], "prompt_logprobs");
    if (!v.ok()) return v.error();
    p.prompt_logprobs = *v;
  }
  DI_TRY(read_structured_output(request, p));
  return p;
}

}  // namespace deepinfer
