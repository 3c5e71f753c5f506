// deepinfer._core.Engine: one deepinfer::LLM that any Python thread may call (one call runs at a
// time), and Stream: one request's deltas. Engine work runs with the GIL released; a running
// generate looks at Python's signals every few milliseconds, so Ctrl-C aborts its requests and
// raises KeyboardInterrupt with the engine idle and reusable.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "bindings.h"
#include "deepinfer/llm.h"

namespace deepinfer::python {
namespace {

using PromptInput = std::variant<std::string, std::vector<int32_t>>;
using Clock = std::chrono::steady_clock;

// How often a thread running or waiting for the engine looks at Python's signals (Ctrl-C).
constexpr auto kSignalCheckInterval = std::chrono::milliseconds(20);

// The LLM and the lock that lets one caller use it at a time (deepinfer::LLM is not thread-safe).
// Shared with open streams, so a stream that outlives its Engine object stays valid.
struct EngineState {
  std::unique_ptr<LLM> llm;
  std::timed_mutex mutex;
  std::atomic<std::thread::id> holder;  // the thread holding mutex; a re-entry would deadlock
};

// Raises KeyboardInterrupt (or whatever a signal handler raised) when a signal is pending. Needs
// the GIL.
void raise_pending_signals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// Holds EngineState's lock. Taken with the GIL released: it waits in short slices so that Ctrl-C
// still interrupts a thread queued behind another thread's long generate.
class EngineLock {
 public:
  explicit EngineLock(std::shared_ptr<EngineState> state) : state_(std::move(state)) {
    while (!state_->mutex.try_lock_for(kSignalCheckInterval)) {
      py::gil_scoped_acquire acquire;
      raise_pending_signals();
    }
    state_->holder = std::this_thread::get_id();
  }
  EngineLock(const EngineLock&) = delete;
  EngineLock& operator=(const EngineLock&) = delete;
  ~EngineLock() {
    state_->holder = std::thread::id();
    state_->mutex.unlock();
  }

 private:
  std::shared_ptr<EngineState> state_;
};

// Called with the GIL held, before waiting for the lock: a thread that holds it through an open
// stream would wait for itself forever.
void refuse_reentry(const EngineState& state) {
  if (state.holder.load() == std::this_thread::get_id()) {
    throw std::runtime_error("this thread has an open stream on this LLM: finish or close it first");
  }
}

std::vector<Prompt> to_prompts(const std::vector<PromptInput>& inputs) {
  std::vector<Prompt> prompts(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (const auto* text = std::get_if<std::string>(&inputs[i])) {
      prompts[i].text = *text;
    } else {
      prompts[i].token_ids = std::get<std::vector<int32_t>>(inputs[i]);
      if (prompts[i].token_ids.empty()) throw py::value_error("prompt " + std::to_string(i) + ": no token ids");
    }
  }
  return prompts;
}

std::vector<SamplingParams> to_params(const std::vector<std::string>& fields, int64_t vocab_size) {
  std::vector<SamplingParams> params;
  params.reserve(fields.size());
  for (const std::string& json : fields) params.push_back(parse_sampling_params(json, vocab_size, false));
  return params;
}

// New tokens of one sample of a stream, with their logprobs when asked.
struct StreamDelta {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<double> logprobs;
  std::vector<std::vector<TopLogprob>> top_logprobs;
  bool finished = false;
  std::string finish_reason;
  std::string stop_reason;
};

// One request's stream. Holds the engine's lock from open to close (or exhaustion), so other
// threads' calls wait for it.
class Stream {
 public:
  Stream(std::shared_ptr<EngineState> state, const PromptInput& prompt, const std::string& params_json)
      : state_(std::move(state)) {
    const std::vector<Prompt> prompts = to_prompts({prompt});
    const std::vector<SamplingParams> params = to_params({params_json}, state_->llm->vocab_size());
    refuse_reentry(*state_);
    py::gil_scoped_release release;
    lock_.emplace(state_);
    auto stream = state_->llm->stream(prompts, params, /*show_progress=*/false);
    if (!stream.ok()) {
      lock_.reset();
      throw py::value_error(stream.error().message);
    }
    stream_.emplace(std::move(*stream));
    prompt_token_ids_ = stream_->results()[0].prompt_token_ids;
    num_emitted_tokens_.assign(static_cast<size_t>(params[0].n), 0);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      close();
    } else {
      close();
    }
  }

