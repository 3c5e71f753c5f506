// Structured output at request time: lenient-mode warnings for the response, and tool calls
// constrained in the family's own markup (tool_choice "required" or a named function: one call;
// "auto" with a strict tool: free text or one call), arguments matching each tool's parameters.
#include <algorithm>
#include <chrono>

#include "engine/structured_output.h"
#include "recipe/api_request_internal.h"
#include "recipe/tool_call_grammar.h"

namespace deepinfer::api {
namespace {

// The front end runs here, on the connection's thread, so it gets the deadline an engine
// compile has: a costly schema is an error, never a stalled connection thread.
grammar::GrammarLimits request_limits() {
  grammar::GrammarLimits limits;
  limits.deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(
                        grammar::GrammarCompilerService::Options{}.timeout_seconds));
  return limits;
}

bool is_strict(const Json& function) {
  const Json* strict = find_field(function, "strict");
  return strict != nullptr && strict->is_boolean() && strict->get<bool>();
}

// The arguments grammar of tools[i] (see ToolCallGrammarInput::arguments): its parameters, or any
// object when it has none. A strict tool whose schema the engine cannot enforce is a 400; a
// non-strict one drops what it cannot enforce (warnings) and falls back to any JSON object when
// its schema still does not compile.
std::variant<Json, ApiError> arguments_grammar(const Json& function, size_t i, std::vector<std::string>& warnings) {
  const Json* parameters = find_field(function, "parameters");
  const Json schema = parameters != nullptr && parameters->is_object() && !parameters->empty()
                          ? *parameters
                          : Json{{"type", "object"}};
  const bool strict = is_strict(function);
  grammar::GrammarSpec spec;
  spec.kind = grammar::GrammarSpec::Kind::kJsonSchema;
  spec.text = schema.dump();
  spec.json.lenient = !strict;
  std::vector<std::string> dropped;
  auto grammar = grammar::build_grammar(spec, request_limits(), &dropped);
  const std::string path = "tools[" + std::to_string(i) + "].function.parameters";
  if (grammar.ok()) {
    warnings.insert(warnings.end(), dropped.begin(), dropped.end());
    return Json{{"json_schema", schema}, {"lenient", !strict}};
  }
  if (strict) return bad_request("tools", path + ": " + grammar.error().message);
  warnings.push_back(path + ": " + grammar.error().message + "; the arguments are only constrained to a JSON object");
  return Json{{"json_object", true}};
}

}  // namespace

std::optional<ApiError> collect_structured_warnings(ApiRequest& request) {
  const auto& params = request.sampling.structured_output;
  if (!params || params->kind != StructuredOutputParams::Kind::kJsonSchema || params->strict) return std::nullopt;
  auto grammar = grammar::build_grammar(to_grammar_spec(*params), request_limits(), &request.warnings);
  if (grammar.ok()) return std::nullopt;
  const std::string field = request.structured_output ? request.structured_output->begin().key() : "guided_json";
  return bad_request(field, field + ": " + grammar.error().message);
}

std::optional<ApiError> constrain_tool_calls(ApiRequest& request, const std::vector<Json>& tools, bool required,
                                             const ModelContext& model) {
  if (tools.empty()) return std::nullopt;
  if (!required) {
    // auto: constrained only for a strict tool, and only when nothing else constrains the text.
    const bool any_strict = std::any_of(tools.begin(), tools.end(), [](const Json& t) { return is_strict(t["function"]); });
    if (!any_strict || request.sampling.structured_output) return std::nullopt;
  } else if (request.sampling.structured_output) {
    return bad_request("tool_choice", "tool_choice: a forced tool call cannot be combined with response_format or "
                                      "guided_* (both constrain the whole output)");
  }
  ToolCallGrammarInput input;
  input.family = model.family;
  input.tokenizer = model.tokenizer;
  input.required = required;
  input.reasoning_open = request.parsing.starts_in_reasoning;
  input.may_reason = !request.parsing.starts_in_reasoning && request.parsing.parse_reasoning && request.thinking;
  std::vector<std::string> warnings;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& function = tools[i]["function"];
    auto arguments = arguments_grammar(function, i, warnings);
    if (auto* error = std::get_if<ApiError>(&arguments)) return *error;
    input.names.push_back(function.value("name", ""));
    input.arguments.push_back(std::get<Json>(std::move(arguments)));
  }
  const std::optional<Json> spec = tool_call_grammar(input);
  if (!spec) {
    // The family's template has no tool calls (its prompt does not show the tools): a call asked
    // for cannot be honoured, one merely offered is left to the text.
    if (!required) return std::nullopt;
    return bad_request("tool_choice", "tool_choice: the " + std::string(chat_family_name(model.family)) +
                                          " chat format has no tool calls, so a tool call cannot be required");
  }
  StructuredOutputParams params;
  params.kind = StructuredOutputParams::Kind::kStructural;
  params.spec = spec->dump();
  // One space after ':' and ',' as the models write their calls.
  params.max_whitespace = 1;
  // The whole grammar through the front end now, so a failure is this request's 400.
  auto grammar = grammar::build_grammar(to_grammar_spec(params), request_limits());
  if (!grammar.ok()) return bad_request("tools", "tools: " + grammar.error().message);
  request.warnings.insert(request.warnings.end(), warnings.begin(), warnings.end());
  request.sampling.structured_output = std::move(params);
  return std::nullopt;
}

}  // namespace deepinfer::api
