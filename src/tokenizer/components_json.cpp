// tokenizer.json pipeline sections -> normalizer steps, pre-tokenizer steps, decoder steps and
// post-processor templates. Sequences are flattened.
#include "tokenizer/components_json.h"

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

namespace {

struct Pattern {
  std::string literal;
  std::optional<Regex> regex;
};

// {"String": s} or {"Regex": r}. A String pattern compiles to a regex only when it is empty
// (matching between every character, as Hugging Face's escaped regex does).
Result<Pattern> parse_pattern(const JsonObject& parent, const std::string& where) {
  std::optional<JsonElement> element = json_field(parent, "pattern");
  if (!element) return Error{where + ".pattern: missing"};
  Result<JsonObject> object = json_as_object(*element, where + ".pattern");
  if (!object.ok()) return object.error();
  Pattern pattern;
  if (json_field(*object, "Regex")) {
    Result<std::string_view> text = json_string(*object, "Regex", where + ".pattern");
    if (!text.ok()) return text.error();
    Result<Regex> regex = Regex::compile(*text);
    if (!regex.ok()) return Error{where + ".pattern: " + regex.error().message};
    pattern.regex = std::move(regex).value();
    return pattern;
  }
  Result<std::string_view> text = json_string(*object, "String", where + ".pattern");
  if (!text.ok()) return Error{where + ".pattern: expected {\"String\": ...} or {\"Regex\": ...}"};
  pattern.literal = std::string(*text);
  if (pattern.literal.empty()) pattern.regex = Regex::compile("").value();
  return pattern;
}

Result<std::string> type_of(const JsonObject& object, const std::string& where) {
  Result<std::string_view> type = json_string(object, "type", where);
  if (!type.ok()) return type.error();
  return std::string(*type);
}

// Runs add(child, child_where) on each element of object[key] (a component's "Sequence").
template <typename AddChild>
Result<void> for_each_in_sequence(const JsonObject& object, const char* key, const std::string& where,
                                  AddChild&& add) {
  std::optional<JsonElement> list = json_field(object, key);
  simdjson::dom::array array;
  if (!list || list->get_array().get(array) != simdjson::SUCCESS) {
    return Error{where + "." + key + ": expected an array"};
  }
  size_t i = 0;
  for (JsonElement child : array) DI_TRY(add(child, where + "." + key + "[" + std::to_string(i++) + "]"));
  return {};
}

// A Replace normalizer's or decoder's pattern (literal or regex) and its replacement content.
template <typename Step>
Result<void> parse_replace(const JsonObject& object, const std::string& where, Step& step) {
  Result<Pattern> pattern = parse_pattern(object, where);
  if (!pattern.ok()) return pattern.error();
  Result<std::string_view> content = json_string(object, "content", where);
  if (!content.ok()) return content.error();
  step.kind = Step::Kind::kReplace;
  step.text = pattern->literal;
  step.regex = pattern->regex;
  step.content = std::string(*content);
  return {};
}

Result<void> add_normalizer(const JsonElement& element, const std::string& where, std::vector<NormalizerStep>& steps) {
  Result<JsonObject> object = json_as_object(element, where);
  if (!object.ok()) return object.error();
  Result<std::string> type = type_of(*object, where);
  if (!type.ok()) return type.error();
  NormalizerStep step;
  if (*type == "Sequence") {
    return for_each_in_sequence(*object, "normalizers", where, [&](const JsonElement& child, const std::string& child_where) {
      return add_normalizer(child, child_where, steps);
    });
  } else if (*type == "NFC" || *type == "NFD" || *type == "NFKC" || *type == "NFKD") {
    step.kind = NormalizerStep::Kind::kUnicode;
    step.form = *type == "NFC" ? NormalForm::kNfc : *type == "NFD" ? NormalForm::kNfd : *type == "NFKC" ? NormalForm::kNfkc : NormalForm::kNfkd;
  } else if (*type == "Lowercase") {
    step.kind = NormalizerStep::Kind::kLowercase;
  } else if (*type == "Strip") {
    step.kind = NormalizerStep::Kind::kStrip;
    Result<bool> left = json_bool(*object, "strip_left", true, where);
    Result<bool> right = json_bool(*object, "strip_right", true, where);
    if (!left.ok()) return left.error();
    if (!right.ok()) return right.error();
    step.strip_left = *left;
    step.strip_right = *right;
  } else if (*type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    Result<std::string_view> prepend = json_string(*object, "prepend", where);
    if (!prepend.ok()) return prepend.error();
    step.text = std::string(*prepend);
  } else if (*type == "Replace") {
    DI_TRY(parse_replace(*object, where, step));
  } else {
    return Error{where + ".type: normalizer '" + *type +
                 "' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace, Sequence)"};
  }
  steps.push_back(std::move(step));
  return {};
}

Result<SplitBehavior> parse_behavior(const JsonObject& object, const std::string& where) {
  Result<std::string_view> name = json_string(object, "behavior", where);
  if (!name.ok()) return name.error();
  if (*name == "Removed") return SplitBehavior::kRemoved;
  if (*name == "Isolated") return SplitBehavior::kIsolated;
  if (*name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (*name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (*name == "Contiguous") return SplitBehavior::kContiguous;
  return Error{where + ".behavior: unknown split behavior '" + std::string(*name) + "'"};
}

// Metaspace's prepend_scheme, or the older add_prefix_space flag.
Result<PreTokenizerStep::Prepend> parse_prepend_scheme(const JsonObject& object, const std::string& where) {
  if (json_field(object, "prepend_scheme")) {
    Result<std::string_view> scheme = json_string(object, "prepend_scheme", where);
    if (!scheme.ok()) return scheme.error();
    if (*scheme == "always") return PreTokenizerStep::Prepend::kAlways;
    if (*scheme == "first") return PreTokenizerStep::Prepend::kFirst;
    if (*scheme == "never") return PreTokenizerStep::Prepend::kNever;
    return Error{where + ".prepend_scheme: expected always, first or never, got '" + std::string(*scheme) + "'"};
  }
  Result<bool> add_prefix_space = json_bool(object, "add_prefix_space", true, where);
  if (!add_prefix_space.ok()) return add_prefix_space.error();
  return *add_prefix_space ? PreTokenizerStep::Prepend::kAlways : PreTokenizerStep::Prepend::kNever;
}

// A field holding exactly one character (Metaspace's replacement, Strip's content).
Result<std::string> parse_char(const JsonObject& object, std::string_view name, const std::string& where) {
  Result<std::string_view> value = json_string(object, name, where);
  if (!value.ok()) return value.error();
  size_t pos = 0;
  std::string text(*value);
  if (text.empty() || (next_code_point(text, pos), pos != text.size())) {
    return Error{where + "." + std::string(name) + ": expected a single character"};
  }
  return text;
}

Result<void> add_pre_tokenizer(const JsonElement& element, const std::string& where,
                               std::vector<PreTokenizerStep>& steps) {
  Result<JsonObject> object = json_as_object(element, where);
  if (!object.ok()) return object.error();
  Result<std::string> type = type_of(*object, where);
  if (!type.ok()) return type.error();
  PreTokenizerStep step;
  if (*type == "Sequence") {
    return for_each_in_sequence(*object, "pretokenizers", where, [&](const JsonElement& child, const std::string& child_where) {
      return add_pre_tokenizer(child, child_where, steps);
    });
  } else if (*type == "Split") {
    step.kind = PreTokenizerStep::Kind::kSplit;
    Result<Pattern> pattern = parse_pattern(*object, where);
    if (!pattern.ok()) return pattern.error();
    if (pattern->regex) {
      step.regex = pattern->regex;
    } else {
      step.regex = Regex::compile(escape_regex(pattern->literal)).value();
    }
    Result<SplitBehavior> behavior = parse_behavior(*object, where);
    Result<bool> invert = json_bool(*object, "invert", false, where);
    if (!behavior.ok()) return behavior.error();
    if (!invert.ok()) return invert.error();
    step.behavior = *behavior;
    step.invert = *invert;
  } else if (*type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    Result<bool> add_prefix_space = json_bool(*object, "add_prefix_space", true, where);
    Result<bool> use_regex = json_bool(*object, "use_regex", true, where);
    if (!add_prefix_space.ok()) return add_prefix_space.error();
    if (!use_regex.ok()) return use_regex.error();
    step.add_prefix_space = *add_prefix_space;
    if (*use_regex) step.regex = Regex::compile(kGpt2Pattern).value();
  } else if (*type == "Digits") {
    step.kind = PreTokenizerStep::Kind::kDigits;
    Result<bool> individual = json_bool(*object, "individual_digits", false, where);
    if (!individual.ok()) return individual.error();
    step.individual_digits = *individual;
  } else if (*type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::kMetaspace;
    Result<std::string> replacement = parse_char(*object, "replacement", where);
    Result<PreTokenizerStep::Prepend> prepend = parse_prepend_scheme(*object, where);
    Result<bool> split = json_bool(*object, "split", true, where);
    if (!replacement.ok()) return replacement.error();
    if (!prepend.ok()) return prepend.error();
    if (!split.ok()) return split.error();
    step.replacement = *replacement;
    step.prepend = *prepend;
    step.split = *split;
  } else {
    return Error{where + ".type: pre-tokenizer '" + *type +
                 "' is not supported (supported: Split, ByteLevel, Digits, Metaspace, Sequence)"};
  }
  steps.push_back(std::move(step));
  return {};
}

Result<void> add_decoder(const JsonElement& element, const std::string& where, std::vector<DecoderStep>& steps) {
  Result<JsonObject> object = json_as_object(element, where);
  if (!object.ok()) return object.error();
  Result<std::string> type = type_of(*object, where);
  if (!type.ok()) return type.error();
  DecoderStep step;
  if (*type == "Sequence") {
    return for_each_in_sequence(*object, "decoders", where, [&](const JsonElement& child, const std::string& child_where) {
      return add_decoder(child, child_where, steps);
    });
  } else if (*type == "ByteLevel") {
    step.kind = DecoderStep::Kind::kByteLevel;
  } else if (*type == "Metaspace") {
    step.kind = DecoderStep::Kind::kMetaspace;
    Result<std::string> replacement = parse_char(*object, "replacement", where);
    Result<PreTokenizerStep::Prepend> prepend = parse_prepend_scheme(*object, where);
    if (!replacement.ok()) return replacement.error();
    if (!prepend.ok()) return prepend.error();
    step.text = *replacement;
    step.strip_first = *prepend != PreTokenizerStep::Prepend::kNever;
  } else if (*type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (*type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (*type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    Result<std::string> content = parse_char(*object, "content", where);
    if (!content.ok()) return content.error();
    Result<int64_t> start = json_int(*object, "start", 0, where);
    Result<int64_t> stop = json_int(*object, "stop", 0, where);
    if (!start.ok()) return start.error();
    if (!stop.ok()) return stop.error();
    if (*start < 0 || *stop < 0) return Error{where + ": start and stop must not be negative"};
    step.text = *content;
    step.start = static_cast<size_t>(*start);
    step.stop = static_cast<size_t>(*stop);
  } else if (*type == "Replace") {
    DI_TRY(parse_replace(*object, where, step));
  } else {
    return Error{where + ".type: decoder '" + *type +
                 "' is not supported (supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence)"};
  }
  steps.push_back(std::move(step));
  return {};
}

}  // namespace

Result<Normalizer> parse_normalizer(const std::optional<JsonElement>& element, const std::string& where) {
  std::vector<NormalizerStep> steps;
  if (element) DI_TRY(add_normalizer(*element, where, steps));
  return Normalizer(std::move(steps));
}

Result<PreTokenizer> parse_pre_tokenizer(const std::optional<JsonElement>& element, const std::string& where) {
  std::vector<PreTokenizerStep> steps;
  if (element) DI_TRY(add_pre_tokenizer(*element, where, steps));
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    if (steps[i].kind == PreTokenizerStep::Kind::kByteLevel) {
      return Error{where + ": a ByteLevel pre-tokenizer must come last (deepinfer maps bytes in the vocabulary)"};
    }
  }
  return PreTokenizer(std::move(steps));
}

Result<std::optional<std::vector<DecoderStep>>> parse_decoder(const std::optional<JsonElement>& element,
                                                             const std::string& where) {
  if (!element) return std::optional<std::vector<DecoderStep>>();
  std::vector<DecoderStep> steps;
  DI_TRY(add_decoder(*element, where, steps));
  return std::optional<std::vector<DecoderStep>>(std::move(steps));
}

namespace {

Result<std::vector<int32_t>> parse_template(const JsonObject& object, const std::string& where) {
  std::optional<JsonElement> single = json_field(object, "single");
  simdjson::dom::array items;
  if (!single || single->get_array().get(items) != simdjson::SUCCESS) return Error{where + ".single: expected an array"};
  std::optional<JsonElement> specials_element = json_field(object, "special_tokens");
  JsonObject specials;
  if (specials_element && specials_element->get_object().get(specials) != simdjson::SUCCESS) {
    return Error{where + ".special_tokens: expected an object"};
  }
  std::vector<int32_t> ids;
  size_t index = 0;
  for (JsonElement item : items) {
    std::string item_where = where + ".single[" + std::to_string(index++) + "]";
    Result<JsonObject> item_object = json_as_object(item, item_where);
    if (!item_object.ok()) return item_object.error();
    if (json_field(*item_object, "Sequence")) {
      ids.push_back(kSequenceSlot);
      continue;
    }
    std::optional<JsonElement> special = json_field(*item_object, "SpecialToken");
    if (!special) return Error{item_where + ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}"};
    Result<JsonObject> special_object = json_as_object(*special, item_where + ".SpecialToken");
    if (!special_object.ok()) return special_object.error();
    Result<std::string_view> name = json_string(*special_object, "id", item_where + ".SpecialToken");
    if (!name.ok()) return name.error();
    std::optional<JsonElement> entry = specials_element ? json_field(specials, *name) : std::nullopt;
    JsonObject entry_object;
    std::optional<JsonElement> entry_ids;
    simdjson::dom::array id_array;
    if (!entry || entry->get_object().get(entry_object) != simdjson::SUCCESS ||
        !(entry_ids = json_field(entry_object, "ids")) || entry_ids->get_array().get(id_array) != simdjson::SUCCESS) {
      return Error{where + ".special_tokens: no ids for '" + std::string(*name) + "'"};
    }
    for (JsonElement id : id_array) {
      int64_t value = 0;
      if (id.get_int64().get(value) != simdjson::SUCCESS || value < 0 || value > INT32_MAX) {
        return Error{where + ".special_tokens['" + std::string(*name) + "'].ids: expected non-negative integers"};
      }
      ids.push_back(static_cast<int32_t>(value));
    }
  }
  return ids;
}

Result<void> add_post_processor(const JsonElement& element, const std::string& where,
                                std::vector<std::vector<int32_t>>& templates) {
  Result<JsonObject> object = json_as_object(element, where);
  if (!object.ok()) return object.error();
  Result<std::string> type = type_of(*object, where);
  if (!type.ok()) return type.error();
  if (*type == "ByteLevel") return {};  // it only adjusts offsets
  if (*type == "Sequence") {
    return for_each_in_sequence(*object, "processors", where, [&](const JsonElement& child, const std::string& child_where) {
      return add_post_processor(child, child_where, templates);
    });
  }
  if (*type == "TemplateProcessing") {
    Result<std::vector<int32_t>> ids = parse_template(*object, where);
    if (!ids.ok()) return ids.error();
    templates.push_back(std::move(ids).value());
    return {};
  }
  return Error{where + ".type: post-processor '" + *type +
               "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)"};
}

}  // namespace

Result<std::vector<std::vector<int32_t>>> parse_post_processor(const std::optional<JsonElement>& element,
                                                               const std::string& where) {
  std::vector<std::vector<int32_t>> templates;
  if (element) DI_TRY(add_post_processor(*element, where, templates));
  return templates;
}

}  // namespace deepinfer::tokenizer
