// Test helpers: the shared conversation set (conversations.json) and the Jinja oracle
// (render_jinja.mjs run by node), so every family's renderer is checked against its own template.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "recipe/chat_template.h"
#include "recipe/conversation.h"

namespace deepinfer::test {

using Json = nlohmann::ordered_json;

// tests/recipe/<name>, found from the test data directory the build passes in.
std::string recipe_test_path(const std::string& name);

Json load_json_file(const std::string& path);

// The conversation back in OpenAI form, as the renderer saw it after parsing (roles normalised,
// text parts joined, or kept as a list with content_as_parts), which is what the Jinja templates
// are given.
Json conversation_messages_json(const Conversation& conversation, bool content_as_parts = false);

struct OracleCase {
  std::string family;
  Json messages;
  Json tools;  // array, possibly empty
  bool add_generation_prompt = true;
  Json kwargs;            // template variables; "date" fixes strftime_now
  bool tokenize = false;  // also return Hugging Face's ids of the prompt
  int32_t image_tokens = 0;  // > 0: Gemma3Processor's image expansion after the template
};

struct OracleResult {
  bool ok = false;
  std::string text;          // when ok
  std::string error;         // otherwise: the template's exception message
  std::vector<int32_t> ids;  // when tokenized: encode(text, add_special_tokens=False)
};

// Renders all cases in one node process. Fails the calling test (and returns {}) when node or
// the npm oracles are missing.
std::vector<OracleResult> run_jinja_oracle(const std::vector<OracleCase>& cases);

// One family x template-variables x conversation combination of conversations.json.
struct ConversationCase {
  std::string family;
  std::string name;  // conversation name and template variables, for failure messages
  Conversation conversation;
  ChatOptions options;
};

struct ConversationSetRun {
  std::vector<ConversationCase> cases;
  std::vector<OracleResult> results;  // the template's prompt and Hugging Face's ids, per case
};

// The conversation set for one family through the oracle (with Hugging Face's ids when tokenize),
// once per process: ctest runs each test in its own process, so each runs only what it checks.
const ConversationSetRun& conversation_set_run(const std::string& family, bool tokenize);

}  // namespace deepinfer::test
