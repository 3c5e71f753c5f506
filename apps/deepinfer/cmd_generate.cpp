// `deepinfer generate`: continues one prompt (text, chat or token ids) and streams the result,
// or runs a JSONL batch (--input/--output); both on the batching engine via deepinfer::LLM.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.h"
#include "data_parallel_flags.h"
#include "core/thread_pool.h"
#include "deepinfer/llm.h"
#include "generate_batch.h"
#include "recipe/chat_template.h"
#include "session.h"
#include "structured_flags.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage = R"(usage: deepinfer generate --model DIR (--prompt TEXT [--chat] | --tokens 1,2,3) [--max-tokens N]
                          [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
                          [--ignore-eos] [--device cpu|ref|cuda] [--threads N] [--batch-invariant]
                          [--no-cuda-graphs] [--host-sampling] [--dequantize-weights] [--[no-]async-scheduling] [--json-schema FILE|JSON | --json-object | --regex R | --grammar FILE | --choice a,b]
                          [--kv-cache-dir DIR] [--kv-cache-host-bytes N] [--kv-cache-disk-bytes N]
                          [--kv-cache-backend disk|redis://host:port] [--kv-cache-load auto|always]
                          [--swa-replay-tokens N|exact] [--speculative-tokens K] [--spec-varlen on|off]
       deepinfer generate --model DIR --input in.jsonl --output out.jsonl [--max-num-seqs N] [sampling flags]
                          [--kv-cache-bytes N] [--gpu-memory-utilization F]
                          [--kv-cache-dtype auto|float32|bfloat16|fp8]  (both forms)
                          [--data-parallel-size N [--expert-parallel] [--num-redundant-experts R]
                           [--eplb-interval N] [--eplb-window N] [--eplb-policy peak-aware|deepseek]
                           [--expert-placement-out FILE]]
Prints the continuation as it is generated: text when the model directory has a tokenizer
(tokenizer.json), else token ids (comma-separated). --prompt needs the tokenizer; with --chat the
text is sent as one user message through the model's chat template (tokenizer_config.json).
Batch mode: each input line is {"prompt": "..."} or {"prompt_token_ids": [...]} with optional
OpenAI-named sampling fields (max_tokens, temperature, top_p, top_k, min_p, seed, stop, n,
logprobs, top_logprobs, ignore_eos, ...; the flags give their defaults); each output line, in
input order, has token_ids, text (with a tokenizer), logprobs (when asked) and finish_reason;
a request whose structured output (response_format, guided_*) does not compile gets a line
{"index": i, "error": "..."} instead and the others still run.
--kv-cache-dir DIR keeps prompt KV pages on disk across runs (a later run with the same prefix
loads them instead of recomputing); --kv-cache-host-bytes N, --kv-cache-disk-bytes N bound its
tiers, --kv-cache-backend redis://host:port adds a Redis tier shared by many machines.
--kv-cache-load auto (default) loads a stored page only when that is faster than recomputing it
(both measured at start-up); always loads every stored page. --swa-replay-tokens N|exact: for
sliding-window models the store keeps only full-attention layers' KV and a hit rebuilds the
sliding layers by running the prefix's last N tokens again (default max(128, window); exact:
sliding layers x window, the same tokens as a cold run).
--kv-cache-dtype auto|float32|bfloat16|fp8: the KV cache's element type (default auto: float32 on the
CPU, bf16 for 16-bit models on CUDA, float32 there with --batch-invariant). fp8 keeps e4m3 codes with
the checkpoint's per-layer k_scale / v_scale (one per tensor, kv head or column), else scale 1: a
quarter of float32's bytes, so up to four times the tokens in the same --kv-cache-bytes (the cache
never holds more than --max-num-seqs sequences of --max-model-len; CPU and CUDA).
--batch-invariant: every request gives the same tokens and logprobs, bit for bit, whatever else
runs in its batch (slower prefill). --no-cuda-graphs (--device cuda): decode steps run op by op
instead of replaying captured CUDA graphs. --host-sampling: every logits row is copied to the host
and sampled there (default: drawn on the device, only token ids come back; the same tokens).
--dequantize-weights: FP8 and MXFP4 checkpoints load dequantised (bf16 / float32) instead of packed
(two to eight times the memory; on CUDA today dequantised MXFP4 experts run prompts faster and decode
slower or no faster).
--async-scheduling, --no-async-scheduling: the pipelined step loop or the synchronous one (default:
pipelined with --device cuda, synchronous on the CPU): the next step is scheduled and launched before
the last one is post-processed (docs/architecture.md, "The pipelined step loop"); the same tokens.
--speculative-tokens K: speculative decoding with the model's draft module (DeepSeek-V3-style MTP
layers), chains of up to K drafts verified in one step; the same tokens (see deepinfer serve
--help). --spec-varlen on|off: DSpark's confidence-scheduled verification (default) or K drafts
every step (required with --batch-invariant).
--json-schema, --json-object, --regex, --grammar (EBNF file) and --choice constrain the output
(docs/structured_output.md); a schema keyword the engine cannot enforce is an error.
--data-parallel-size N: N ranks (processes, started by this one), each with its own engine and KV
cache; a batch's prompts are dealt to the ranks in turn and rank 0 writes every result in input
order (a single prompt runs on rank 0). With --expert-parallel the MoE layers' experts are spread
over the ranks, which run their forwards together (docs/parallel.md; in --batch-invariant mode the
same bits as one rank). EPLB: every --eplb-interval forward rounds (default 10000; 0: never) the
ranks re-place the experts by their load over the last --eplb-window rounds (default 1000), with
--eplb-policy peak-aware (default) or deepseek, between two rounds (the same outputs);
--expert-placement-out FILE gets the placement at load and after each re-placement (the format of
--expert-placement). The other data-parallel flags are those of deepinfer serve --help.
Defaults: --max-tokens 64, --temperature 0 (greedy).
)";

