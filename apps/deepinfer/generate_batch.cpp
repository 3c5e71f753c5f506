// Offline JSONL batches: one request per input line, one result per output line, same order.
#include "generate_batch.h"

#include <omp.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "deepinfer/llm.h"
#include "engine/sampling_json.h"
#include "session.h"

namespace deepinfer::cli {
namespace {

using nlohmann::json;

struct ParsedInput {
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
};

Result<ParsedInput> read_input(const std::string& path, const SamplingParams& defaults) {
  std::ifstream in(path);
  if (!in) return Error{"cannot open --input " + path};
  ParsedInput parsed;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_number) + ": ";
    const json request = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (request.is_discarded() || !request.is_object()) return Error{where + "not a JSON object"};
    Prompt prompt;
    if (request.contains("prompt_token_ids")) {
      const json& ids = request["prompt_token_ids"];
      if (!ids.is_array()) return Error{where + "'prompt_token_ids' must be a list of token ids"};
      for (const json& id : ids) {
        if (!id.is_number_integer()) return Error{where + "'prompt_token_ids' must be a list of token ids"};
        prompt.token_ids.push_back(id.get<int32_t>());
      }
      if (prompt.token_ids.empty()) return Error{where + "'prompt_token_ids' is empty"};
    } else if (request.contains("prompt") && request["prompt"].is_string()) {
      prompt.text = request["prompt"].get<std::string>();
    } else {
      return Error{where + "each line needs \"prompt\" (a string) or \"prompt_token_ids\" (a list)"};
    }
    auto params = sampling_params_from_json(request, defaults);
    if (!params.ok()) return Error{where + params.error().message};
    parsed.prompts.push_back(std::move(prompt));
    parsed.params.push_back(std::move(*params));
  }
  return parsed;
}

json sample_json(const SampleResult& sample, bool with_text) {
  json out = {{"index", sample.index}, {"token_ids", sample.token_ids}, {"finish_reason", sample.finish_reason}};
  if (with_text) out["text"] = sample.text;
  if (!sample.stop_reason.empty()) out["stop_reason"] = sample.stop_reason;
  if (!sample.logprobs.empty()) {
    out["logprobs"] = sample.logprobs;
    json top = json::array();
    for (const auto& entries : sample.top_logprobs) {
      json row = json::array();
      for (const TopLogprob& t : entries) row.push_back({t.token_id, t.logprob});
      top.push_back(row);
    }
    out["top_logprobs"] = top;
  }
  return out;
}

// The output line of result i: its first sample (all of them under "outputs" when n > 1) or, for a
// request that failed alone (its grammar did not compile), an error line.
json result_line(size_t i, const GenerationResult& result, bool with_text) {
  if (!result.error.empty()) return json{{"index", i}, {"error", result.error}};
  json line = sample_json(result.outputs.front(), with_text);
  line["index"] = i;
  line["num_prompt_tokens"] = result.prompt_token_ids.size();
  line["num_cached_tokens"] = result.num_cached_tokens;
  if (result.outputs.size() > 1) {
    line["outputs"] = json::array();
    for (const SampleResult& sample : result.outputs) line["outputs"].push_back(sample_json(sample, with_text));
  }
  if (!result.prompt_token_logprobs.empty()) {
    json prompt_logprobs = json::array();
    for (const auto& logprob : result.prompt_token_logprobs) prompt_logprobs.push_back(logprob ? json(*logprob) : json());
    line["prompt_logprobs"] = prompt_logprobs;
  }
  return line;
}

}  // namespace

