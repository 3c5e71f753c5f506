// The engine step loop: schedule, one forward pass, sample, detokenize, stop.
#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "core/check.h"
#include "core/clock.h"
#include "core/device_error.h"
#include "core/logging.h"
#include "engine/batch_builder.h"
#include "engine/kv_handover.h"
#include "engine/kv_offload.h"
#include "engine/memory_plan.h"
#include "engine/model_runner.h"
#include "engine/step_draws.h"
#include "engine/structured_output.h"
#include "sampling/logits_processor.h"
#include "sampling/sampler.h"
#include "sampling/stop_matcher.h"

namespace deepinfer {
namespace {

// Recent images whose encodings a request with the same pixels reuses: a few dozen, within 1 GiB
// of pixels and rows (a Gemma 3 image takes ~12 MB; a Qwen2.5-VL-7B one from ~1 MB to ~540 MB at
// the published max_pixels).
constexpr size_t kEncodedImagesKept = 32;
constexpr size_t kEncodedImageBytesKept = size_t{1} << 30;

// The context length: the config's max_model_len, else the model's max_position_embeddings.
int64_t resolve_max_model_len(const CausalLM& model, const EngineConfig& config) {
  if (config.max_model_len > 0) return config.max_model_len;
  const int64_t model_max = model.config().max_position_embeddings;
  return model_max > 0 ? model_max : 4096;
}

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

struct EngineCore::Impl {
  struct Sequence {
    Request request;
    std::optional<StreamingDetokenizer> detokenizer;
    std::optional<StopMatcher> stop_matcher;
  };
  struct Group {
    int32_t n = 1;
    std::vector<int64_t> seq_ids;         // index = sample index
    std::vector<int64_t> held_children;   // samples waiting for sample 0's prefill to fork from
    std::vector<std::optional<TokenLogprob>> prompt_logprobs;
    int32_t num_finished = 0;
  };

  Impl(CausalLM& m, const Tokenizer* t, const EngineConfig& c)
      : model((check_speculative(m, c), m)),
        tokenizer(t),
        config(c),
        kv_config(make_kv_config(m, c, kv_cache_bytes(m, c))),
        kv(kv_config),
        scheduler(c.scheduler, kv),
        runner(m, c.async_scheduling) {
    max_model_len = resolve_max_model_len(model, config);
    model.allocate_kv_cache(KvCacheShape{kv.num_blocks(), config.block_size, kv.num_swa_blocks()});
    if (config.kv_store.enabled() && config.enable_prefix_caching) {
      offload = value_or_throw(KvOffload::create(model, kv, config.kv_store, kv_config.model_fingerprint,
                                                 config.block_size, config.scheduler.max_num_batched_tokens));
    }
    if (config.speculative.num_tokens > 0 && config.mode != EngineMode::kPrompt) {
      speculator =
          std::make_unique<Speculator>(model, kv, config.speculative, config.scheduler.max_num_seqs,
                                       config.scheduler.max_num_batched_tokens, max_model_len, pipelines_steps());
    }
    for (int64_t id : model.config().eos_token_ids) eos_ids.push_back(static_cast<int32_t>(id));
    if (tokenizer != nullptr) {
      if (auto eos = tokenizer->eos_id(); eos && std::find(eos_ids.begin(), eos_ids.end(), *eos) == eos_ids.end()) {
        eos_ids.push_back(*eos);
      }
    }
  }

  // Speculative decoding needs a draft module, a cache whose every layer attends to every
  // position (the draft module shares its tables), and, when outputs must repeat, fixed K.
  static void check_speculative(const CausalLM& model, const EngineConfig& config) {
    const SpeculativeConfig& spec = config.speculative;
    if (spec.num_tokens == 0) return;
    if (spec.num_tokens < 0 || spec.num_tokens > 16) {
      throw UserError(Error{"--speculative-tokens must be in [0, 16], got " + std::to_string(spec.num_tokens)});
    }
    if (model.num_draft_modules() == 0 && !spec.draft_source) {
      throw UserError(Error{
          "--speculative-tokens: the model has no draft module (DeepSeek-V3-style MTP layers, "
          "num_nextn_predict_layers >= 1 in config.json)"});
    }
    const auto& windows = model.config().layer_sliding_window;
    if (std::any_of(windows.begin(), windows.end(), [](int64_t w) { return w > 0; })) {
      throw UserError(Error{"--speculative-tokens: models with sliding-window layers are not supported"});
    }
    if (config.deterministic && spec.varlen) {
      throw UserError(Error{
          "speculative decoding in the deterministic mode (--batch-invariant with a fixed seed) needs "
          "--spec-varlen off: the confidence-scheduled budget follows measured step times, so the batches, and "
          "with them the bits, would change from run to run"});
    }
  }

  // The KV cache's byte budget: on a device, what the dry run of the heaviest step leaves of
  // gpu_memory_utilization (or exactly kv_cache_bytes when set, if it fits); on the host,
  // kv_cache_bytes or 1 GiB.
  static int64_t kv_cache_bytes(CausalLM& model, const EngineConfig& config) {
    if (config.num_kv_blocks > 0) return 0;  // the blocks were given
    if (!model.backend().device_memory()) return config.kv_cache_bytes > 0 ? config.kv_cache_bytes : int64_t{1} << 30;
    StepLimits limits;
    limits.max_num_seqs = config.scheduler.max_num_seqs;
    limits.max_num_batched_tokens = config.scheduler.max_num_batched_tokens;
    limits.max_model_len = static_cast<int32_t>(resolve_max_model_len(model, config));
    limits.block_size = config.block_size;
    const MemoryPlan plan =
        value_or_throw(plan_device_memory(model, limits, config.gpu_memory_utilization, config.kv_cache_bytes));
    DI_LOG(kInfo, plan.summary());
    return plan.kv_cache_bytes;
  }

  static KvCacheConfig make_kv_config(const CausalLM& model, const EngineConfig& config, int64_t kv_bytes) {
    KvCacheConfig kv_config;
    kv_config.block_size = config.block_size;
    kv_config.enable_prefix_caching = config.enable_prefix_caching;
    const int64_t bytes_per_block = model.kv_bytes_per_token() * config.block_size;
    // No more blocks than max_num_seqs full-length sequences can use.
    const int64_t useful_blocks = int64_t{config.scheduler.max_num_seqs} *
                                  blocks_for_tokens(resolve_max_model_len(model, config), config.block_size);
    kv_config.num_blocks =
        config.num_kv_blocks > 0
            ? config.num_kv_blocks
            : static_cast<int32_t>(std::clamp<int64_t>(kv_bytes / bytes_per_block, 1, std::max<int64_t>(useful_blocks, 1)));
    const ModelConfig& mc = model.config();
    // When every layer has the same window, pages that left it are released.
    const auto& windows = mc.layer_sliding_window;
    if (!windows.empty() && windows.front() > 0 &&
        std::all_of(windows.begin(), windows.end(), [&](int32_t w) { return w == windows.front(); })) {
      kv_config.sliding_window = windows.front();
    }
    apply_swa_split(model, config, kv_bytes, kv_config);
    DI_LOG(kInfo, "KV cache: " << kv_config.num_blocks << " blocks of " << config.block_size << " tokens ("
                               << int64_t{kv_config.num_blocks} * config.block_size << " tokens) of "
                               << dtype_name(model.kv_cache_dtype()));
    // Everything the cached KV depends on: architecture, shapes, weights' dtype, KV layout.
    const std::string kv_dtype(dtype_name(model.kv_cache_dtype()));
    kv_config.model_fingerprint = mc.architecture + "|" + mc.raw.dump() + "|kv=" + kv_dtype + "|block=" +
                                  std::to_string(config.block_size) + "|deepinfer=" DEEPINFER_VERSION;
    // A split cache's stored pages hold the full-attention layers only: another page layout.
    if (kv_config.num_swa_blocks > 0) kv_config.model_fingerprint += "|kv_pages=full_layers";
    // A persistent store outlives the process: its pages must also name the weights' and
    // tokenizer's identity, and the backend and invariance mode that computed their KV, so it
    // never mixes models, nor pages of other kernels (another backend, or the other mode).
    if (config.kv_store.enabled()) {
      kv_config.model_fingerprint += "|backend=" + std::string(model.backend().name()) +
                                     "|batch_invariant=" + (config.kv_store.batch_invariant ? "1" : "0");
    }
    if (!config.kv_store.model_identity.empty()) kv_config.model_fingerprint += "|" + config.kv_store.model_identity;
    return kv_config;
  }

