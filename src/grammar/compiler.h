// The grammar compilation service: structured-output specs compile on a background thread
// pool, with an LRU cache of compiled grammars, a work budget and a timeout per compile, and
// cancellation. A failed compile fails only the requests waiting for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "grammar/front_ends.h"
#include "grammar/structural.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar {

// What a request's output must match.
struct GrammarSpec {
  enum class Kind : uint8_t { kJsonSchema, kJsonObject, kRegex, kEbnf, kChoice, kStructural };
  Kind kind = Kind::kJsonObject;
  std::string text;                  // the schema, regex, EBNF or structural spec (structural.h)
  std::vector<std::string> choices;  // kChoice
  JsonSchemaOptions json;            // kJsonSchema / kJsonObject
  // The cache key: equal keys compile to the same grammar.
  std::string key() const;
};

// Runs the front end for spec (no vocabulary needed); warnings gets lenient-mode drops.
Result<Grammar> build_grammar(const GrammarSpec& spec, GrammarLimits limits = {},
                              std::vector<std::string>* warnings = nullptr);

using CompileResult = Result<std::shared_ptr<CompiledGrammar>>;

// Thread-safe. One per (model vocabulary); the destructor finishes running compiles.
class GrammarCompilerService {
 public:
  struct Options {
    size_t num_threads = 1;
    size_t cache_entries = 32;
    double timeout_seconds = 10.0;
    size_t max_symbols = 2'000'000;  // the work budget of one compile
  };
  struct Handle {
    std::shared_future<CompileResult> result;
    std::shared_ptr<std::atomic<bool>> cancelled;
    bool cache_hit = false;
  };

  GrammarCompilerService(std::shared_ptr<const TokenVocab> vocab, Options options);
  ~GrammarCompilerService();

  // Returns at once; the future is ready for a cache hit.
  Handle compile(const GrammarSpec& spec);
  // Stops the compile soon (it then fails with "cancelled") and drops it from the cache.
  void cancel(const Handle& handle);
  const TokenVocab& vocab() const { return *vocab_; }
  int64_t num_cancelled() const { return num_cancelled_.load(); }

 private:
  struct Entry {
    Handle handle;
    std::list<std::string>::iterator lru;
  };

  std::shared_ptr<const TokenVocab> vocab_;
  Options options_;
  std::mutex mutex_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, Entry> cache_;
  std::atomic<int64_t> num_cancelled_{0};
  std::unique_ptr<ThreadPool> pool_;  // last: destroyed (joined) first
};

}  // namespace deepinfer::grammar