  // The next delta of any sample, or nullopt once every sample finished (the engine is then
  // released). Not thread-safe: one Python thread iterates a stream.
  std::optional<StreamDelta> next() {
    if (!stream_) return std::nullopt;
    std::optional<StreamEvent> event;
    {
      py::gil_scoped_release release;
      event = stream_->next();
      if (!event) close();
    }
    if (!event) return std::nullopt;
    if (!event->error.empty()) throw py::value_error(event->error);
    const GenerationResult& result = stream_->results()[0];
    num_cached_tokens_ = result.num_cached_tokens;
    const SampleResult& sample = result.outputs.at(static_cast<size_t>(event->sample_index));
    size_t& emitted = num_emitted_tokens_.at(static_cast<size_t>(event->sample_index));
    StreamDelta delta{event->sample_index,
                      event->new_token_ids,
                      event->new_text,
                      {},
                      {},
                      event->finished,
                      event->finish_reason,
                      event->finished ? sample.stop_reason : ""};
    if (!sample.logprobs.empty()) {
      const size_t end = emitted + event->new_token_ids.size();
      delta.logprobs.assign(sample.logprobs.begin() + emitted, sample.logprobs.begin() + end);
      delta.top_logprobs.assign(sample.top_logprobs.begin() + emitted, sample.top_logprobs.begin() + end);
    }
    emitted += event->new_token_ids.size();
    return delta;
  }

  const std::vector<int32_t>& prompt_token_ids() const { return prompt_token_ids_; }
  int32_t num_cached_tokens() const { return num_cached_tokens_; }

  // Aborts what is unfinished and releases the engine. Needs no GIL; idempotent.
  void close() {
    stream_.reset();  // aborts the request and steps the engine until it is idle
    lock_.reset();
  }

 private:
  std::shared_ptr<EngineState> state_;
  std::optional<EngineLock> lock_;
  std::optional<LLM::Stream> stream_;
  std::vector<size_t> num_emitted_tokens_;  // per sample
  std::vector<int32_t> prompt_token_ids_;
  int32_t num_cached_tokens_ = 0;
};

class Engine {
 public:
  explicit Engine(const LLMConfig& config) : state_(std::make_shared<EngineState>()) {
    auto llm = [&] {
      py::gil_scoped_release release;
      return LLM::open(config);
    }();
    if (!llm.ok()) throw py::value_error(llm.error().message);
    state_->llm = std::move(*llm);
  }

  int64_t vocab_size() const { return state_->llm->vocab_size(); }
  bool has_tokenizer() const { return state_->llm->has_tokenizer(); }

  // Runs every prompt to the end. on_prompt_finished(count) is called (with the GIL) as prompts
  // finish; engine_progress draws the engine's own bar instead.
  std::vector<GenerationResult> generate(const std::vector<PromptInput>& inputs,
                                         const std::vector<std::string>& params_json,
                                         const py::object& on_prompt_finished, bool engine_progress) {
    const std::vector<Prompt> prompts = to_prompts(inputs);
    const std::vector<SamplingParams> params = to_params(params_json, vocab_size());
    refuse_reentry(*state_);
    std::vector<GenerationResult> results;
    {
      py::gil_scoped_release release;
      EngineLock lock(state_);
      auto stream = state_->llm->stream(prompts, params, engine_progress);
      if (!stream.ok()) throw py::value_error(stream.error().message);
      std::vector<int32_t> num_unfinished_samples(prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) num_unfinished_samples[i] = params[params.size() == 1 ? 0 : i].n;
      int64_t num_newly_finished = 0;
      Clock::time_point last_check = Clock::now();
      while (auto event = stream->next()) {
        if (event->finished && --num_unfinished_samples[event->prompt_index] == 0) ++num_newly_finished;
        if (num_newly_finished == 0 && Clock::now() - last_check < kSignalCheckInterval) continue;
        last_check = Clock::now();
        // An exception here unwinds through `stream`, whose destructor aborts the unfinished
        // requests and drains the engine (after this scope has given the GIL back).
        py::gil_scoped_acquire acquire;
        raise_pending_signals();
        if (num_newly_finished > 0 && !on_prompt_finished.is_none()) on_prompt_finished(num_newly_finished);
        num_newly_finished = 0;
      }
      results = stream->results();
    }
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].error.empty()) throw py::value_error("prompt " + std::to_string(i) + ": " + results[i].error);
    }
    return results;
  }

  std::unique_ptr<Stream> stream(const PromptInput& prompt, const std::string& params_json) {
    return std::make_unique<Stream>(state_, prompt, params_json);
  }

 private:
  std::shared_ptr<EngineState> state_;
};