  // A model mixing sliding-window and full-attention layers gets separate tables for its sliding
  // layers (docs/architecture.md, "Sliding-window KV"): their pool holds every running sequence's
  // window plus one step's new tokens, and the full layers' pool gets the remaining memory. In
  // every mode: the PROMPT/COMPLETION handover reads and writes each kind of layer by its own
  // table (engine/kv_handover.h). With
  // the persistent store the split is what lets it keep only the full layers' pages (SWA replay);
  // a model whose every layer slides then splits too, its full-attention group holding no layer
  // but still the pages' hash chain. So it does in a COMPLETION engine: a handed-over request
  // brings only its window's KV, and the split keeps the pages before it out of the prefix index.
  static void apply_swa_split(const CausalLM& model, const EngineConfig& config, int64_t kv_bytes,
                              KvCacheConfig& kv_config) {
    const auto& windows = model.config().layer_sliding_window;
    const bool all_sliding =
        !windows.empty() && std::all_of(windows.begin(), windows.end(), [](int64_t w) { return w > 0; });
    const bool imports = (config.kv_store.enabled() && config.enable_prefix_caching) ||
                         config.mode == EngineMode::kCompletion;
    const int64_t swa_bytes_per_token =
        all_sliding && imports ? model.kv_bytes_per_token() : model.swa_kv_bytes_per_token();
    if (swa_bytes_per_token <= 0) return;
    const int32_t window = *std::max_element(windows.begin(), windows.end());
    const int32_t bs = config.block_size;
    kv_config.sliding_window = window;
    const int64_t useful_blocks =
        int64_t{config.scheduler.max_num_seqs} * blocks_for_tokens(resolve_max_model_len(model, config), bs);
    if (all_sliding) {
      // The window layers' pool is the whole cache, sized as the unsplit one was; group 0's blocks
      // hold no bytes, so there are as many as can be useful.
      kv_config.num_swa_blocks = kv_config.num_blocks;
      if (config.num_kv_blocks == 0) {
        kv_config.num_blocks = static_cast<int32_t>(std::clamp<int64_t>(useful_blocks, 1, INT32_MAX));
      }
      return;
    }
    const int64_t swa_blocks = int64_t{config.scheduler.max_num_seqs} * (blocks_for_tokens(window, bs) + 3) +
                               blocks_for_tokens(config.scheduler.max_num_batched_tokens, bs);
    kv_config.num_swa_blocks = static_cast<int32_t>(std::min<int64_t>(swa_blocks, INT32_MAX));
    if (config.num_kv_blocks > 0) return;
    const int64_t full_bytes_per_block = (model.kv_bytes_per_token() - swa_bytes_per_token) * bs;
    const int64_t left = kv_bytes - swa_blocks * swa_bytes_per_token * bs;
    kv_config.num_blocks =
        static_cast<int32_t>(std::clamp<int64_t>(left / full_bytes_per_block, 1, std::max<int64_t>(useful_blocks, 1)));
  }

  Sequence* make_sequence(int64_t request_id, int32_t sample_index, const std::vector<int32_t>& prompt,
                          const SamplingParams& params, int32_t priority, const std::string& cache_salt) {
    auto seq = std::make_unique<Sequence>();
    Request& r = seq->request;
    r.seq_id = next_seq_id++;
    r.request_id = request_id;
    r.sample_index = sample_index;
    r.set_prompt(prompt);
    r.params = params;
    if (uses_penalties(params)) r.track_penalties(model.config().vocab_size);
    r.seed = params.seed.value_or(mix64(static_cast<uint64_t>(request_id)));
    r.priority = priority;
    r.arrival = next_arrival++;
    r.cache_salt = cache_salt;
    // Prompt logprobs need logits at every prompt position, so such a request never reuses
    // cached blocks: a salt of its own keeps its chain apart.
    if (params.prompt_logprobs) r.cache_salt += "\x1fprompt_logprobs:" + std::to_string(r.seq_id);
    if (tokenizer != nullptr) {
      seq->detokenizer.emplace(*tokenizer, params.skip_special_tokens);
      if (!params.stop.empty()) seq->stop_matcher.emplace(params.stop, params.include_stop_str_in_output);
    }
    Sequence* raw = seq.get();
    sequences[r.seq_id] = std::move(seq);
    return raw;
  }

  SampleOutput& sample_output(RequestOutput& out, int32_t index) {
    for (SampleOutput& s : out.samples) {
      if (s.index == index) return s;
    }
    out.samples.push_back(SampleOutput{});
    out.samples.back().index = index;
    return out.samples.back();
  }

  RequestOutput& output_for(std::map<int64_t, RequestOutput>& outputs, const Request& r) {
    RequestOutput& out = outputs[r.request_id];
    out.request_id = r.request_id;
    out.num_prompt_tokens = r.num_prompt_tokens();
    out.num_cached_tokens = sequences.at(groups.at(r.request_id).seq_ids[0])->request.num_cached_tokens;
    return out;
  }

  // flush_text: emit the text still held back; false when a stop string ended the sample (the
  // text after it is never emitted).
  // queued_pages: set to the hashes of the pages persist queued for the store.
  void finish(Sequence& seq, FinishReason reason, RequestOutput& out, bool flush_text = true,
              std::vector<BlockHash>* queued_pages = nullptr) {
    Request& r = seq.request;
    if (structured) structured->remove(r.seq_id);  // cancels a compile nothing else waits for
    awaiting_grammar.erase(r.seq_id);
    SampleOutput& sample = sample_output(out, r.sample_index);
    if (flush_text) {
      // Text still held back (an incomplete character, a possible stop-string start) is final now.
      std::string rest = seq.detokenizer ? seq.detokenizer->flush() : std::string();
      if (seq.stop_matcher) {
        StopMatcher::Output match = seq.stop_matcher->push(rest);
        rest = match.text;
        if (!match.stopped) rest += seq.stop_matcher->finish();
      }
      sample.new_text += rest;
    }
    r.status = RequestStatus::kFinished;
    r.finish_reason = reason;
    sample.finished = true;
    sample.finish_reason = reason;
    if (offload) {
      offload->release(&r);
      if (kv.has(r.seq_id)) {
        std::vector<BlockHash> queued = offload->persist(r, kv.block_table(r.seq_id));
        if (queued_pages != nullptr) *queued_pages = std::move(queued);
      }
    }
    scheduler.remove(&r);
    Group& group = groups.at(r.request_id);
    if (++group.num_finished == group.n) out.finished = true;
  }

