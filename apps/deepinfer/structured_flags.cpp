// Structured-output flags -> SamplingParams::structured_output.
#include "structured_flags.h"

#include <fstream>
#include <sstream>

#include "engine/structured_output.h"

namespace deepinfer::cli {

namespace {

Result<std::string> read_text_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{std::string(flag) + ": cannot read '" + path + "'"};
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

std::set<std::string> structured_value_flags(std::set<std::string> flags) {
  flags.insert({"--json-schema", "--regex", "--grammar", "--choice"});
  return flags;
}

Result<void> read_structured_flags(const Args& args, SamplingParams& params) {
  int count = 0;
  StructuredOutputParams s;
  if (auto schema = args.find("--json-schema")) {
    ++count;
    s.kind = StructuredOutputParams::Kind::kJsonSchema;
    if (!schema->empty() && (schema->front() == '{' || schema->front() == '[')) {
      s.spec = *schema;
    } else {
      DI_ASSIGN(s.spec, read_text_file(*schema, "--json-schema"));
    }
  }
  if (args.has("--json-object")) {
    ++count;
    s.kind = StructuredOutputParams::Kind::kJsonObject;
  }
  if (auto regex = args.find("--regex")) {
    ++count;
    s.kind = StructuredOutputParams::Kind::kRegex;
    s.spec = *regex;
  }
  if (auto grammar = args.find("--grammar")) {
    ++count;
    s.kind = StructuredOutputParams::Kind::kGrammar;
    DI_ASSIGN(s.spec, read_text_file(*grammar, "--grammar"));
  }
  if (auto choice = args.find("--choice")) {
    ++count;
    s.kind = StructuredOutputParams::Kind::kChoice;
    std::string item;
    std::stringstream list(*choice);
    while (std::getline(list, item, ',')) s.choices.push_back(item);
  }
  if (count == 0) return {};
  if (count > 1) return Error{"give at most one of --json-schema, --json-object, --regex, --grammar, --choice"};
  auto grammar = grammar::build_grammar(to_grammar_spec(s));
  if (!grammar.ok()) return grammar.error();
  params.structured_output = std::move(s);
  return {};
}

}  // namespace deepinfer::cli
