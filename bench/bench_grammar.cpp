// Structured-output benchmark, deepinfer's side (bench/bench_grammar.sh runs it beside
// xgrammar): for each MaskBench schema, the compile time, the per-token mask time along a
// seeded random walk on a real tokenizer, and the verdicts on MaskBench's labelled instances.
// Usage: deepinfer-bench-grammar TOKENIZER_DIR SCHEMA_DIR [--steps N] [--json OUT]
//        deepinfer-bench-grammar TOKENIZER_DIR --verdicts REQUEST.json ANSWER.json
// The second form answers xgrammar_oracle.cjs's verdict requests ([{schema, instances}] ->
// [{compiled, accepted}]) for bench/grammar_exactness.cjs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "grammar/compiler.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace deepinfer;
using namespace deepinfer::grammar;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double since_us(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct SetStats {
  int schemas = 0, compiled = 0, valid = 0, valid_accepted = 0, invalid = 0, invalid_rejected = 0;
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Byte-level accept/reject of each instance by each schema's compiled grammar.
int verdicts(const std::shared_ptr<const TokenVocab>& vocab, const char* request_path, const char* answer_path) {
  const Json request = Json::parse(read_file(request_path));
  Json answer = Json::array();
  for (const auto& item : request) {
    auto grammar = compile_json_schema(item["schema"].get<std::string>(), {});
    CompileResult compiled =
        grammar.ok() ? compile_grammar(std::move(grammar).value(), vocab) : CompileResult(grammar.error());
    if (!compiled.ok()) {
      answer.push_back({{"compiled", false}, {"error", compiled.error().message}});
      continue;
    }
    Json accepted = Json::array();
    for (const auto& instance : item["instances"]) {
      GrammarMatcher m(*compiled);
      accepted.push_back(m.accept_bytes(instance.get<std::string>()) && m.can_end());
    }
    answer.push_back({{"compiled", true}, {"accepted", accepted}});
  }
  std::ofstream(answer_path) << answer.dump();
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: deepinfer-bench-grammar TOKENIZER_DIR SCHEMA_DIR [--steps N] [--json OUT]\n"
                 "       deepinfer-bench-grammar TOKENIZER_DIR --verdicts REQUEST.json ANSWER.json\n");
    return 2;
  }
  int steps = 32;
  std::string json_out;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--steps") steps = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--json") json_out = argv[i + 1];
  }
  auto tokenizer = Tokenizer::load(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.error().message.c_str());
    return 1;
  }
  auto vocab_result = TokenVocab::from_tokenizer(*tokenizer);
  if (!vocab_result.ok()) return 1;
  auto vocab = std::make_shared<const TokenVocab>(std::move(vocab_result).value());
  if (argc == 5 && std::string(argv[2]) == "--verdicts") return verdicts(vocab, argv[3], argv[4]);
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(argv[2])) paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  std::vector<double> compile_ms, mask_us;
  std::map<std::string, SetStats> sets;
  std::mt19937 rng(1234);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->num_mask_words()));
  for (const auto& path : paths) {
    const Json file = Json::parse(read_file(path));
    const std::string name = path.filename().string();
    const std::string set = name.substr(0, name.find("---") != std::string::npos ? name.find("---") : name.find('_'));
    SetStats& stats = sets[set];
    ++stats.schemas;
    const auto start = Clock::now();
    auto grammar = compile_json_schema(file["schema"].dump(), {});
    if (!grammar.ok()) continue;
    auto compiled = compile_grammar(std::move(grammar).value(), vocab);
    if (!compiled.ok()) continue;
    compile_ms.push_back(since_us(start) / 1000.0);
    ++stats.compiled;
    for (const auto& test : file["tests"]) {
      GrammarMatcher m(*compiled);
      const bool accepted = m.accept_bytes(test["data"].dump()) && m.can_end();
      if (test["valid"].get<bool>()) {
        ++stats.valid;
        stats.valid_accepted += accepted;
      } else {
        ++stats.invalid;
        stats.invalid_rejected += !accepted;
      }
    }
    GrammarMatcher walker(*compiled);
    for (int step = 0; step < steps; ++step) {
      const auto t = Clock::now();
      if (!walker.fill_next_token_bitmask(mask.data())) break;
      mask_us.push_back(since_us(t));
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->num_tokens(); ++id) {
        if (((mask[id >> 5] >> (id & 31)) & 1) && !vocab->is_stop(id)) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      walker.accept_token(allowed[rng() % allowed.size()]);
    }
  }
  int total = 0, compiled = 0;
  for (const auto& [set, s] : sets) total += s.schemas, compiled += s.compiled;
  std::printf("| deepinfer | %d/%d | %.2f | %.2f | %.1f | %.1f |\n", compiled, total, percentile(compile_ms, 0.5),
              percentile(compile_ms, 0.99), percentile(mask_us, 0.5), percentile(mask_us, 0.99));
  if (!json_out.empty()) {
    Json out = Json::object();
    for (const auto& [set, s] : sets) {
      out[set] = {{"schemas", s.schemas},           {"compiled", s.compiled}, {"valid", s.valid},
                  {"valid_accepted", s.valid_accepted}, {"invalid", s.invalid}, {"invalid_rejected", s.invalid_rejected}};
    }
    std::ofstream(json_out) << out.dump(1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
