// `deepinfer tokenize` (UTF-8 text on stdin -> JSON array of ids) and `deepinfer detokenize`
// (JSON array of ids on stdin -> text). Both need only the tokenizer files of the model.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "session.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kTokenizeUsage = R"(usage: deepinfer tokenize --model DIR [--special] [--add-special-tokens]
Reads UTF-8 text on stdin and prints its token ids as a JSON array. Special-token literals in
the text are encoded as plain text unless --special is given (then every added token of the
tokenizer is matched, as Hugging Face's encode does). --add-special-tokens also applies the
tokenizer's post-processor (for example the BOS of Llama 2). DIR needs tokenizer.json only.
)";

constexpr const char* kDetokenizeUsage = R"(usage: deepinfer detokenize --model DIR [--skip-special-tokens]
Reads a JSON array of token ids on stdin and prints the decoded text (no newline added).
)";

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

Result<Tokenizer> load_tokenizer_from_args(const Args& args) {
  Result<std::string> model = args.get_string("--model");
  if (!model.ok()) return model.error();
  return Tokenizer::load(*model);
}

}  // namespace

int run_tokenize(int argc, char** argv) {
  if (wants_help(argc, argv, kTokenizeUsage)) return 0;
  auto args = Args::parse(argc, argv, {"--model"}, {"--special", "--add-special-tokens"});
  if (!args.ok()) return report_error("tokenize", args.error());
  auto tokenizer = load_tokenizer_from_args(*args);
  if (!tokenizer.ok()) return report_error("tokenize", tokenizer.error());
  const std::string text = read_stdin();
  auto ids = args->has("--special") ? tokenizer->encode_with_special(text) : tokenizer->encode(text);
  if (!ids.ok()) return report_error("tokenize", ids.error());
  std::vector<int32_t> out = args->has("--add-special-tokens") ? tokenizer->add_special_tokens(*ids) : *ids;
  std::string json = "[";
  for (size_t i = 0; i < out.size(); ++i) {
    if (i > 0) json += ',';
    json += std::to_string(out[i]);
  }
  json += "]\n";
  std::fwrite(json.data(), 1, json.size(), stdout);
  return 0;
}

int run_detokenize(int argc, char** argv) {
  if (wants_help(argc, argv, kDetokenizeUsage)) return 0;
  auto args = Args::parse(argc, argv, {"--model"}, {"--skip-special-tokens"});
  if (!args.ok()) return report_error("detokenize", args.error());
  auto tokenizer = load_tokenizer_from_args(*args);
  if (!tokenizer.ok()) return report_error("detokenize", tokenizer.error());
  nlohmann::json parsed = nlohmann::json::parse(read_stdin(), nullptr, false);
  if (parsed.is_discarded() || !parsed.is_array()) {
    return report_error("detokenize", Error{"stdin: expected a JSON array of token ids, like [1,2,3]"});
  }
  std::vector<int32_t> ids;
  ids.reserve(parsed.size());
  for (size_t i = 0; i < parsed.size(); ++i) {
    const nlohmann::json& item = parsed[i];
    if (!item.is_number_integer() || item.get<int64_t>() < 0 || item.get<int64_t>() >= tokenizer->vocab_size() ||
        !tokenizer->id_to_token(static_cast<int32_t>(item.get<int64_t>()))) {
      return report_error("detokenize", Error{"stdin[" + std::to_string(i) + "]: " + item.dump() +
                                                 " is not a token id of this tokenizer (0.." +
                                                 std::to_string(tokenizer->vocab_size() - 1) + ")"});
    }
    ids.push_back(static_cast<int32_t>(item.get<int64_t>()));
  }
  const std::string text = tokenizer->decode(ids, args->has("--skip-special-tokens"));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace deepinfer::cli