  Result<void> ensure_structured() {
    if (structured) return {};
    DI_ASSIGN(structured, StructuredOutputs::create(*tokenizer, static_cast<int32_t>(model.config().vocab_size),
                                                    eos_ids, config.grammar_compiler));
    return {};
  }

  // Starts the compile of a constrained sequence's grammar; it samples once the compile is done.
  void prepare_grammar(Request& r) {
    structured->prepare(r.seq_id, *r.params.structured_output);
    r.awaiting_grammar = true;
    awaiting_grammar.insert(r.seq_id);
  }

  // Sequences whose grammar finished compiling may sample from now on. A compile that failed
  // (an error in the spec, a timeout) ends its request alone, before it produced a token.
  void start_compiled_grammars(std::map<int64_t, RequestOutput>& outputs) {
    std::map<int64_t, Error> failed;  // by request: its samples share the one compile
    for (auto it = awaiting_grammar.begin(); it != awaiting_grammar.end();) {
      Request& r = sequences.at(*it)->request;
      const Result<bool> started = structured->try_start(r.seq_id, r.output_token_ids());
      if (started.ok() && !*started) {
        ++it;
        continue;
      }
      r.awaiting_grammar = false;
      it = awaiting_grammar.erase(it);
      if (!started.ok()) failed.emplace(r.request_id, Error{"structured output: " + started.error().message});
    }
    for (auto& [request_id, error] : failed) {
      const Group& group = groups.at(request_id);
      RequestOutput& out = output_for(outputs, sequences.at(group.seq_ids.front())->request);
      out.error = std::move(error);
      for (int64_t seq_id : group.seq_ids) {
        Sequence& seq = *sequences.at(seq_id);
        if (!seq.request.is_finished()) finish(seq, FinishReason::kAbort, out);
      }
      groups.at(request_id).held_children.clear();
    }
  }

  // Appends a first token the caller already streamed (PrefilledRequest::first_token_delivered,
  // Request::delivered_first_token) as if drawn: the detokenizer, stop rules and grammar advance.
  // Returns the output only when that finished the sample, without the token or its text.
  std::optional<RequestOutput> append_delivered(Sequence& seq, int32_t token) {
    std::map<int64_t, RequestOutput> scratch;
    RequestOutput& first = output_for(scratch, seq.request);
    append_token(seq, token, std::nullopt, first);
    if (!seq.request.is_finished()) return std::nullopt;
    for (SampleOutput& sample : first.samples) {
      sample.new_token_ids.clear();
      sample.new_text.clear();
    }
    return std::move(first);
  }

  // Appends a sampled token and applies the stop rules: stop / eos token ids and stop strings
  // (both only once min_tokens are out), max_tokens, the context length. As in vLLM, a stop
  // token's own text is left out unless include_stop_str_in_output.
  void append_token(Sequence& seq, int32_t token, std::optional<TokenLogprob> logprob, RequestOutput& out) {
    Request& r = seq.request;
    // A grammar that failed to compile or reached a dead end ends its request alone.
    if (auto error = structured_errors.find(r.seq_id); error != structured_errors.end()) {
      sample_output(out, r.sample_index).stop_reason = error->second;
      structured_errors.erase(error);
      finish(seq, FinishReason::kAbort, out);
      return;
    }
    const bool grammar_complete = r.params.structured_output && structured->accept(r.seq_id, token);
    r.append_output(token);
    SampleOutput& sample = sample_output(out, r.sample_index);
    sample.new_token_ids.push_back(token);
    if (logprob) sample.new_logprobs.push_back(std::move(*logprob));
    const int32_t num_outputs = r.num_output_tokens();
    const bool may_stop = num_outputs >= r.params.min_tokens;
    const auto& stop_ids = r.params.stop_token_ids;
    const bool is_stop_id = may_stop && std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
    const bool is_eos =
        may_stop && !r.params.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
    std::string piece = seq.detokenizer ? seq.detokenizer->push(token) : std::string();
    if ((is_stop_id || is_eos) && !r.params.include_stop_str_in_output) piece.clear();
    if (seq.stop_matcher && may_stop) {
      StopMatcher::Output match = seq.stop_matcher->push(piece);
      sample.new_text += match.text;
      if (match.stopped) {
        sample.stop_reason = match.stop_str;
        finish(seq, FinishReason::kStop, out, false);
        return;
      }
    } else {
      sample.new_text += piece;
    }
    if (is_stop_id) {
      sample.stop_reason = std::to_string(token);
      finish(seq, FinishReason::kStop, out);
    } else if (is_eos) {
      finish(seq, FinishReason::kStop, out);
    } else if (num_outputs >= r.params.max_tokens || r.num_tokens() >= max_model_len) {
      finish(seq, FinishReason::kLength, out);
    } else if (grammar_complete) {
      finish(seq, FinishReason::kStop, out);
    }
  }

  int32_t sample(const Request& r, const float* raw_logits, std::optional<TokenLogprob>* logprob) {
    const int64_t vocab = model.config().vocab_size;
    processed.assign(raw_logits, raw_logits + vocab);
    apply_logits_processors(processed.data(), vocab, r.params, static_cast<size_t>(r.num_output_tokens()),
                            r.penalty_history(), eos_ids);
    if (r.params.structured_output) {
      auto masked = structured->mask(r.seq_id, processed.data());
      if (!masked.ok()) structured_errors[r.seq_id] = masked.error().message;
    }
    const int32_t token = sample_token(processed.data(), vocab, r.params, r.seed, r.num_tokens(), r.sample_index);
    if (r.params.logprobs) *logprob = token_logprob(raw_logits, vocab, token, *r.params.logprobs);
    return token;
  }

  // Sample 0 just finished its prompt: the other samples share its blocks and sample their
  // first token from the same logits.
  void fork_held_children(Sequence& parent, const float* raw_logits, std::map<int64_t, RequestOutput>& outputs) {
    Group& group = groups.at(parent.request.request_id);
    for (int64_t child_id : group.held_children) {
      Sequence& child = *sequences.at(child_id);
      std::vector<std::pair<int32_t, int32_t>> copies, swa_copies;
      if (!kv.fork(parent.request.seq_id, child_id, &copies, &swa_copies)) {
        scheduler.add(&child.request);  // no block to copy into: it prefills itself later
        continue;
      }
      model.copy_kv_blocks(copies);
      model.copy_swa_kv_blocks(swa_copies);
      child.request.num_computed_tokens = child.request.num_prompt_tokens();
      child.request.num_cached_tokens = parent.request.num_cached_tokens;
      scheduler.add_running(&child.request);
      std::optional<TokenLogprob> logprob;
      const int32_t token = sample(child.request, raw_logits, &logprob);
      append_token(child, token, std::move(logprob), output_for(outputs, child.request));
    }
    group.held_children.clear();
  }

  void hand_over_prefilled(Sequence& seq, RequestOutput& out) {
    Request& r = seq.request;
    PrefilledRequest p;
    p.request_id = r.request_id;
    p.prompt_token_ids.assign(r.prompt_token_ids().begin(), r.prompt_token_ids().end());
    p.params = r.params;
    p.params.seed = r.seed;
    p.first_token = r.output_token_ids().front();
    p.block_size = config.block_size;
    if (r.kv_through_store) {
      p.kv_not_carried = true;
    } else if (r.kv_sink) {  // streamed while the prefill ran (kv_export_of)
      p.swa_first_block =
          swa_window_start(model.config(), r.num_prompt_tokens(), config.block_size) / config.block_size;
    } else {
      read_prefilled_kv(model, kv, r.seq_id, r.num_prompt_tokens(), p);
    }
    // The text the first token still holds back (an incomplete character, a possible stop
    // string's start) is the COMPLETION engine's to emit, as the sequence goes on there.
    finish(seq, FinishReason::kPrefilled, out, /*flush_text=*/false, &p.queued_page_hashes);
    prefilled.push_back(std::move(p));
  }