LLMConfig make_config(const std::string& model_dir, const std::string& device, int32_t max_num_seqs,
                      int32_t max_num_batched_tokens, int32_t max_model_len, int64_t kv_cache_bytes,
                      double gpu_memory_utilization, bool batch_invariant, bool enable_prefix_caching,
                      int32_t speculative_tokens, const std::string& kv_cache_dtype, bool show_progress) {
  LLMConfig config;
  config.model_dir = model_dir;
  config.device = device;
  config.max_num_seqs = max_num_seqs;
  config.max_num_batched_tokens = max_num_batched_tokens;
  config.max_model_len = max_model_len;
  config.kv_cache_bytes = kv_cache_bytes;
  config.gpu_memory_utilization = gpu_memory_utilization;
  config.batch_invariant = batch_invariant;
  config.enable_prefix_caching = enable_prefix_caching;
  config.speculative_tokens = speculative_tokens;
  config.kv_cache_dtype = kv_cache_dtype;
  // DSpark's confidence-scheduled verification is not batch invariant; the fixed chain is.
  config.spec_varlen = !batch_invariant;
  config.show_progress = show_progress;
  return config;
}

}  // namespace

void bind_engine(py::module_& module) {
  py::class_<TopLogprob>(module, "TopLogprob")
      .def_readonly("token_id", &TopLogprob::token_id)
      .def_readonly("logprob", &TopLogprob::logprob);
  py::class_<SampleResult>(module, "SampleResult")
      .def_readonly("index", &SampleResult::index)
      .def_readonly("token_ids", &SampleResult::token_ids)
      .def_readonly("text", &SampleResult::text)
      .def_readonly("logprobs", &SampleResult::logprobs)
      .def_readonly("top_logprobs", &SampleResult::top_logprobs)
      .def_readonly("finish_reason", &SampleResult::finish_reason)
      .def_readonly("stop_reason", &SampleResult::stop_reason);
  py::class_<GenerationResult>(module, "GenerationResult")
      .def_readonly("prompt_token_ids", &GenerationResult::prompt_token_ids)
      .def_readonly("outputs", &GenerationResult::outputs)
      .def_readonly("num_cached_tokens", &GenerationResult::num_cached_tokens)
      .def_readonly("prompt_logprobs", &GenerationResult::prompt_logprobs)
      .def_readonly("prompt_token_logprobs", &GenerationResult::prompt_token_logprobs);
  py::class_<StreamDelta>(module, "StreamDelta")
      .def_readonly("index", &StreamDelta::index)
      .def_readonly("token_ids", &StreamDelta::token_ids)
      .def_readonly("text", &StreamDelta::text)
      .def_readonly("logprobs", &StreamDelta::logprobs)
      .def_readonly("top_logprobs", &StreamDelta::top_logprobs)
      .def_readonly("finished", &StreamDelta::finished)
      .def_readonly("finish_reason", &StreamDelta::finish_reason)
      .def_readonly("stop_reason", &StreamDelta::stop_reason);
  py::class_<Stream>(module, "Stream")
      .def("next", &Stream::next, "The next delta of any sample, or None at the end (not thread-safe).")
      .def("close", &Stream::close, py::call_guard<py::gil_scoped_release>(),
           "Aborts what is unfinished and releases the engine.")
      .def_property_readonly("prompt_token_ids", &Stream::prompt_token_ids)
      .def_property_readonly("num_cached_tokens", &Stream::num_cached_tokens);
  py::class_<Engine>(module, "Engine")
      .def(py::init([](const std::string& model_dir, const std::string& device, int32_t max_num_seqs,
                       int32_t max_num_batched_tokens, int32_t max_model_len, int64_t kv_cache_bytes,
                       double gpu_memory_utilization, bool batch_invariant, bool enable_prefix_caching,
                       int32_t speculative_tokens, const std::string& kv_cache_dtype, bool show_progress) {
             return std::make_unique<Engine>(make_config(model_dir, device, max_num_seqs, max_num_batched_tokens,
                                                         max_model_len, kv_cache_bytes, gpu_memory_utilization,
                                                         batch_invariant, enable_prefix_caching, speculative_tokens,
                                                         kv_cache_dtype, show_progress));
           }),
           py::arg("model_dir"), py::arg("device"), py::arg("max_num_seqs"), py::arg("max_num_batched_tokens"),
           py::arg("max_model_len"), py::arg("kv_cache_bytes"), py::arg("gpu_memory_utilization"),
           py::arg("batch_invariant"), py::arg("enable_prefix_caching"), py::arg("speculative_tokens"),
           py::arg("kv_cache_dtype"), py::arg("show_progress"))
      .def_property_readonly("vocab_size", &Engine::vocab_size)
      .def_property_readonly("has_tokenizer", &Engine::has_tokenizer)
      .def("generate", &Engine::generate, py::arg("prompts"), py::arg("params_json"), py::arg("on_prompt_finished"),
           py::arg("engine_progress"))
      .def("stream", &Engine::stream, py::arg("prompt"), py::arg("params_json"));
}

}  // namespace deepinfer::python
