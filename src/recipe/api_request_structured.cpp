// Structured output at request time: lenient-mode warnings for the response, and forced tool
// calls (tool_choice "required" or a named function: one call, in the family's own markers, of an
// offered tool whose arguments match its `parameters`).
#include "engine/structured_output.h"
#include "recipe/api_request_internal.h"

namespace deepinfer::api {
namespace {

// {"name": <that tool's name>, "arguments": <its parameters>}, in Qwen3's key order.
Json call_schema(const Json& function) {
  Json parameters = function.contains("parameters") && function["parameters"].is_object() &&
                            !function["parameters"].empty()
                        ? function["parameters"]
                        : Json{{"type", "object"}};
  return Json{{"type", "object"},
              {"properties", {{"name", {{"const", function.value("name", "")}}}, {"arguments", std::move(parameters)}}},
              {"required", {"name", "arguments"}},
              {"additionalProperties", false}};
}

}  // namespace

std::optional<ApiError> collect_structured_warnings(ApiRequest& request) {
  const auto& params = request.sampling.structured_output;
  if (!params || params->kind != StructuredOutputParams::Kind::kJsonSchema || params->strict) return std::nullopt;
  auto grammar = grammar::build_grammar(to_grammar_spec(*params), {}, &request.warnings);
  if (grammar.ok()) return std::nullopt;
  const std::string field = request.structured_output ? request.structured_output->begin().key() : "guided_json";
  return bad_request(field, field + ": " + grammar.error().message);
}

std::optional<ApiError> constrain_tool_call(ApiRequest& request, const std::vector<Json>& tools, ChatFamily family) {
  // Only Qwen3's call is one JSON value between fixed markers; other families' calls are left
  // unconstrained (docs/structured_output.md).
  if (family != ChatFamily::kQwen3 || tools.empty()) return std::nullopt;
  if (request.sampling.structured_output) {
    return bad_request("tool_choice", "tool_choice: a forced tool call cannot be combined with response_format or "
                                      "guided_* (both constrain the whole output)");
  }
  StructuredOutputParams params;
  params.kind = StructuredOutputParams::Kind::kJsonSchema;
  // Keywords the engine cannot enforce fail the request only for tools marked strict.
  params.strict = false;
  Json any_of = Json::array();
  for (const Json& tool : tools) {
    const Json& function = tool["function"];
    if (function.value("strict", false)) params.strict = true;
    any_of.push_back(call_schema(function));
  }
  params.spec = (any_of.size() == 1 ? any_of[0] : Json{{"anyOf", std::move(any_of)}}).dump();
  params.prefix = "<tool_call>\n";
  params.suffix = "\n</tool_call>";
  // One space after ':' and ',' as the model writes its calls.
  params.max_whitespace = 1;
  // The front end here, so a schema error is this request's 400 rather than a failed generation.
  auto grammar = grammar::build_grammar(to_grammar_spec(params), {}, &request.warnings);
  if (!grammar.ok()) return bad_request("tools", "tools: parameters: " + grammar.error().message);
  request.sampling.structured_output = std::move(params);
  return std::nullopt;
}

}  // namespace deepinfer::api