int run_generate_batch(const Args& args, const SamplingParams& defaults, const DataParallelConfig& data_parallel,
                       LocalRanks& ranks) {
  auto threads = args.get_int("--threads", 0);
  if (!threads.ok()) return report_error("generate", threads.error());
  if (*threads > 0) omp_set_num_threads(static_cast<int>(*threads));
  auto input_path = args.get_string("--input");
  auto output_path = args.get_string("--output");
  if (!input_path.ok() || !output_path.ok()) {
    return report_error("generate", Error{"batch mode needs both --input FILE.jsonl and --output FILE.jsonl"});
  }
  auto input = read_input(*input_path, defaults);
  if (!input.ok()) return report_error("generate", input.error());
  LLMConfig config;
  config.model_dir = args.find("--model").value_or("");
  config.device = args.find("--device").value_or("cpu");
  config.batch_invariant = args.has("--batch-invariant");
  auto kv_cache_dtype = kv_cache_dtype_from_args(args);
  if (!kv_cache_dtype.ok()) return report_error("generate", kv_cache_dtype.error());
  config.kv_cache_dtype = *kv_cache_dtype;
  config.cuda_graphs = !args.has("--no-cuda-graphs");
  config.packed_weights = !args.has("--dequantize-weights");
  config.device_sampling = !args.has("--host-sampling");
  auto async_scheduling = async_scheduling_from_args(args);
  if (!async_scheduling.ok()) return report_error("generate", async_scheduling.error());
  config.async_scheduling = *async_scheduling;
  auto speculative = speculative_from_args(args);
  if (!speculative.ok()) return report_error("generate", speculative.error());
  config.speculative_tokens = speculative->num_tokens;
  config.spec_varlen = speculative->varlen;
  auto max_num_seqs = args.get_int("--max-num-seqs", config.max_num_seqs);
  if (!max_num_seqs.ok()) return report_error("generate", max_num_seqs.error());
  if (*max_num_seqs < 1) return report_error("generate", Error{"--max-num-seqs must be >= 1"});
  config.max_num_seqs = static_cast<int32_t>(*max_num_seqs);
  auto memory = cache_memory_from_args(args);
  if (!memory.ok()) return report_error("generate", memory.error());
  config.kv_cache_bytes = memory->kv_cache_bytes;
  config.gpu_memory_utilization = memory->gpu_memory_utilization;
  if (auto applied = apply_kv_store_flags(args, config); !applied.ok()) {
    return report_error("generate", applied.error());
  }
  config.data_parallel = data_parallel;
  config.show_progress = data_parallel.rank == 0;
  auto llm = LLM::open(config);
  if (!llm.ok()) return report_error("generate", llm.error());
  // This rank's lines: every size-th from its rank on.
  const auto rank = static_cast<size_t>(data_parallel.rank);
  const auto size = static_cast<size_t>(data_parallel.size);
  ParsedInput mine;
  for (size_t i = rank; i < input->prompts.size(); i += size) {
    mine.prompts.push_back(input->prompts[i]);
    mine.params.push_back(input->params[i]);
  }
  auto results = (*llm)->generate(mine.prompts, mine.params);
  if (!results.ok()) return report_error("generate", results.error());
  if (auto waited = (*llm)->wait_for_group(); !waited.ok()) return report_error("generate", waited.error());
  const bool with_text = (*llm)->has_tokenizer();
  std::string lines;
  for (size_t j = 0; j < results->size(); ++j) {
    lines += result_line(rank + j * size, (*results)[j], with_text).dump() + "\n";
  }
  auto gathered = (*llm)->all_gather(lines);
  if (!gathered.ok()) return report_error("generate", gathered.error());
  if (rank != 0) return 0;
  if (auto waited = ranks.wait(); !waited.ok()) return report_error("generate", waited.error());
  std::ofstream out(*output_path);
  if (!out) return report_error("generate", Error{"cannot open --output " + *output_path + " for writing"});
  // Line i came from rank i % size, as that rank's (i / size)-th.
  std::vector<size_t> read_from(gathered->size(), 0);
  size_t num_failed = 0;
  for (size_t i = 0; i < input->prompts.size(); ++i) {
    const std::string& from = (*gathered)[i % size];
    size_t& offset = read_from[i % size];
    const size_t end = from.find('\n', offset);
    const std::string line = from.substr(offset, end - offset);
    offset = end + 1;
    if (json::parse(line).contains("error")) ++num_failed;
    out << line << "\n";
  }
  if (!out) return report_error("generate", Error{"cannot write --output " + *output_path});
  if (num_failed > 0) {
    std::fprintf(stderr, "generate: %zu of %zu requests failed; their lines in %s carry \"error\"\n", num_failed,
                 input->prompts.size(), output_path->c_str());
  }
  return 0;
}

}  // namespace deepinfer::cli
