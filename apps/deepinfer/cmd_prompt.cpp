// `deepinfer prompt`: an OpenAI chat request on stdin -> the prompt the model's chat template
// gives (or its token ids). Needs only tokenizer_config.json (and tokenizer.json for --tokens).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "commands.h"
#include "core/thread_pool.h"
#include "recipe/chat_template.h"
#include "session.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kPromptUsage = R"(usage: deepinfer prompt --model DIR [--tokens] [--family NAME]
Reads an OpenAI chat request {"messages": [...], "tools": [...]} on stdin and prints the prompt
the model's chat template makes of it (no newline added), or with --tokens its token ids as a
JSON array. Control tokens come only from the template: text in messages is never encoded as a
special token. Template variables come from the request: "add_generation_prompt" (default true),
"reasoning_effort", and "chat_template_kwargs" (enable_thinking / thinking, reasoning_effort,
model_identity, date, date_string, tools_in_user_message, add_vision_id).
The family is read from DIR's tokenizer_config.json (or chat_template.jinja, config.json);
--family overrides it: deepseek_v3, deepseek_r1, deepseek_v3_1, qwen3, llama3, llama3_1,
llama3_2, gpt_oss, gemma3, qwen2_vl.
)";

using Json = nlohmann::ordered_json;

Result<ChatFamily> family_from_args(const Args& args, const std::string& model_dir) {
  const auto name = args.find("--family");
  if (!name) return detect_chat_family(model_dir);
  if (auto family = find_chat_family(*name)) return *family;
  return Error{"--family: unknown family '" + *name +
               "' (deepseek_v3, deepseek_r1, deepseek_v3_1, qwen3, llama3, llama3_1, llama3_2, gpt_oss, gemma3, "
               "qwen2_vl)"};
}

Result<std::string> render(const Args& args) {
  auto model_dir = args.get_string("--model");
  if (!model_dir.ok()) return model_dir.error();
  auto family = family_from_args(args, *model_dir);
  if (!family.ok()) return family.error();
  std::ios::sync_with_stdio(false);
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const Json request = Json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return Error{"stdin: expected a JSON chat request like {\"messages\": [...]}"};
  auto segments = render_chat_request(*family, request);
  if (!segments.ok()) return Error{"stdin: " + segments.error().message};
  if (!args.has("--tokens")) return prompt_text(*segments);

  auto tokenizer = Tokenizer::load(*model_dir);
  if (!tokenizer.ok()) return tokenizer.error();
  ThreadPool pool;
  auto ids = encode_prompt(*tokenizer, *segments, &pool);
  if (!ids.ok()) return ids.error();
  std::string json = "[";
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i > 0) json += ',';
    json += std::to_string((*ids)[i]);
  }
  return json + "]\n";
}

}  // namespace

int run_prompt(int argc, char** argv) {
  if (wants_help(argc, argv, kPromptUsage)) return 0;
  auto args = Args::parse(argc, argv, {"--model", "--family"}, {"--tokens"});
  if (!args.ok()) return report_error("prompt", args.error());
  auto out = render(*args);
  if (!out.ok()) return report_error("prompt", out.error());
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}

}  // namespace deepinfer::cli
