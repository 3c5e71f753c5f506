// Runs tests/recipe/render_jinja.mjs (the models' own templates through @huggingface/jinja).
#include "oracle.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace deepinfer::test {

std::string recipe_test_path(const std::string& name) {
  return std::string(DEEPINFER_TEST_DATA_DIR) + "/../recipe/" + name;
}

Json load_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str());
}

Json conversation_messages_json(const Conversation& conversation, bool content_as_parts) {
  Json messages = Json::array();
  for (const Message& m : conversation.messages) {
    Json out = {{"role", role_name(m.role)}};
    out["content"] = m.content ? Json(*m.content) : Json(nullptr);
    if (content_as_parts && !m.content_parts.empty()) {
      out["content"] = Json::array();
      size_t next_image = 0;
      for (size_t i = 0; i < m.content_parts.size(); ++i) {
        if (next_image < m.image_parts.size() && m.image_parts[next_image] == i) {
          ++next_image;
          out["content"].push_back({{"type", "image"}});
        } else {
          out["content"].push_back({{"type", "text"}, {"text", m.content_parts[i]}});
        }
      }
    }
    if (m.reasoning_content) out["reasoning_content"] = *m.reasoning_content;
    if (!m.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCall& c : m.tool_calls) {
        calls.push_back(
            {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      }
      out["tool_calls"] = std::move(calls);
    }
    if (m.role == Role::kTool) out["tool_call_id"] = m.tool_call_id;
    if (m.prefix) out["prefix"] = true;
    messages.push_back(std::move(out));
  }
  return messages;
}

std::vector<OracleResult> run_jinja_oracle(const std::vector<OracleCase>& cases) {
  Json request = {{"cases", Json::array()}};
  for (const OracleCase& c : cases) {
    request["cases"].push_back({{"family", c.family},
                                {"messages", c.messages},
                                {"tools", c.tools},
                                {"add_generation_prompt", c.add_generation_prompt},
                                {"kwargs", c.kwargs},
                                {"tokenize", c.tokenize},
                                {"image_tokens", c.image_tokens}});
  }
  // Unique per process and call: ctest runs the tests of this binary in parallel processes.
  static int num_calls = 0;
  const std::string stem =
      ::testing::TempDir() + "/jinja_oracle_" + std::to_string(::getpid()) + "_" + std::to_string(num_calls++);
  const std::string in_path = stem + "_in.json";
  const std::string out_path = stem + "_out.json";
  std::ofstream(in_path, std::ios::binary) << request.dump();
  const std::string command =
      "node '" + recipe_test_path("render_jinja.mjs") + "' < '" + in_path + "' > '" + out_path + "'";
  const int status = std::system(command.c_str());
  if (status != 0) {
    ADD_FAILURE() << "the Jinja oracle failed (" << command
                  << "); it needs node and tests/node/node_modules (run tools/install_deps.sh)";
    return {};
  }
  const Json results = load_json_file(out_path);
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  std::vector<OracleResult> out;
  for (const Json& r : results) {
    OracleResult result;
    result.ok = r.contains("text");
    if (result.ok) {
      result.text = r["text"].get<std::string>();
      if (r.contains("ids")) result.ids = r["ids"].get<std::vector<int32_t>>();
    } else {
      result.error = r["error"].get<std::string>();
    }
    out.push_back(std::move(result));
  }
  EXPECT_EQ(out.size(), cases.size());
  return out;
}

// The families whose templates loop over a list of content parts themselves; the others are
// given the parts joined, as the renderers join them.
bool reads_content_parts(const std::string& family) {
  return family == "gemma3" || family == "qwen2_vl" || family == "qwen3_vl";
}

const ConversationSetRun& conversation_set_run(const std::string& family, bool tokenize) {
  static std::map<std::pair<std::string, bool>, ConversationSetRun> runs;
  const auto key = std::make_pair(family, tokenize);
  if (const auto it = runs.find(key); it != runs.end()) return it->second;
  ConversationSetRun& out = runs[key];
  const Json data = load_json_file(recipe_test_path("conversations.json"));
  EXPECT_TRUE(data["families"].contains(family)) << family << " is not in conversations.json";
  std::vector<OracleCase> oracle_cases;
  for (const Json& variant : data["families"][family]) {
    for (const Json& conversation : data["conversations"]) {
      Json kwargs = variant;
      // A fixed clock on both sides; templates without strftime_now ignore it.
      if (!kwargs.contains("date")) kwargs["date"] = "2025-06-28";
      const bool add_generation_prompt = conversation.value("add_generation_prompt", true);
      Json variables = kwargs;
      variables["add_generation_prompt"] = add_generation_prompt;
      auto parsed = parse_conversation(conversation);
      auto options = parse_chat_options(variables);
      EXPECT_TRUE(parsed.ok()) << conversation["name"] << ": " << parsed.error().message;
      EXPECT_TRUE(options.ok()) << variant.dump() << ": " << options.error().message;
      if (!parsed.ok() || !options.ok()) continue;
      out.cases.push_back({family, conversation["name"].get<std::string>() + " " + variant.dump(), *parsed, *options});
      oracle_cases.push_back({family, conversation_messages_json(*parsed, reads_content_parts(family)),
                              conversation.value("tools", Json::array()), add_generation_prompt, kwargs, tokenize});
    }
  }
  out.results = run_jinja_oracle(oracle_cases);
  return out;
}

}  // namespace deepinfer::test