  // A launched step and the scheduler's rows it runs.
  struct InFlight {
    int64_t handle = 0;
    BuiltBatch built;
    StepDraws plan;
    std::chrono::steady_clock::time_point scheduled;  // when its scheduling began
    std::shared_ptr<PrefillKvExport> kv_export;       // its streamed prompts' KV, when it has any
    // Launched while the step before it ran (launch_scheduled_ahead).
    bool ahead = false;
  };

  // The step's copies of the prompt blocks it completes for the requests that stream their KV
  // (PrefillHandover::kStream): every layer's, from the blocks not sent yet (prefix-cache and
  // store hits included) to the last full one, or to the prompt's end with its last chunk.
  std::shared_ptr<PrefillKvExport> kv_export_of(const BuiltBatch& built) {
    std::vector<PrefillKvExport::Sequence> sequences;
    for (const ScheduledRows& rows : built.rows) {
      Request& r = *rows.request;
      if (!r.kv_sink) continue;
      const int32_t num_prompt = r.num_prompt_tokens();
      const int32_t computed = std::min(rows.first_position + rows.num_new_tokens, num_prompt);
      const int32_t end =
          computed == num_prompt ? blocks_for_tokens(num_prompt, config.block_size) : computed / config.block_size;
      if (end <= r.kv_blocks_streamed) continue;
      PrefillKvExport::Sequence s;
      s.sink = r.kv_sink;
      s.first_block = r.kv_blocks_streamed;
      s.end_block = end;
      const std::vector<int32_t>& table = kv.block_table(r.seq_id);
      s.full_ids.assign(table.begin() + s.first_block, table.begin() + end);
      s.swa_first_block = swa_window_start(model.config(), num_prompt, config.block_size) / config.block_size;
      const std::vector<int32_t>& swa_table = kv.has_swa_tables() ? kv.swa_block_table(r.seq_id) : table;
      const int32_t swa_from = std::max(s.first_block, s.swa_first_block);
      if (swa_from < end) s.swa_ids.assign(swa_table.begin() + swa_from, swa_table.begin() + end);
      r.kv_blocks_streamed = end;
      sequences.push_back(std::move(s));
    }
    if (sequences.empty()) return nullptr;
    return std::make_shared<PrefillKvExport>(model, std::move(sequences));
  }

  // Sample 0's first token: held n > 1 samples then sample the same row on the host.
  bool forks_from_row(const Request& r) const {
    return r.num_output_tokens() == 0 && r.sample_index == 0 && !groups.at(r.request_id).held_children.empty();
  }

  // Samples on the backend the rows nothing on the host changes (engine/step_draws.h).
  InFlight launch_scheduled(BuiltBatch built) {
    InFlight step;
    step.plan = plan_step_draws(built, config.device_sampling, [this](const Request& r) { return forks_from_row(r); });
    if (config.mode == EngineMode::kPrompt) step.kv_export = kv_export_of(built);
    if (step.kv_export) {
      built.batch.after_layer = [kv_export = step.kv_export](int32_t layer) { kv_export->after_layer(layer); };
    }
    // The batch, draws and host rows go to the runner; processing reads only the rows and draw_of.
    step.handle = runner.launch({std::move(built.batch), std::move(step.plan.draws), std::move(step.plan.host_rows)});
    step.built = std::move(built);
    return step;
  }

  // Rows whose request finished after the step was launched (stopped or aborted while a step
  // scheduled ahead ran) are dropped: their tokens are never appended.
  void process_step(const InFlight& step, const RunnerOutput& result, std::map<int64_t, RequestOutput>& outputs) {
    const BuiltBatch& built = step.built;
    for (size_t i = 0; i < built.rows.size(); ++i) {
      const ScheduledRows& rows = built.rows[i];
      if (rows.request->is_finished()) continue;
      const int32_t* drawn =
          step.plan.draw_of[i] ? result.drawn.data() + static_cast<size_t>(*step.plan.draw_of[i]) : nullptr;
      try {
        process_rows(rows, result, drawn, outputs);
      } catch (const std::exception& e) {
        if (loses_device(e)) throw;
        end_request(rows.request->request_id, Error{e.what()}, outputs);
      }
    }
  }

  // followed: the step after it is already in flight (pipelined), so nothing drafts for that one.
  void collect_and_process(const InFlight& step, bool followed, std::map<int64_t, RequestOutput>& outputs) {
    RunnerOutput result;
    try {
      result = runner.collect(step.handle);
      if (step.kv_export) step.kv_export->finish();  // before the first tokens that end those prefills
    } catch (const std::exception& e) {
      if (loses_device(e)) throw;
      // A failed forward pass fails its whole batch.
      std::vector<int64_t> request_ids;
      for (const ScheduledRows& rows : step.built.rows) {
        if (!rows.request->is_finished()) request_ids.push_back(rows.request->request_id);
      }
      for (int64_t request_id : request_ids) end_request(request_id, Error{e.what()}, outputs);
      return;
    }
    // No step reads an image's pixels once its rows are ready (a step that asked to encode it
    // finds it ready), and this step's images are.
    for (const std::shared_ptr<EncodedImage>& image : step.built.encoded_images) {
      if (!image->ready.load() || image->pixels.empty()) continue;  // another step encoded it
      image->pixels = {};
      ++num_encoded_images;
    }
    process_step(step, result, outputs);
    if (speculator) draft_after(step, followed);
  }

  // Speculative decoding: the draft module's turn after a step's results (engine/speculator.h),
  // unless the next step was launched already (followed).
  void draft_after(const InFlight& step, bool followed) {
    int64_t decode_rows = 0;
    int64_t draft_rows = 0;
    bool decode_only = true;  // no prompt rows: the step's time is a decode or verify step's
    for (const ScheduledRows& rows : step.built.rows) {
      if (rows.samples) decode_rows += 1;
      draft_rows += rows.num_drafts;
      decode_only = decode_only && rows.num_new_tokens == rows.num_drafts + 1;
    }
    speculator->record_step(decode_rows, draft_rows, decode_only, step.ahead, seconds_since(step.scheduled));
    if (followed) return;
    const int32_t k = config.speculative.num_tokens;
    // The most drafts a sequence may use: verifying d appends up to d + 1 tokens.
    const auto max_drafts = [&](const Request& r) -> int32_t {
      if (r.is_finished() || r.awaiting_grammar) return 0;
      const int64_t room = std::min<int64_t>(r.params.max_tokens - r.num_output_tokens(), max_model_len - r.num_tokens());
      return static_cast<int32_t>(std::clamp<int64_t>(room - 1, 0, k));
    };
    const auto valid_prefix = [&](const Request& r, std::span<const int32_t> drafts) -> int32_t {
      if (!r.params.structured_output || !structured) return static_cast<int32_t>(drafts.size());
      return structured->valid_prefix(r.seq_id, drafts);
    };
    try {
      const auto population = static_cast<int64_t>(scheduler.num_running() + scheduler.num_waiting());
      speculator->draft(step.built, population, max_drafts, valid_prefix);
    } catch (const std::exception& e) {
      if (loses_device(e)) throw;
      // Drafts only speed decoding up: without them the sequences decode plainly.
      DI_LOG(kWarn, "speculative decoding: drafting failed (" << e.what() << "); this step decodes without drafts");
      for (const ScheduledRows& rows : step.built.rows) {
        rows.request->drafts.clear();
        rows.request->draft_confidences.clear();
      }
    }
  }

