// deepinfer::LLM: the offline batch API over EngineCore.
#include "deepinfer/llm.h"

#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>

#include "core/progress.h"
#include "engine/data_parallel.h"
#include "engine/engine_core.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

std::string finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kPrefilled: return "prefilled";
    case FinishReason::kNone: break;
  }
  return "";
}

std::vector<TopLogprob> to_public(const std::vector<std::pair<int32_t, double>>& top) {
  std::vector<TopLogprob> out;
  out.reserve(top.size());
  for (const auto& [id, logprob] : top) out.push_back({id, logprob});
  return out;
}

}  // namespace

struct LLM::Impl {
  LLMConfig config;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
  std::optional<Tokenizer> tokenizer;
  std::unique_ptr<EngineCore> engine;
  int64_t next_request_id = 0;
  DataParallelGroup data_parallel;
};

struct LLM::Stream::Impl {
  LLM::Impl* owner = nullptr;
  std::map<int64_t, size_t> prompt_index;  // request id -> prompt index
  std::vector<GenerationResult> results;
  std::deque<StreamEvent> events;
  std::optional<ProgressBar> progress;
  int64_t generated_tokens = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void absorb(const RequestOutput& out) {
    const size_t index = prompt_index.at(out.request_id);
    GenerationResult& result = results[index];
    result.num_cached_tokens = out.num_cached_tokens;
    if (out.error) result.error = out.error->message;
    if (out.prompt_logprobs) {
      for (const auto& entry : *out.prompt_logprobs) {
        result.prompt_logprobs.push_back(entry ? std::optional(to_public(entry->top)) : std::nullopt);
        result.prompt_token_logprobs.push_back(entry ? std::optional(entry->logprob) : std::nullopt);
      }
    }
    for (const SampleOutput& sample : out.samples) {
      SampleResult& r = result.outputs.at(static_cast<size_t>(sample.index));
      r.token_ids.insert(r.token_ids.end(), sample.new_token_ids.begin(), sample.new_token_ids.end());
      r.text += sample.new_text;
      for (const TokenLogprob& lp : sample.new_logprobs) {
        r.logprobs.push_back(lp.logprob);
        r.top_logprobs.push_back(to_public(lp.top));
      }
      if (sample.finished) {
        r.finish_reason = finish_reason_name(sample.finish_reason);
        r.stop_reason = sample.stop_reason;
      }
      generated_tokens += static_cast<int64_t>(sample.new_token_ids.size());
      events.push_back(StreamEvent{index, sample.index, sample.new_token_ids, sample.new_text, sample.finished,
                                   finish_reason_name(sample.finish_reason), result.error});
    }
    if (out.finished && progress) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char rate[64];
      std::snprintf(rate, sizeof(rate), "%.1f tok/s", static_cast<double>(generated_tokens) / std::max(seconds, 1e-9));
      progress->set_detail(rate);
      progress->advance(1);
    }
  }
};

