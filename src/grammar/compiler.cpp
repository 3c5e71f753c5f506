// GrammarCompilerService: the pool, the LRU cache, budgets and cancellation.
#include "grammar/compiler.h"

#include <chrono>

namespace deepinfer::grammar {

std::string GrammarSpec::key() const {
  std::string k;
  k += static_cast<char>('0' + static_cast<int>(kind));
  k += json.strict_properties ? 's' : 'o';
  k += json.lenient ? 'l' : 'x';
  k += std::to_string(json.max_whitespace) + ":";
  if (kind == Kind::kChoice) {
    for (const auto& c : choices) k += std::to_string(c.size()) + ":" + c;
  } else {
    k += text;
  }
  return k;
}

Result<Grammar> build_grammar(const GrammarSpec& spec, GrammarLimits limits, std::vector<std::string>* warnings) {
  switch (spec.kind) {
    case GrammarSpec::Kind::kJsonSchema: return compile_json_schema(spec.text, spec.json, warnings, limits);
    case GrammarSpec::Kind::kJsonObject: return compile_json_object(spec.json, limits);
    case GrammarSpec::Kind::kRegex: return compile_regex(spec.text, limits);
    case GrammarSpec::Kind::kEbnf: return compile_ebnf(spec.text, "root", limits);
    case GrammarSpec::Kind::kChoice: return compile_choice(spec.choices, limits);
    case GrammarSpec::Kind::kStructural: return compile_structural(spec.text, spec.json, warnings, limits);
  }
  return Error{"unknown structured output kind"};
}

GrammarCompilerService::GrammarCompilerService(std::shared_ptr<const TokenVocab> vocab, Options options)
    : vocab_(std::move(vocab)), options_(options), pool_(std::make_unique<ThreadPool>(options.num_threads)) {}

GrammarCompilerService::~GrammarCompilerService() {
  std::lock_guard lock(mutex_);
  for (auto& [key, entry] : cache_) entry.handle.cancelled->store(true);
}

GrammarCompilerService::Handle GrammarCompilerService::compile(const GrammarSpec& spec) {
  const std::string key = spec.key();
  std::lock_guard lock(mutex_);
  if (auto found = cache_.find(key); found != cache_.end()) {
    const auto& result = found->second.handle.result;
    const bool failed = result.wait_for(std::chrono::seconds(0)) == std::future_status::ready && !result.get().ok();
    if (!failed) {
      lru_.splice(lru_.begin(), lru_, found->second.lru);
      Handle hit = found->second.handle;
      hit.cache_hit = true;
      return hit;
    }
    lru_.erase(found->second.lru);
    cache_.erase(found);
  }
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  GrammarLimits limits;
  limits.max_symbols = options_.max_symbols;
  limits.cancelled = cancelled.get();
  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options_.timeout_seconds));
  std::shared_ptr<const TokenVocab> vocab = vocab_;
  auto future = pool_->submit([spec, limits, cancelled, timeout, vocab]() mutable -> CompileResult {
    limits.deadline = std::chrono::steady_clock::now() + timeout;  // from the start of the work
    std::vector<std::string> warnings;
    auto grammar = build_grammar(spec, limits, &warnings);
    if (!grammar.ok()) return grammar.error();
    auto compiled = compile_grammar(std::move(grammar).value(), vocab);
    if (compiled.ok()) (*compiled)->warnings = std::move(warnings);
    return compiled;
  });
  Handle handle{future.share(), cancelled, false};
  lru_.push_front(key);
  cache_.emplace(key, Entry{handle, lru_.begin()});
  while (cache_.size() > options_.cache_entries) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return handle;
}

void GrammarCompilerService::cancel(const Handle& handle) {
  if (handle.result.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return;
  handle.cancelled->store(true);
  ++num_cancelled_;
  std::lock_guard lock(mutex_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->second.handle.cancelled == handle.cancelled) {
      lru_.erase(it->second.lru);
      cache_.erase(it);
      break;
    }
  }
}

}  // namespace deepinfer::grammar