  // The scheduler's next step, built and launched; nullopt when nothing runs (or building it
  // failed, which ends its requests). pending_draws (a step scheduled ahead): per sequence whose
  // last token is pending, its draw in the step in flight.
  std::optional<InFlight> schedule_and_launch(std::map<int64_t, RequestOutput>& outputs,
                                              const std::map<int64_t, int32_t>& pending_draws) {
    const auto scheduled_at = std::chrono::steady_clock::now();
    if (offload) {
      const bool idle = scheduler.num_waiting() == 0 && scheduler.num_running() == 0;
      for (Request* r : offload->take_ready(idle)) scheduler.add(r);
    }
    if (!awaiting_grammar.empty()) start_compiled_grammars(outputs);
    if (speculator) speculator->plan(scheduler.running());
    const SchedulerOutput scheduled = scheduler.schedule();
    num_preemptions += static_cast<int64_t>(scheduled.preempted.size());
    for (Request* r : scheduled.preempted) r->drafts.clear();  // it recomputes; so does the draft module
    if (scheduled.empty()) {
      // Nothing can run before a compile ends: wait for one briefly rather than have the caller
      // spin on step() (not while a step is in flight: its results come first).
      if (outputs.empty() && !awaiting_grammar.empty() && pending_draws.empty()) {
        structured->wait_for_compiles(std::chrono::milliseconds(10));
      }
      return std::nullopt;
    }
    try {
      BuiltBatch built = build_forward_batch(scheduled, kv, speculator && model.rows_may_share_sequences());
      if (!pending_draws.empty()) {
        // A pending token is its sequence's last, so it can only be the last of its rows.
        std::vector<int32_t>& token_from_draw = built.batch.token_from_draw;
        token_from_draw.assign(built.batch.token_ids.size(), -1);
        for (size_t i = 0; i < built.rows.size(); ++i) {
          const ScheduledRows& rows = built.rows[i];
          const auto it = pending_draws.find(rows.request->seq_id);
          if (it == pending_draws.end() || rows.first_position + rows.num_new_tokens != rows.request->num_tokens()) {
            continue;
          }
          token_from_draw[static_cast<size_t>(built.batch.query_start[i + 1] - 1)] = it->second;
        }
        for (size_t t = 0; t < token_from_draw.size(); ++t) {
          DI_CHECK(built.batch.token_ids[t] != Request::kPendingToken || token_from_draw[t] >= 0,
                   "a pending token without its draw at batch row " << t);
        }
      }
      if (structured) {  // the next token masks are computed while the forward pass runs
        std::vector<int64_t> constrained;
        for (const ScheduledRows& rows : built.rows) {
          if (rows.samples && rows.request->params.structured_output) constrained.push_back(rows.request->seq_id);
        }
        structured->prefetch(constrained);
      }
      InFlight step = launch_scheduled(std::move(built));
      step.scheduled = scheduled_at;
      return step;
    } catch (const std::exception& e) {
      if (loses_device(e)) throw;
      for (const ScheduledSequence& s : scheduled.scheduled) {
        if (!s.request->is_finished()) end_request(s.request->request_id, Error{e.what()}, outputs);
      }
      return std::nullopt;
    }
  }

  bool pipelines_steps() const {
    return runner.asynchronous() && config.mode == EngineMode::kNormal && !offload && !kv.has_swa_tables() &&
           kv_config.sliding_window <= 0;
  }

  // Pipelined mode: the next step, scheduled and launched while `running` is in flight, as if it
  // were done: its rows' tokens counted computed and each token it draws standing pending at its
  // sequence's end (taken from `running`'s draws where they are, ForwardBatch::token_from_draw).
  // Left out of it: a sequence whose pending token is its last (max_tokens, the context length),
  // and one whose next token the host samples (penalties, logit bias, min_tokens, grammar masks):
  // it runs every other step while the others pipeline. Not at all when `running` has prompt
  // logprob rows or a row that held n > 1 samples fork from (the fork copies KV blocks from this
  // thread, which must not race the runner's), nor with the persistent store, split
  // sliding-window tables or PROMPT / COMPLETION mode. With speculative decoding only while
  // drafting does not pay (Speculator::may_pipeline) and no running sequence holds drafts.
  std::optional<InFlight> launch_scheduled_ahead(const InFlight& running, std::map<int64_t, RequestOutput>& outputs) {
    if (!pipelines_steps()) return std::nullopt;
    if (speculator) {
      // No running sequence may hold drafts: those `running` verifies (drafts are cleared only by
      // the next draft()) append an unknown number of tokens, and those draft() left with sequences
      // that sat out its step (a full token budget) would be verified ahead, where a pending
      // token's row must stay its sequence's last.
      const auto holds_drafts = [](const Request* r) { return !r->drafts.empty(); };
      const std::vector<Request*>& decoding = scheduler.running();
      if (!speculator->may_pipeline() || std::any_of(decoding.begin(), decoding.end(), holds_drafts)) {
        return std::nullopt;
      }
    }
    struct Advance {
      Request* request;
      int32_t num_new_tokens;
      bool samples;
      std::optional<int32_t> draw;
    };
    std::vector<Advance> advances;
    for (size_t i = 0; i < running.built.rows.size(); ++i) {
      const ScheduledRows& rows = running.built.rows[i];
      if (rows.request->is_finished()) continue;
      if (rows.num_prompt_logprob_rows > 0 || (rows.samples && forks_from_row(*rows.request))) return std::nullopt;
      advances.push_back({rows.request, rows.num_new_tokens, rows.samples, running.plan.draw_of[i]});
    }
    std::map<int64_t, int32_t> pending_draws;
    for (const Advance& a : advances) {
      Request& r = *a.request;
      r.num_computed_tokens += a.num_new_tokens;
      if (!a.samples) continue;
      if (!a.draw) {
        r.sits_out_step_ahead = true;  // its token comes from the host sampler after `running`
        continue;
      }
      r.push_pending_token();
      pending_draws[r.seq_id] = *a.draw;
      r.sits_out_step_ahead = r.num_output_tokens() >= r.params.max_tokens || r.num_tokens() >= max_model_len;
    }
    // Back to the state `running`'s results apply to. A sequence the scheduler preempted keeps
    // no computed tokens.
    const auto undo = [&] {
      for (const Advance& a : advances) {
        Request& r = *a.request;
        r.sits_out_step_ahead = false;
        if (a.draw) r.pop_pending_token();
        if (r.status == RequestStatus::kRunning) r.num_computed_tokens -= a.num_new_tokens;
      }
    };
    std::optional<InFlight> ahead;
    try {
      ahead = schedule_and_launch(outputs, pending_draws);
    } catch (...) {
      undo();
      throw;
    }
    undo();
    if (ahead) {
      ahead->ahead = true;
      ++num_overlapped_steps;
      if (speculator) speculator->pipelined_step();
    }
    return ahead;
  }