LLM::LLM(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LLM::~LLM() = default;

Result<std::unique_ptr<LLM>> LLM::open(const LLMConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  BackendOptions backend_options;
  backend_options.batch_invariant = config.batch_invariant;
  backend_options.graphs = config.cuda_graphs;
  backend_options.packed_weights = config.packed_weights;
  auto kv_cache_dtype = parse_kv_cache_dtype(config.kv_cache_dtype);
  if (!kv_cache_dtype.ok()) return Error{"kv_cache_dtype: " + kv_cache_dtype.error().message};
  backend_options.kv_cache_dtype = *kv_cache_dtype;
  auto backend = make_backend(config.device, backend_options);
  if (!backend.ok()) return backend.error();
  impl->backend = std::move(*backend);
  if (std::filesystem::exists(std::filesystem::path(config.model_dir) / "tokenizer.json")) {
    auto tokenizer = Tokenizer::load(config.model_dir);
    if (!tokenizer.ok()) return tokenizer.error();
    impl->tokenizer = std::move(*tokenizer);
  }
  auto group = join_data_parallel_group(config.data_parallel, config.model_dir, config.batch_invariant);
  if (!group.ok()) return group.error();
  impl->data_parallel = std::move(*group);
  auto model = load_model(config.model_dir, *impl->backend, config.show_progress, impl->data_parallel.expert_parallel);
  if (!model.ok()) return model.error();
  impl->model = std::move(*model);
  EngineConfig engine_config;
  engine_config.block_size = config.block_size;
  engine_config.kv_cache_bytes = config.kv_cache_bytes;
  engine_config.gpu_memory_utilization = config.gpu_memory_utilization;
  engine_config.max_model_len = config.max_model_len;
  engine_config.enable_prefix_caching = config.enable_prefix_caching;
  engine_config.device_sampling = config.device_sampling;
  engine_config.async_scheduling = config.async_scheduling.value_or(config.device == "cuda");
  engine_config.scheduler.max_num_seqs = config.max_num_seqs;
  engine_config.scheduler.max_num_batched_tokens = config.max_num_batched_tokens;
  engine_config.kv_store.dir = config.kv_cache_dir;
  engine_config.kv_store.host_bytes = config.kv_cache_host_bytes;
  engine_config.kv_store.disk_bytes = config.kv_cache_disk_bytes;
  engine_config.kv_store.backend = config.kv_cache_backend;
  engine_config.kv_store.cost_guard = config.kv_cache_cost_guard;
  engine_config.kv_store.swa_replay_tokens = config.kv_cache_swa_replay_tokens;
  engine_config.kv_store.batch_invariant = config.batch_invariant;
  engine_config.speculative.num_tokens = config.speculative_tokens;
  engine_config.speculative.varlen = config.spec_varlen;
  engine_config.deterministic = config.batch_invariant;
  if (engine_config.kv_store.enabled()) {
    auto identity = fingerprint_model_dir(config.model_dir, model_hash_cache_path(config.kv_cache_dir));
    if (!identity.ok()) return identity.error();
    engine_config.kv_store.model_identity = *identity;
  }
  try {
    impl->engine = std::make_unique<EngineCore>(*impl->model, impl->tokenizer ? &*impl->tokenizer : nullptr,
                                                engine_config);
  } catch (const UserError& e) {  // a malformed kv store or speculative decoding setting
    return Error{e.what()};
  }
  return std::unique_ptr<LLM>(new LLM(std::move(impl)));
}

bool LLM::has_tokenizer() const { return impl_->tokenizer.has_value(); }
int64_t LLM::vocab_size() const { return impl_->model->config().vocab_size; }

int32_t LLM::data_parallel_rank() const {
  return impl_->data_parallel.group ? impl_->data_parallel.group->rank() : 0;
}

int32_t LLM::data_parallel_size() const {
  return impl_->data_parallel.group ? impl_->data_parallel.group->world_size() : 1;
}

Result<void> LLM::wait_for_group() {
  try {
    while (impl_->model->run_idle_step()) {
    }
  } catch (const std::exception& e) {
    return Error{e.what()};
  }
  return {};
}

bool LLM::request_expert_rebalance() { return impl_->model->request_expert_rebalance(); }

Result<std::vector<std::string>> LLM::all_gather(const std::string& bytes) {
  if (!impl_->data_parallel.group) return std::vector<std::string>{bytes};
  try {
    return impl_->data_parallel.group->all_gather(bytes);
  } catch (const std::exception& e) {
    return Error{e.what()};
  }
}

Result<std::vector<int32_t>> LLM::tokenize(const std::string& text) const {
  if (!impl_->tokenizer) {
    return Error{"text prompts need " + impl_->config.model_dir + "/tokenizer.json; give token ids instead"};
  }
  auto ids = impl_->tokenizer->encode(text);
  if (!ids.ok()) return ids.error();
  return impl_->tokenizer->add_special_tokens(*ids);
}

Result<LLM::Stream> LLM::stream(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params,
                                std::optional<bool> show_progress) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    return Error{"give one SamplingParams for all prompts or one per prompt (" + std::to_string(prompts.size()) +
                 " prompts, " + std::to_string(params.size()) + " params)"};
  }
  auto stream = std::make_unique<Stream::Impl>();
  stream->owner = impl_.get();
  stream->results.resize(prompts.size());
  std::vector<int64_t> added;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SamplingParams& p = params.size() == 1 ? params[0] : params[i];
    std::vector<int32_t> ids = prompts[i].token_ids;
    Result<void> status;
    if (ids.empty()) {
      auto tokenized = tokenize(prompts[i].text);
      if (tokenized.ok()) ids = std::move(*tokenized);
      else status = tokenized.error();
    }
    const int64_t request_id = impl_->next_request_id++;
    if (status.ok()) status = impl_->engine->add_request(request_id, ids, p);
    if (!status.ok()) {
      for (int64_t id : added) impl_->engine->abort_request(id);
      while (impl_->engine->has_unfinished_requests()) impl_->engine->step();
      return Error{"prompt " + std::to_string(i) + ": " + status.error().message};
    }
    added.push_back(request_id);
    stream->prompt_index[request_id] = i;
    GenerationResult& result = stream->results[i];
    result.prompt_token_ids = std::move(ids);
    result.outputs.resize(static_cast<size_t>(p.n));
    for (int32_t k = 0; k < p.n; ++k) result.outputs[static_cast<size_t>(k)].index = k;
  }
  if (show_progress.value_or(impl_->config.show_progress) && prompts.size() > 1) {
    stream->progress.emplace("generating", prompts.size(), "prompts");
  }
  return Stream(std::move(stream));
}

Result<std::vector<GenerationResult>> LLM::generate(const std::vector<Prompt>& prompts,
                                                    const std::vector<SamplingParams>& params,
                                                    std::optional<bool> show_progress) {
  auto stream = this->stream(prompts, params, show_progress);
  if (!stream.ok()) return stream.error();
  while (stream->next()) {
  }
  return std::move(stream->impl_->results);
}

LLM::Stream::Stream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LLM::Stream::~Stream() {
  if (!impl_) return;
  // A stream dropped early cancels its unfinished prompts so the engine is clean for the next.
  EngineCore& engine = *impl_->owner->engine;
  for (const auto& [request_id, index] : impl_->prompt_index) engine.abort_request(request_id);
  while (engine.has_unfinished_requests()) engine.step();
}
LLM::Stream::Stream(Stream&&) noexcept = default;
LLM::Stream& LLM::Stream::operator=(Stream&&) noexcept = default;

const std::vector<GenerationResult>& LLM::Stream::results() const { return impl_->results; }

std::optional<StreamEvent> LLM::Stream::next() {
  EngineCore& engine = *impl_->owner->engine;
  while (impl_->events.empty() && engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) impl_->absorb(out);
  }
  if (impl_->events.empty()) {
    if (impl_->progress) impl_->progress->finish();
    return std::nullopt;
  }
  StreamEvent event = std::move(impl_->events.front());
  impl_->events.pop_front();
  return event;
}

}  // namespace deepinfer