Result<SamplingParams> params_from_args(const Args& args) {
  SamplingParams params;
  auto max_tokens = args.get_int("--max-tokens", 64);
  if (!max_tokens.ok()) return max_tokens.error();
  if (*max_tokens < 1 || *max_tokens > 1'000'000) return Error{"--max-tokens must be in [1, 1000000]"};
  params.max_tokens = static_cast<int32_t>(*max_tokens);
  auto temperature = args.get_double("--temperature", 0.0);
  if (!temperature.ok()) return temperature.error();
  auto top_p = args.get_double("--top-p", 1.0);
  if (!top_p.ok()) return top_p.error();
  auto top_k = args.get_int("--top-k", 0);
  if (!top_k.ok()) return top_k.error();
  auto min_p = args.get_double("--min-p", 0.0);
  if (!min_p.ok()) return min_p.error();
  params.temperature = *temperature;
  params.top_p = *top_p;
  params.top_k = static_cast<int32_t>(std::clamp<int64_t>(*top_k, -1, INT32_MAX));
  params.min_p = *min_p;
  if (args.has("--seed")) {
    auto seed = args.get_int("--seed", 0);
    if (!seed.ok()) return seed.error();
    params.seed = static_cast<uint64_t>(*seed);
  }
  params.ignore_eos = args.has("--ignore-eos");
  DI_TRY(read_structured_flags(args, params));
  return params;
}

// The prompt's ids: --tokens as given, --prompt encoded (the tokenizer's BOS rules applied), or
// --prompt --chat rendered by the model's chat template.
Result<std::vector<int32_t>> prompt_ids(const Args& args, const std::string& model_dir, const LLM& llm) {
  if (args.has("--tokens")) return args.get_int_list("--tokens");
  const std::string text = *args.find("--prompt");
  if (!args.has("--chat")) return llm.tokenize(text);
  auto tokenizer = Tokenizer::load(model_dir);
  if (!tokenizer.ok()) return Error{"--chat needs the model's tokenizer: " + tokenizer.error().message};
  auto family = detect_chat_family(model_dir);
  if (!family.ok()) return family.error();
  const nlohmann::ordered_json request = {{"messages", {{{"role", "user"}, {"content", text}}}}};
  auto segments = render_chat_request(*family, request);
  if (!segments.ok()) return segments.error();
  ThreadPool pool;
  return encode_prompt(*tokenizer, *segments, &pool);
}

}  // namespace