  // One step's outputs: the scheduler's next step is launched unless one is in flight; in
  // pipelined mode the step after it is scheduled and launched too (launch_scheduled_ahead);
  // then the older one is collected and its rows processed.
  void run_step(std::map<int64_t, RequestOutput>& outputs) {
    if (!in_flight) {
      in_flight = schedule_and_launch(outputs, {});
      if (!in_flight) return;
    }
    std::optional<InFlight> next = launch_scheduled_ahead(*in_flight, outputs);
    const InFlight current = std::move(*in_flight);
    in_flight = std::move(next);
    collect_and_process(current, in_flight.has_value(), outputs);
  }

  // Erases the finished requests no step in flight still has rows of.
  void erase_finished_groups() {
    std::set<int64_t> in_flight_requests;
    if (in_flight) {
      for (const ScheduledRows& rows : in_flight->built.rows) in_flight_requests.insert(rows.request->request_id);
    }
    std::vector<int64_t> kept;
    for (int64_t request_id : finished_groups) {
      if (in_flight_requests.count(request_id) != 0) {
        kept.push_back(request_id);
        continue;
      }
      for (int64_t seq_id : groups.at(request_id).seq_ids) sequences.erase(seq_id);
      groups.erase(request_id);
    }
    finished_groups = std::move(kept);
  }

  // Ends every sample of a request that is still running, with `failure` when given (abort: none).
  void end_request(int64_t request_id, std::optional<Error> failure, std::map<int64_t, RequestOutput>& outputs) {
    Group& group = groups.at(request_id);
    RequestOutput& out = output_for(outputs, sequences.at(group.seq_ids.front())->request);
    for (int64_t seq_id : group.seq_ids) {
      Sequence& seq = *sequences.at(seq_id);
      if (seq.request.is_finished()) continue;
      if (failure) out.failure = failure;
      structured_errors.erase(seq_id);
      finish(seq, FinishReason::kAbort, out);
    }
    group.held_children.clear();
  }

  // drawn: the tokens the backend drew for the sampling row and each draft row (forward_sampled),
  // if it did; null otherwise.
  void process_rows(const ScheduledRows& rows, const RunnerOutput& result, const int32_t* drawn,
                    std::map<int64_t, RequestOutput>& outputs) {
    Sequence& seq = *sequences.at(rows.request->seq_id);
    Request& r = seq.request;
    const int64_t vocab = model.config().vocab_size;
    // A sequence preempted since this step was launched (scheduled ahead) recomputes its KV later.
    if (r.status == RequestStatus::kRunning) {
      r.num_computed_tokens += rows.num_new_tokens - rows.num_drafts;
      kv.commit_computed(r.seq_id, r.cache_tokens(), r.num_computed_tokens);
    }
    Group& group = groups.at(r.request_id);
    for (int32_t k = 0; k < rows.num_prompt_logprob_rows; ++k) {
      const int32_t scored = rows.first_position + k + 1;
      const float* row = result.row(rows.first_logit_row + k, vocab);
      group.prompt_logprobs[static_cast<size_t>(scored)] =
          token_logprob(row, vocab, r.token_at(scored), *r.params.prompt_logprobs);
    }
    if (!rows.samples) return;
    const bool prompt_done_now = r.num_output_tokens() == 0;
    RequestOutput& out = output_for(outputs, r);
    if (prompt_done_now && r.params.prompt_logprobs && r.sample_index == 0) out.prompt_logprobs = group.prompt_logprobs;
    if (r.params.max_tokens == 0) {  // only the prompt was asked for (e.g. its logprobs): sample nothing
      for (int64_t child_id : group.held_children) finish(*sequences.at(child_id), FinishReason::kLength, out);
      group.held_children.clear();
      finish(seq, FinishReason::kLength, out);
      return;
    }
    // The golden row, then each draft's row while the drafts before it were kept: each row's token
    // is what plain decoding draws at its position, with the sequence as it stands (stop rules,
    // grammar, penalties), and a draft is kept when it is that token.
    int32_t accepted = 0;
    for (int32_t d = 0; d <= rows.num_drafts; ++d) {
      const int32_t logit_row = rows.first_logit_row + rows.num_prompt_logprob_rows + d;
      // A backend draw has its row on the host only for its logprobs (plan_step_draws; a row that
      // held n > 1 samples fork from is never drawn on the backend).
      const float* row = drawn == nullptr || r.params.logprobs ? result.row(logit_row, vocab) : nullptr;
      std::optional<TokenLogprob> logprob;
      const int32_t token = drawn != nullptr ? drawn[d] : sample(r, row, &logprob);
      // A backend draw's logprobs come from its row, copied beside it (plan_step_draws).
      if (drawn != nullptr && r.params.logprobs) logprob = token_logprob(row, vocab, token, *r.params.logprobs);
      if (prompt_done_now && r.sample_index == 0) fork_held_children(seq, row, outputs);
      if (r.delivered_first_token) {
        const int32_t delivered = *std::exchange(r.delivered_first_token, std::nullopt);
        if (std::optional<RequestOutput> finished = append_delivered(seq, delivered)) {
          const SampleOutput& from = finished->samples.front();
          SampleOutput& sample = sample_output(out, r.sample_index);
          sample.finished = from.finished;
          sample.finish_reason = from.finish_reason;
          sample.stop_reason = from.stop_reason;
          out.finished = out.finished || finished->finished;
        }
        break;
      }
      append_token(seq, token, std::move(logprob), out);
      const bool kept = d < rows.num_drafts && token == r.drafts[static_cast<size_t>(d)];
      if (kept) ++accepted;
      if (!kept || r.is_finished()) break;
      ++r.num_computed_tokens;  // the kept draft's KV, computed at the next row, is the sequence's
    }
    if (rows.num_drafts > 0) {
      speculator->record(rows.num_drafts, accepted);
      r.num_drafts_verified += rows.num_drafts;
      r.num_drafts_accepted += accepted;
      SampleOutput& sample = sample_output(out, r.sample_index);
      sample.num_draft_tokens = r.num_drafts_verified;
      sample.num_accepted_draft_tokens = r.num_drafts_accepted;
      if (!r.is_finished()) kv.commit_computed(r.seq_id, r.cache_tokens(), r.num_computed_tokens);
    }
    if (prompt_done_now && config.mode == EngineMode::kPrompt && !r.is_finished()) hand_over_prefilled(seq, out);
  }

  // A prefilled request of n > 1 samples (a cluster's decode worker; the PROMPT engine ran sample 0
  // alone): added as a whole request, whose sample 0 then takes the pushed KV into its own blocks
  // and computes only the prompt's last token, whose logits the other samples fork from as on one
  // server; it appends the first token the prefill worker drew. KV not carried: the prompt is
  // looked up (prefix cache, store) and computed as for any request.
  Result<void> add_prefilled_samples(PrefilledRequest p, int32_t priority, std::string cache_salt,
                                     TrafficClass kv_cache_class, std::vector<ImageInput> images, EngineCore& engine) {
    // Prompt logprobs came with the delivered first token.
    if (p.first_token_delivered) p.params.prompt_logprobs.reset();
    DI_TRY(engine.add_request(p.request_id, p.prompt_token_ids, p.params, priority, std::move(cache_salt),
                              kv_cache_class, PrefillHandover::kCopyKv, nullptr, std::move(images)));
    Request& r = sequences.at(groups.at(p.request_id).seq_ids.front())->request;
    if (p.first_token_delivered) r.delivered_first_token = p.first_token;
    if (p.kv_not_carried) return {};
    if (offload) offload->release(&r);
    scheduler.remove(&r);
    if (!import_prefilled_kv(r, p, r.num_prompt_tokens() - 1)) {
      // No room for the KV now: the prompt is computed when blocks free up, as for any request.
      if (offload) {
        offload->hold(&r);
      } else {
        scheduler.add(&r);
      }
      return {};
    }
    scheduler.add_running(&r);
    return {};
  }

