// Loads tokenizer.json (simdjson DOM: a 10-30 MB file parses in tens of milliseconds) and
// tokenizer_config.json into a TokenizerImpl.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/mapped_file.h"
#include "tokenizer/components_json.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer_impl.h"

namespace deepinfer::tokenizer {

namespace {

Result<void> parse_added_tokens(const JsonObject& root, const std::string& where, std::vector<AddedToken>& out) {
  std::optional<JsonElement> list = json_field(root, "added_tokens");
  if (!list) return {};
  simdjson::dom::array array;
  if (list->get_array().get(array) != simdjson::SUCCESS) return Error{where + ".added_tokens: expected an array"};
  size_t index = 0;
  for (JsonElement element : array) {
    std::string item_where = where + ".added_tokens[" + std::to_string(index++) + "]";
    Result<JsonObject> object = json_as_object(element, item_where);
    if (!object.ok()) return object.error();
    AddedToken token;
    Result<int64_t> id = json_int(*object, "id", -1, item_where);
    Result<std::string_view> content = json_string(*object, "content", item_where);
    if (!id.ok()) return id.error();
    if (!content.ok()) return content.error();
    if (*id < 0 || *id > INT32_MAX) return Error{item_where + ".id: expected a non-negative 32-bit id"};
    token.id = static_cast<int32_t>(*id);
    token.content = std::string(*content);
    struct Flag {
      const char* name;
      bool* field;
      bool fallback;
    };
    for (const Flag& flag : {Flag{"special", &token.special, false}, Flag{"lstrip", &token.lstrip, false},
                             Flag{"rstrip", &token.rstrip, false}, Flag{"normalized", &token.normalized, true},
                             Flag{"single_word", &token.single_word, false}}) {
      Result<bool> value = json_bool(*object, flag.name, flag.fallback, item_where);
      if (!value.ok()) return value.error();
      *flag.field = *value;
    }
    out.push_back(std::move(token));
  }
  return {};
}

Result<void> parse_model(const JsonObject& root, const std::string& where, const std::vector<AddedToken>& added,
                         bool byte_level, BpeModel& model, std::vector<std::pair<std::string_view, int32_t>>& vocab) {
  std::optional<JsonElement> element = json_field(root, "model");
  if (!element) return Error{where + ".model: missing"};
  std::string model_where = where + ".model";
  Result<JsonObject> object = json_as_object(*element, model_where);
  if (!object.ok()) return object.error();
  if (json_field(*object, "type")) {
    Result<std::string_view> type = json_string(*object, "type", model_where);
    if (!type.ok()) return type.error();
    if (*type != "BPE") {
      return Error{model_where + ".type: model '" + std::string(*type) + "' is not supported (deepinfer reads BPE)"};
    }
  }
  std::optional<JsonElement> dropout = json_field(*object, "dropout");
  double dropout_value = 0;
  if (dropout && (dropout->get_double().get(dropout_value) != simdjson::SUCCESS || dropout_value != 0.0)) {
    return Error{model_where + ".dropout: BPE dropout is random and not supported; expected null"};
  }
  BpeSpec spec;
  spec.byte_level = byte_level;
  for (const AddedToken& token : added)
    if (token.special) spec.forbidden_ids.push_back(token.id);
  struct Flag {
    const char* name;
    bool* field;
  };
  for (const Flag& flag : {Flag{"byte_fallback", &spec.byte_fallback}, Flag{"fuse_unk", &spec.fuse_unk},
                           Flag{"ignore_merges", &spec.ignore_merges}}) {
    Result<bool> value = json_bool(*object, flag.name, false, model_where);
    if (!value.ok()) return value.error();
    *flag.field = *value;
  }
  for (auto [name, field] : {std::pair{"unk_token", &spec.unk_token},
                             std::pair{"continuing_subword_prefix", &spec.continuing_subword_prefix},
                             std::pair{"end_of_word_suffix", &spec.end_of_word_suffix}}) {
    if (!json_field(*object, name)) continue;
    Result<std::string_view> value = json_string(*object, name, model_where);
    if (!value.ok()) return value.error();
    *field = std::string(*value);
  }
  std::optional<JsonElement> vocab_element = json_field(*object, "vocab");
  JsonObject vocab_object;
  if (!vocab_element || vocab_element->get_object().get(vocab_object) != simdjson::SUCCESS) {
    return Error{model_where + ".vocab: expected an object of token -> id"};
  }
  vocab.reserve(vocab_object.size());
  for (auto [key, value] : vocab_object) {
    int64_t id = 0;
    if (value.get_int64().get(id) != simdjson::SUCCESS || id < 0 || id > INT32_MAX) {
      return Error{model_where + ".vocab['" + std::string(key) + "']: expected a non-negative 32-bit id"};
    }
    vocab.emplace_back(key, static_cast<int32_t>(id));
  }
  spec.vocab = vocab;
  // A special token that is also a vocabulary entry is that entry (see load_tokenizer_files).
  std::unordered_set<std::string_view> special_contents;
  for (const AddedToken& token : added)
    if (token.special) special_contents.insert(token.content);
  for (const auto& [text, id] : vocab)
    if (special_contents.count(text) != 0) spec.forbidden_ids.push_back(id);
  std::optional<JsonElement> merges_element = json_field(*object, "merges");
  simdjson::dom::array merges;
  if (merges_element && merges_element->get_array().get(merges) != simdjson::SUCCESS) {
    return Error{model_where + ".merges: expected an array"};
  }
  if (merges_element) {
    spec.merges.reserve(merges.size());
    size_t index = 0;
    for (JsonElement merge : merges) {
      std::string_view text;
      simdjson::dom::array pair;
      if (merge.get_string().get(text) == simdjson::SUCCESS) {
        size_t space = text.find(' ');
        if (space == std::string_view::npos) {
          return Error{model_where + ".merges[" + std::to_string(index) + "]: expected \"left right\", got '" +
                       std::string(text) + "'"};
        }
        spec.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
      } else if (merge.get_array().get(pair) == simdjson::SUCCESS && pair.size() == 2 &&
                 pair.at(0).get_string().get(text) == simdjson::SUCCESS) {
        std::string_view right;
        if (pair.at(1).get_string().get(right) != simdjson::SUCCESS) {
          return Error{model_where + ".merges[" + std::to_string(index) + "]: expected two strings"};
        }
        spec.merges.emplace_back(text, right);
      } else {
        return Error{model_where + ".merges[" + std::to_string(index) + "]: expected \"left right\" or [left, right]"};
      }
      ++index;
    }
  }
  Result<BpeModel> built = BpeModel::build(spec);
  if (!built.ok()) return Error{where + ": " + built.error().message};
  model = std::move(built).value();
  return {};
}

// bos_token / eos_token are a string, an {"content": ...} object, or null.
std::optional<std::string> config_token(const nlohmann::json& config, const char* name) {
  auto it = config.find(name);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

// tokenizer_config.json is small and holds integers beyond 64 bits (model_max_length), which
// simdjson rejects; nlohmann reads them as doubles.
Result<void> load_config(const std::string& path, TokenizerImpl& impl) {
  Result<std::string> text = read_text_file(path);
  if (!text.ok()) return text.error();
  nlohmann::json config = nlohmann::json::parse(*text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return Error{path + ": expected a JSON object"};
  for (auto [name, field] : {std::pair{"bos_token", &impl.bos_id}, std::pair{"eos_token", &impl.eos_id}}) {
    std::optional<std::string> token = config_token(config, name);
    if (!token) continue;
    int32_t id = impl.token_id(*token);
    if (id < 0) return Error{path + ": " + name + " '" + *token + "' is not a token of the tokenizer"};
    *field = id;
  }
  return {};
}

}  // namespace

Result<std::shared_ptr<TokenizerImpl>> load_tokenizer_files(const std::string& tokenizer_json_path,
                                                            const std::string& config_path) {
  auto impl = std::make_shared<TokenizerImpl>();
  impl->path = tokenizer_json_path;
  const std::string& where = tokenizer_json_path;
  simdjson::dom::parser parser;
  simdjson::padded_string json;
  if (simdjson::padded_string::load(tokenizer_json_path).get(json) != simdjson::SUCCESS) {
    return Error{tokenizer_json_path + ": cannot read the file"};
  }
  JsonElement root_element;
  auto error = parser.parse(json).get(root_element);
  if (error != simdjson::SUCCESS) return Error{where + ": invalid JSON (" + simdjson::error_message(error) + ")"};
  Result<JsonObject> root = json_as_object(root_element, where);
  if (!root.ok()) return root.error();

  DI_TRY(parse_added_tokens(*root, where, impl->added_tokens));
  Result<Normalizer> normalizer = parse_normalizer(json_field(*root, "normalizer"), where + ".normalizer");
  if (!normalizer.ok()) return normalizer.error();
  impl->normalizer = std::move(normalizer).value();
  Result<PreTokenizer> pre_tokenizer = parse_pre_tokenizer(json_field(*root, "pre_tokenizer"), where + ".pre_tokenizer");
  if (!pre_tokenizer.ok()) return pre_tokenizer.error();
  impl->pre_tokenizer = std::move(pre_tokenizer).value();
  Result<std::optional<std::vector<DecoderStep>>> decoder = parse_decoder(json_field(*root, "decoder"), where + ".decoder");
  if (!decoder.ok()) return decoder.error();
  impl->decoder = std::move(decoder).value();
  Result<std::vector<std::vector<int32_t>>> post =
      parse_post_processor(json_field(*root, "post_processor"), where + ".post_processor");
  if (!post.ok()) return post.error();
  impl->post_templates = std::move(post).value();

  std::vector<std::pair<std::string_view, int32_t>> vocab;
  DI_TRY(parse_model(*root, where, impl->added_tokens, impl->pre_tokenizer.has_byte_level(), impl->model, vocab));
  // An added token that is also a vocabulary entry keeps the vocabulary's id (Hugging Face).
  for (AddedToken& token : impl->added_tokens) {
    int32_t vocab_id = impl->model.find_token(token.content);
    if (vocab_id >= 0) token.id = vocab_id;
  }

  // Id tables: model vocabulary first, added tokens override (Hugging Face looks them up first).
  int32_t max_id = -1;
  for (const auto& entry : vocab) max_id = std::max(max_id, entry.second);
  for (const AddedToken& token : impl->added_tokens) max_id = std::max(max_id, token.id);
  impl->id_to_text.assign(static_cast<size_t>(max_id) + 1, std::string());
  impl->id_flags.assign(static_cast<size_t>(max_id) + 1, 0);
  for (const auto& [text, id] : vocab) {
    impl->id_to_text[id] = std::string(text);
    impl->id_flags[id] = TokenizerImpl::kPresent;
  }
  for (size_t i = 0; i < impl->added_tokens.size(); ++i) {
    const AddedToken& token = impl->added_tokens[i];
    impl->id_to_text[token.id] = token.content;
    impl->id_flags[token.id] = TokenizerImpl::kPresent | (token.special ? TokenizerImpl::kSpecial : 0);
    impl->added_indices.put(token.content, static_cast<int32_t>(i));
  }

  // Matchers, special tokens listed first as Hugging Face builds its tries.
  std::vector<std::pair<std::string, int32_t>> raw_patterns;
  std::vector<std::pair<std::string, int32_t>> normalized_patterns;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < impl->added_tokens.size(); ++i) {
      const AddedToken& token = impl->added_tokens[i];
      if (token.special != (pass == 0)) continue;
      if (!token.normalized) {
        raw_patterns.emplace_back(token.content, static_cast<int32_t>(i));
        continue;
      }
      std::string storage;
      Result<std::string_view> normalized = impl->normalizer.normalize(token.content, storage);
      if (!normalized.ok()) return Error{where + ": added token '" + token.content + "': " + normalized.error().message};
      normalized_patterns.emplace_back(std::string(*normalized), static_cast<int32_t>(i));
    }
  }
  impl->raw_matcher = AddedTokenMatcher(&impl->added_tokens, std::move(raw_patterns));
  impl->normalized_matcher = AddedTokenMatcher(&impl->added_tokens, std::move(normalized_patterns));

  if (!config_path.empty() && std::filesystem::exists(config_path)) DI_TRY(load_config(config_path, *impl));
  return impl;
}

}  // namespace deepinfer::tokenizer