int run_generate(int argc, char** argv) {
  if (wants_help(argc, argv, kUsage)) return 0;
  auto args = Args::parse(argc, argv,
                          data_parallel_value_flags(model_value_flags(structured_value_flags(kv_store_value_flags(
                              {"--prompt", "--tokens", "--max-tokens", "--temperature", "--top-p", "--top-k", "--min-p",
                               "--seed", "--input", "--output", "--max-num-seqs", "--kv-cache-bytes",
                               "--gpu-memory-utilization", kSpeculativeTokensFlag, kSpecVarlenFlag})))),
                          data_parallel_bool_flags(model_bool_flags({"--ignore-eos", "--chat", "--json-object",
                                                                     "--async-scheduling", "--no-async-scheduling"})));
  if (!args.ok()) return report_error("generate", args.error());
  auto params = params_from_args(*args);
  if (!params.ok()) return report_error("generate", params.error());
  if (!args->has("--model")) return report_error("generate", Error{"missing required flag --model"});
  LocalRanks ranks;
  auto data_parallel = data_parallel_from_args(*args, argc, argv, ranks);
  if (!data_parallel.ok()) return report_error("generate", data_parallel.error());
  if (args->has("--input") || args->has("--output")) return run_generate_batch(*args, *params, *data_parallel, ranks);
  if (args->has("--prompt") == args->has("--tokens")) {
    return report_error("generate", Error{"give exactly one of --prompt TEXT or --tokens 1,2,3 (or --input FILE)"});
  }
  if (args->has("--chat") && !args->has("--prompt")) return report_error("generate", Error{"--chat needs --prompt"});
  auto threads = args->get_int("--threads", 0);
  if (!threads.ok()) return report_error("generate", threads.error());
  if (*threads > 0) omp_set_num_threads(static_cast<int>(*threads));

  LLMConfig config;
  config.model_dir = *args->find("--model");
  config.device = args->find("--device").value_or("cpu");
  config.max_num_seqs = 1;
  config.batch_invariant = args->has("--batch-invariant");
  auto kv_cache_dtype = kv_cache_dtype_from_args(*args);
  if (!kv_cache_dtype.ok()) return report_error("generate", kv_cache_dtype.error());
  config.kv_cache_dtype = *kv_cache_dtype;
  config.cuda_graphs = !args->has("--no-cuda-graphs");
  config.packed_weights = !args->has("--dequantize-weights");
  config.device_sampling = !args->has("--host-sampling");
  auto async_scheduling = async_scheduling_from_args(*args);
  if (!async_scheduling.ok()) return report_error("generate", async_scheduling.error());
  config.async_scheduling = *async_scheduling;
  auto speculative = speculative_from_args(*args);
  if (!speculative.ok()) return report_error("generate", speculative.error());
  config.speculative_tokens = speculative->num_tokens;
  config.spec_varlen = speculative->varlen;
  if (auto applied = apply_kv_store_flags(*args, config); !applied.ok()) {
    return report_error("generate", applied.error());
  }
  config.data_parallel = *data_parallel;
  config.show_progress = data_parallel->rank == 0;
  auto llm = LLM::open(config);
  if (!llm.ok()) return report_error("generate", llm.error());
  if ((*llm)->data_parallel_rank() != 0) {  // the prompt runs on rank 0; this rank serves its experts
    auto waited = (*llm)->wait_for_group();
    return waited.ok() ? 0 : report_error("generate", waited.error());
  }
  auto prompt = prompt_ids(*args, config.model_dir, **llm);
  if (!prompt.ok()) return report_error("generate", prompt.error());
  const auto start = std::chrono::steady_clock::now();
  auto stream = (*llm)->stream({Prompt{"", *prompt}}, {*params});
  if (!stream.ok()) return report_error("generate", stream.error());
  const bool as_text = (*llm)->has_tokenizer();
  size_t num_generated = 0;
  while (auto event = stream->next()) {
    if (!event->error.empty()) return report_error("generate", Error{event->error});
    if (as_text) std::fwrite(event->new_text.data(), 1, event->new_text.size(), stdout);
    for (int32_t token : event->new_token_ids) {
      if (!as_text) std::printf("%s%d", num_generated > 0 ? "," : "", token);
      ++num_generated;
    }
    std::fflush(stdout);
  }
  std::printf("\n");
  if (auto waited = (*llm)->wait_for_group(); !waited.ok()) return report_error("generate", waited.error());
  if (auto waited = ranks.wait(); !waited.ok()) return report_error("generate", waited.error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "[%zu prompt tokens, %zu generated in %.2fs]\n", prompt->size(), num_generated, seconds);
  return 0;
}

}  // namespace deepinfer::cli