  // A request's images as its PromptImages (PromptImageCache::take), or why not: the model reads
  // none, or a bidirectional image (Gemma 3's, whose tokens must run in one step) is longer than a step.
  Result<std::vector<PromptImage>> take_images(const std::vector<int32_t>& prompt, std::vector<ImageInput> images) {
    const ImageInputFormat* format = model.image_input();
    if (format == nullptr) {
      if (!images.empty()) return Error{"the model takes no images"};
      return std::vector<PromptImage>();
    }
    if (!images.empty() && format->bidirectional &&
        format->tokens_per_image > config.scheduler.max_num_batched_tokens) {
      return Error{"an image takes " + std::to_string(format->tokens_per_image) +
                   " tokens, which must run in one step, but max_num_batched_tokens is " +
                   std::to_string(config.scheduler.max_num_batched_tokens)};
    }
    return this->images.take(prompt, std::move(images), *format, model.config().hidden_size);
  }

  // Allocates r's prompt blocks and writes p's KV into those this engine's prefix cache did not
  // already hold; r then counts num_computed of its tokens computed. False: no free blocks.
  bool import_prefilled_kv(Request& r, const PrefilledRequest& p, int32_t num_computed) {
    int32_t cached = 0;
    // A split cache gets sliding-window blocks only for the window the next token attends to
    // (what commit_computed keeps), as the PROMPT engine sent.
    const int32_t swa_start =
        kv.has_swa_tables() ? swa_window_start(model.config(), r.num_prompt_tokens(), config.block_size) : 0;
    // An image's placeholders name its blocks by the image (Request::cache_tokens).
    if (!kv.allocate_imported(r.seq_id, r.prompt_cache_tokens(), r.num_prompt_tokens(), r.cache_salt, swa_start,
                              &cached)) {
      return false;
    }
    write_prefilled_kv(model, kv, r.seq_id, p, cached);
    r.num_computed_tokens = num_computed;
    r.num_cached_tokens = cached;
    kv.commit_computed(r.seq_id, r.cache_tokens(), r.num_computed_tokens);
    return true;
  }

  CausalLM& model;
  const Tokenizer* tokenizer;
  EngineConfig config;
  KvCacheConfig kv_config;
  KvCacheManager kv;
  Scheduler scheduler;
  int64_t max_model_len = 0;
  std::vector<int32_t> eos_ids;
  std::map<int64_t, std::unique_ptr<Sequence>> sequences;  // by seq_id
  std::map<int64_t, Group> groups;                          // by request_id
  std::map<int64_t, RequestOutput> pending_outputs;         // aborts, finished-at-admission
  std::vector<PrefilledRequest> prefilled;
  std::vector<float> processed;
  int64_t next_seq_id = 0;
  int64_t next_arrival = 0;
  int64_t num_preemptions = 0;
  std::unique_ptr<KvOffload> offload;  // null without a persistent store
  std::unique_ptr<Speculator> speculator;  // null without speculative decoding
  std::unique_ptr<StructuredOutputs> structured;  // made by the first constrained request
  std::map<int64_t, std::string> structured_errors;  // by seq_id, until the sample is finished
  std::set<int64_t> awaiting_grammar;                 // seq_ids whose grammar still compiles
  std::optional<InFlight> in_flight;  // the step launched and not collected yet (pipelined mode)
  std::vector<int64_t> finished_groups;  // finished requests still to erase (erase_finished_groups)
  int64_t num_overlapped_steps = 0;
  int64_t num_encoded_images = 0;
  // Encodings of recent images by their pixels' hash (a multimodal model).
  PromptImageCache images{kEncodedImagesKept, kEncodedImageBytesKept};
  // Last: destroyed first, so its thread is done with the model before anything else goes.
  ModelRunner runner;
};

EngineCore::EngineCore(CausalLM& model, const Tokenizer* tokenizer, const EngineConfig& config)
    : impl_(std::make_unique<Impl>(model, tokenizer, config)) {}

EngineCore::~EngineCore() = default;

bool EngineCore::run_idle_step() { return impl_->model.run_idle_step(); }

int64_t EngineCore::num_group_rounds() const { return impl_->model.num_group_rounds(); }

const EngineConfig& EngineCore::config() const { return impl_->config; }

Result<void> EngineCore::add_request(int64_t request_id, std::vector<int32_t> prompt, const SamplingParams& params,
                                     int32_t priority, std::string cache_salt, TrafficClass kv_cache_class,
                                     PrefillHandover handover, std::shared_ptr<PrefillKvSink> kv_sink,
                                     std::vector<ImageInput> images) {
  Impl& m = *impl_;
  const int64_t vocab = m.model.config().vocab_size;
  if (prompt.empty()) return Error{"the prompt is empty; give at least one token"};
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return Error{"prompt token id " + std::to_string(prompt[i]) + " at index " + std::to_string(i) +
                   " is outside the vocabulary [0, " + std::to_string(vocab) + ")"};
    }
  }
  DI_TRY(params.validate(vocab));
  const auto num_prompt = static_cast<int64_t>(prompt.size());
  if (num_prompt >= m.max_model_len) {
    return Error{"the prompt has " + std::to_string(num_prompt) + " tokens; the model's context length is " +
                 std::to_string(m.max_model_len) + " tokens, prompt and output together"};
  }
  const int64_t needed_blocks = blocks_for_tokens(std::min<int64_t>(num_prompt + params.max_tokens, m.max_model_len),
                                                  m.config.block_size);
  if (needed_blocks > m.kv.num_blocks()) {
    return Error{"the request needs " + std::to_string(needed_blocks) + " KV blocks but the cache has " +
                 std::to_string(m.kv.num_blocks()) + "; shorten it or give the engine more KV memory"};
  }
  // Unchunked, a prompt (or a preempted sequence's recompute, up to prompt + max_tokens) runs in
  // one step or never.
  const int64_t max_step_tokens = std::min<int64_t>(num_prompt + params.max_tokens, m.max_model_len);
  if (!m.config.scheduler.enable_chunked_prefill && max_step_tokens > m.config.scheduler.max_num_batched_tokens) {
    return Error{"with chunked prefill off, prompt + max_tokens (" + std::to_string(max_step_tokens) +
                 " tokens) must fit one step's max_num_batched_tokens (" +
                 std::to_string(m.config.scheduler.max_num_batched_tokens) + "); enable chunked prefill or raise it"};
  }
  if (!params.stop.empty() && m.tokenizer == nullptr) {
    return Error{"stop strings need the model's tokenizer (tokenizer.json); use stop_token_ids instead"};
  }
  if (m.config.mode == EngineMode::kPrompt && params.n > 1) return Error{"a PROMPT engine takes n = 1 requests"};
  if ((handover == PrefillHandover::kStream) != (kv_sink != nullptr)) {
    return Error{"a prefill handed over as a stream needs a sink for its KV, and only such a prefill takes one"};
  }
  if (handover == PrefillHandover::kStream && m.config.mode != EngineMode::kPrompt) {
    return Error{"only a PROMPT engine streams a prefill's KV"};
  }
  if (handover == PrefillHandover::kStream && m.model.handover_layers().empty()) {
    return Error{"this model cannot stream its KV layer by layer"};
  }
  if (handover == PrefillHandover::kThroughStore && !m.offload) {
    return Error{
        "a prefill handed over through the store needs a persistent KV store (--kv-cache-dir or "
        "--kv-cache-backend)"};
  }
  if (m.groups.count(request_id) != 0) return Error{"request id " + std::to_string(request_id) + " is already in use"};
  auto prompt_images = m.take_images(prompt, std::move(images));
  if (!prompt_images.ok()) return prompt_images.error();
  if (params.structured_output) {
    if (m.tokenizer == nullptr) return Error{"structured output needs the model's tokenizer (tokenizer.json)"};
    DI_TRY(m.ensure_structured());
  }
  Impl::Group& group = m.groups[request_id];
  group.n = params.n;
  if (params.prompt_logprobs) group.prompt_logprobs.resize(prompt.size());
  for (int32_t i = 0; i < params.n; ++i) {
    Impl::Sequence* seq = m.make_sequence(request_id, i, prompt, params, priority, cache_salt);
    seq->request.kv_cache_class = kv_cache_class;
    seq->request.set_images(*prompt_images);
    seq->request.kv_through_store = handover == PrefillHandover::kThroughStore;
    seq->request.kv_sink = kv_sink;
    group.seq_ids.push_back(seq->request.seq_id);
    if (params.structured_output) m.prepare_grammar(seq->request);  // compiles while the prompt runs
    if (i == 0 && m.offload) {
      m.offload->hold(&seq->request);  // joins the scheduler once its stored prefix is loaded
    } else if (i == 0) {
      m.scheduler.add(&seq->request);
    } else {
      group.held_children.push_back(seq->request.seq_id);
    }
  }
  return {};
}

void EngineCore::abort_request(int64_t request_id) {
  Impl& m = *impl_;
  const auto it = m.groups.find(request_id);
  // A finished request may still be held while a step in flight has rows of it.
  if (it != m.groups.end() && it->second.num_finished < it->second.n) {
    m.end_request(request_id, std::nullopt, m.pending_outputs);
  }
}

std::vector<RequestOutput> EngineCore::step() {
  Impl& m = *impl_;
  std::map<int64_t, RequestOutput> outputs = std::move(m.pending_outputs);
  m.pending_outputs.clear();
  try {
    m.run_step(outputs);
  } catch (...) {
    // What this step already ended is reported by the next one, so no request is left behind.
    m.pending_outputs = std::move(outputs);
    throw;
  }
  std::vector<RequestOutput> result;
  for (auto& [request_id, out] : outputs) {
    if (out.finished) m.finished_groups.push_back(request_id);
    result.push_back(std::move(out));
  }
  m.erase_finished_groups();
  return result;
}

bool EngineCore::has_unfinished_requests() const {
  return !impl_->groups.empty() || !impl_->pending_outputs.empty() || impl_->in_flight.has_value();
}

std::vector<PrefilledRequest> EngineCore::take_prefilled() { return std::exchange(impl_->prefilled, {}); }

Result<void> EngineCore::add_prefilled_request(PrefilledRequest p, int32_t priority, std::string cache_salt,
                                               TrafficClass kv_cache_class, std::vector<ImageInput> images) {
  Impl& m = *impl_;
  if (m.config.mode == EngineMode::kPrompt) return Error{"a PROMPT engine takes no prefilled requests"};
  if (m.config.mode == EngineMode::kNormal && !p.kv_not_carried) {
    return Error{"only a COMPLETION engine takes a prefilled request's KV; a NORMAL engine takes one without it"};
  }
  if (p.kv_not_carried) {
    if (p.prompt_token_ids.empty()) return Error{"the prefilled request has an empty prompt"};
  } else {
    DI_TRY(check_prefilled_kv(m.model, p, m.config.block_size));
  }
  if (m.groups.count(p.request_id) != 0) return Error{"request id " + std::to_string(p.request_id) + " is already in use"};
  if (p.params.n > 1) {
    return m.add_prefilled_samples(std::move(p), priority, std::move(cache_salt), kv_cache_class, std::move(images),
                                   *this);
  }
  // The prompt's images: for the positions its tokens after them take (M-RoPE), its blocks' names,
  // and a prompt computed again here (KV not carried, or preempted).
  auto prompt_images = m.take_images(p.prompt_token_ids, std::move(images));
  if (!prompt_images.ok()) return prompt_images.error();
  if (p.params.structured_output) {
    if (m.tokenizer == nullptr) return Error{"structured output needs the model's tokenizer (tokenizer.json)"};
    DI_TRY(m.ensure_structured());
  }
  Impl::Group& group = m.groups[p.request_id];
  Impl::Sequence* seq = m.make_sequence(p.request_id, 0, p.prompt_token_ids, p.params, priority, cache_salt);
  seq->request.kv_cache_class = kv_cache_class;
  seq->request.set_images(std::move(*prompt_images));
  group.seq_ids.push_back(seq->request.seq_id);
  Request& r = seq->request;
  if (!p.kv_not_carried && !m.import_prefilled_kv(r, p, r.num_prompt_tokens())) {
    m.sequences.erase(r.seq_id);
    m.groups.erase(p.request_id);
    return Error{"no free KV blocks for the prefilled request; retry when requests finish"};
  }
  // Its grammar compiles here too; the matcher then accepts the first token (try_start).
  if (r.params.structured_output) m.prepare_grammar(r);
  // A first token already delivered still advances the detokenizer, stop strings and grammar;
  // only its output is dropped (unless it ended the request, which the PROMPT engine would have
  // reported instead of handing the request over).
  if (p.first_token_delivered) {
    if (std::optional<RequestOutput> finished = m.append_delivered(*seq, p.first_token)) {
      m.pending_outputs[p.request_id] = std::move(*finished);
    }
  } else {
    m.append_token(*seq, p.first_token, std::nullopt, m.output_for(m.pending_outputs, r));
  }
  if (r.is_finished()) return {};
  if (!p.kv_not_carried) {
    m.scheduler.add_running(&r);
  } else if (m.offload) {
    m.offload->hold(&r);  // joins the scheduler once the store's pages of its prompt are loaded
  } else {
    m.scheduler.add(&r);
  }
  return {};
}

EngineStats EngineCore::stats() const {
  EngineStats s;
  s.num_waiting = impl_->scheduler.num_waiting();
  s.num_running = impl_->scheduler.num_running();
  s.kv_usage = impl_->kv.usage();
  s.num_kv_blocks = impl_->kv.num_blocks();
  s.num_swa_kv_blocks = impl_->kv.num_swa_blocks();
  s.prefix_cache = impl_->kv.stats();
  s.num_preemptions = impl_->num_preemptions;
  s.num_overlapped_steps = impl_->num_overlapped_steps;
  s.num_encoded_images = impl_->num_encoded_images;
  if (impl_->speculator) s.speculative = impl_->speculator->stats();
  if (impl_->offload) {
    s.kv_store = impl_->offload->stats();
    s.prefix_cache.queried_tokens -= impl_->offload->import_stats().queried_tokens;
    s.prefix_cache.hit_tokens -= impl_->offload->import_stats().hit_tokens;
  }
  return s;
}

void EngineCore::check_invariants() const { impl_->kv.check_invariants(); }

void EngineCore::flush_kv_store() {
  if (impl_->offload) impl_->offload->store().flush();
}

void EngineCore::wait_kv_written(std::span<const BlockHash> hashes) {
  if (impl_->offload) impl_->offload->store().wait_written(hashes);
}

}  // namespace deepinfer
