// The token-level API's wire format and the worker's route for it.
#include "server/token_api.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <future>
#include <utility>

#include "core/base64.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "server/encode_api.h"
#include "server/kv_transport.h"
#include "server/prefilled_inbox.h"
#include "server/running_request.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
using Json = nlohmann::json;

// Reads json[key] into out when present; a wrong type throws json::type_error, which the callers
// turn into an error naming the field.
template <typename T>
void read(const Json& json, const char* key, T& out) {
  if (auto it = json.find(key); it != json.end() && !it->is_null()) out = it->get<T>();
}

template <typename T>
void read_optional(const Json& json, const char* key, std::optional<T>& out) {
  if (auto it = json.find(key); it != json.end() && !it->is_null()) out = it->get<T>();
}

Json token_logprob_to_json(const TokenLogprob& logprob) {
  return Json{{"id", logprob.token_id}, {"logprob", logprob.logprob}, {"top", logprob.top}};
}

TokenLogprob token_logprob_from_json(const Json& json) {
  TokenLogprob logprob;
  logprob.token_id = json.at("id").get<int32_t>();
  logprob.logprob = json.at("logprob").get<double>();
  read(json, "top", logprob.top);
  return logprob;
}

// Runs a parser over untrusted JSON: a missing field or a wrong type becomes an Error naming it.
template <typename T, typename Parse>
Result<T> parse_wire(const char* what, Parse parse) {
  try {
    return parse();
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("bad ") + what + ": " + e.what()};
  }
}

}  // namespace

Json sampling_params_to_json(const SamplingParams& p) {
  Json json{{"n", p.n},
            {"temperature", p.temperature},
            {"top_p", p.top_p},
            {"top_k", p.top_k},
            {"min_p", p.min_p},
            {"presence_penalty", p.presence_penalty},
            {"frequency_penalty", p.frequency_penalty},
            {"repetition_penalty", p.repetition_penalty},
            {"stop", p.stop},
            {"stop_token_ids", p.stop_token_ids},
            {"include_stop_str_in_output", p.include_stop_str_in_output},
            {"ignore_eos", p.ignore_eos},
            {"max_tokens", p.max_tokens},
            {"min_tokens", p.min_tokens},
            {"skip_special_tokens", p.skip_special_tokens}};
  if (p.seed) json["seed"] = *p.seed;
  if (p.logprobs) json["logprobs"] = *p.logprobs;
  if (p.prompt_logprobs) json["prompt_logprobs"] = *p.prompt_logprobs;
  if (!p.logit_bias.empty()) {
    Json bias = Json::array();
    for (const auto& [token, value] : p.logit_bias) bias.push_back(Json::array({token, value}));
    json["logit_bias"] = std::move(bias);
  }
  if (p.structured_output) {
    const StructuredOutputParams& s = *p.structured_output;
    json["structured_output"] = Json{{"kind", static_cast<int>(s.kind)},
                                     {"spec", s.spec},
                                     {"choices", s.choices},
                                     {"strict", s.strict},
                                     {"max_whitespace", s.max_whitespace}};
  }
  return json;
}

Result<SamplingParams> sampling_params_from_wire(const Json& json) {
  return parse_wire<SamplingParams>("sampling parameters", [&] {
    SamplingParams p;
    read(json, "n", p.n);
    read(json, "temperature", p.temperature);
    read(json, "top_p", p.top_p);
    read(json, "top_k", p.top_k);
    read(json, "min_p", p.min_p);
    read_optional(json, "seed", p.seed);
    read(json, "presence_penalty", p.presence_penalty);
    read(json, "frequency_penalty", p.frequency_penalty);
    read(json, "repetition_penalty", p.repetition_penalty);
    if (auto it = json.find("logit_bias"); it != json.end()) {
      for (const Json& pair : *it) p.logit_bias[pair.at(0).get<int32_t>()] = pair.at(1).get<float>();
    }
    read(json, "stop", p.stop);
    read(json, "stop_token_ids", p.stop_token_ids);
    read(json, "include_stop_str_in_output", p.include_stop_str_in_output);
    read(json, "ignore_eos", p.ignore_eos);
    read(json, "max_tokens", p.max_tokens);
    read(json, "min_tokens", p.min_tokens);
    read_optional(json, "logprobs", p.logprobs);
    read_optional(json, "prompt_logprobs", p.prompt_logprobs);
    read(json, "skip_special_tokens", p.skip_special_tokens);
    if (auto it = json.find("structured_output"); it != json.end()) {
      StructuredOutputParams s;
      const int kind = it->at("kind").get<int>();
      if (kind < 0 || kind > static_cast<int>(StructuredOutputParams::Kind::kStructural)) {
        throw nlohmann::json::other_error::create(501, "structured_output.kind out of range", &*it);
      }
      s.kind = static_cast<StructuredOutputParams::Kind>(kind);
      read(*it, "spec", s.spec);
      read(*it, "choices", s.choices);
      read(*it, "strict", s.strict);
      read(*it, "max_whitespace", s.max_whitespace);
      p.structured_output = std::move(s);
    }
    return p;
  });
}

Json submission_to_json(const Submission& submission) {
  Json json{{"prompt_token_ids", submission.prompt_token_ids},
            {"sampling", sampling_params_to_json(submission.params)},
            {"priority", submission.priority},
            {"cache_salt", submission.cache_salt},
            {"kv_cache_class", static_cast<int>(submission.kv_cache_class)}};
  if (const std::optional<KvHandoff>& handoff = submission.kv_handoff) {
    json["kv_handoff"] = Json{{"mode", kv_transfer_mode_name(handoff->mode)},
                              {"transfer_id", handoff->transfer_id},
                              {"host", handoff->host},
                              {"port", handoff->port}};
  }
  if (const std::optional<PrefilledSource>& source = submission.continues) {
    json["prefilled"] = Json{{"mode", kv_transfer_mode_name(source->mode)},
                             {"transfer_id", source->transfer_id},
                             {"first_token", source->first_token},
                             {"kv_lost", source->kv_lost}};
  }
  if (!submission.images.empty()) {
    Json images = Json::array();
    for (const ImageInput& image : submission.images) {
      Json relayed = image.rows.empty() ? Json{{"file", encode_base64(image.file)}} : encoded_image_to_json(image);
      relayed["first_token"] = image.first_token;
      images.push_back(std::move(relayed));
    }
    json["images"] = std::move(images);
  }
  return json;
}

std::string_view kv_transfer_mode_name(KvTransferMode mode) { return mode == KvTransferMode::kPush ? "push" : "store"; }

Result<KvTransferMode> parse_kv_transfer_mode(std::string_view name) {
  if (name == "push") return KvTransferMode::kPush;
  if (name == "store") return KvTransferMode::kStore;
  return Error{"the KV transfer mode must be push or store, got '" + std::string(name) + "'"};
}

Result<Submission> submission_from_json(const Json& json) {
  Submission submission;
  auto fields = parse_wire<bool>("request", [&] {
    submission.prompt_token_ids = json.at("prompt_token_ids").get<std::vector<int32_t>>();
    read(json, "priority", submission.priority);
    read(json, "cache_salt", submission.cache_salt);
    int traffic_class = 0;
    read(json, "kv_cache_class", traffic_class);
    if (traffic_class < 0 || traffic_class >= kNumTrafficClasses) {
      throw nlohmann::json::other_error::create(501, "kv_cache_class out of range", &json);
    }
    submission.kv_cache_class = static_cast<TrafficClass>(traffic_class);
    return true;
  });
  if (!fields.ok()) return fields.error();
  auto modes = parse_wire<bool>("request", [&] {
    if (auto it = json.find("kv_handoff"); it != json.end()) {
      KvHandoff handoff;
      Result<KvTransferMode> mode = parse_kv_transfer_mode(it->at("mode").get<std::string>());
      if (!mode.ok()) throw nlohmann::json::other_error::create(501, "kv_handoff." + mode.error().message, &*it);
      handoff.mode = *mode;
      read(*it, "transfer_id", handoff.transfer_id);
      read(*it, "host", handoff.host);
      read(*it, "port", handoff.port);
      submission.kv_handoff = std::move(handoff);
    }
    if (auto it = json.find("prefilled"); it != json.end()) {
      PrefilledSource source;
      Result<KvTransferMode> mode = parse_kv_transfer_mode(it->at("mode").get<std::string>());
      if (!mode.ok()) throw nlohmann::json::other_error::create(501, "prefilled." + mode.error().message, &*it);
      source.mode = *mode;
      read(*it, "transfer_id", source.transfer_id);
      source.first_token = it->at("first_token").get<int32_t>();
      read(*it, "kv_lost", source.kv_lost);
      submission.continues = std::move(source);
    }
    return true;
  });
  if (!modes.ok()) return modes.error();
  auto images = parse_wire<bool>("request", [&] {
    if (auto it = json.find("images"); it != json.end()) {
      for (const Json& image : *it) {
        ImageInput input;
        if (image.contains("rows")) {
          Result<ImageInput> encoded = encoded_image_from_json(image);
          if (!encoded.ok())
            throw nlohmann::json::other_error::create(501, "images: " + encoded.error().message, &image);
          input = std::move(*encoded);
        } else {
          Result<std::vector<uint8_t>> file = try_decode_base64(image.at("file").get<std::string>());
          if (!file.ok()) throw nlohmann::json::other_error::create(501, "images: " + file.error().message, &image);
          input.file = std::move(*file);
        }
        input.first_token = image.at("first_token").get<int32_t>();
        submission.images.push_back(std::move(input));
      }
    }
    return true;
  });
  if (!images.ok()) return images.error();
  auto it = json.find("sampling");
  if (it == json.end() || !it->is_object()) return Error{"bad request: 'sampling' must be an object"};
  auto params = sampling_params_from_wire(*it);
  if (!params.ok()) return params.error();
  submission.params = std::move(*params);
  return submission;
}

Json event_to_json(const EngineEvent& event) {
  const RequestOutput& output = event.output;
  Json samples = Json::array();
  for (const SampleOutput& sample : output.samples) {
    Json logprobs = Json::array();
    for (const TokenLogprob& logprob : sample.new_logprobs) logprobs.push_back(token_logprob_to_json(logprob));
    samples.push_back(Json{{"index", sample.index},
                           {"token_ids", sample.new_token_ids},
                           {"text", sample.new_text},
                           {"logprobs", std::move(logprobs)},
                           {"finished", sample.finished},
                           {"finish_reason", static_cast<int>(sample.finish_reason)},
                           {"stop_reason", sample.stop_reason},
                           {"draft_tokens", sample.num_draft_tokens},
                           {"accepted_draft_tokens", sample.num_accepted_draft_tokens}});
  }
  Json json{{"samples", std::move(samples)},
            {"num_prompt_tokens", output.num_prompt_tokens},
            {"num_cached_tokens", output.num_cached_tokens},
            {"finished", output.finished}};
  if (output.prompt_logprobs) {
    Json prompt = Json::array();
    for (const auto& logprob : *output.prompt_logprobs) {
      prompt.push_back(logprob ? token_logprob_to_json(*logprob) : Json());
    }
    json["prompt_logprobs"] = std::move(prompt);
  }
  if (output.error) json["request_error"] = output.error->message;
  if (output.failure) json["step_failure"] = output.failure->message;
  if (event.error) {
    json["error"] = event.error->message;
    json["status"] = event.error_status;
  }
  if (event.first_token_seed) json["first_token_seed"] = *event.first_token_seed;
  return json;
}

Result<EngineEvent> event_from_json(const Json& json) {
  return parse_wire<EngineEvent>("worker event", [&] {
    EngineEvent event;
    RequestOutput& output = event.output;
    for (const Json& s : json.at("samples")) {
      SampleOutput sample;
      sample.index = s.at("index").get<int32_t>();
      read(s, "token_ids", sample.new_token_ids);
      read(s, "text", sample.new_text);
      if (auto it = s.find("logprobs"); it != s.end()) {
        for (const Json& logprob : *it) sample.new_logprobs.push_back(token_logprob_from_json(logprob));
      }
      read(s, "finished", sample.finished);
      int reason = 0;
      read(s, "finish_reason", reason);
      if (reason < 0 || reason > static_cast<int>(FinishReason::kPrefilled)) {
        throw nlohmann::json::other_error::create(501, "finish_reason out of range", &s);
      }
      sample.finish_reason = static_cast<FinishReason>(reason);
      read(s, "stop_reason", sample.stop_reason);
      read(s, "draft_tokens", sample.num_draft_tokens);
      read(s, "accepted_draft_tokens", sample.num_accepted_draft_tokens);
      output.samples.push_back(std::move(sample));
    }
    read(json, "num_prompt_tokens", output.num_prompt_tokens);
    read(json, "num_cached_tokens", output.num_cached_tokens);
    read(json, "finished", output.finished);
    if (auto it = json.find("prompt_logprobs"); it != json.end()) {
      output.prompt_logprobs.emplace();
      for (const Json& logprob : *it) {
        output.prompt_logprobs->push_back(logprob.is_null() ? std::nullopt
                                                            : std::optional(token_logprob_from_json(logprob)));
      }
    }
    if (auto it = json.find("request_error"); it != json.end()) output.error = Error{it->get<std::string>()};
    if (auto it = json.find("step_failure"); it != json.end()) output.failure = Error{it->get<std::string>()};
    if (auto it = json.find("error"); it != json.end()) {
      event.error = Error{it->get<std::string>()};
      event.error_status = json.at("status").get<int>();
    }
    read_optional(json, "first_token_seed", event.first_token_seed);
    return event;
  });
}

namespace {

// Why this worker cannot take a disaggregated request, or nullopt.
std::optional<std::string> refuse_role(const Submission& submission, const ServerContext& context) {
  if (submission.images.size() > static_cast<size_t>(context.model.images.max_images)) {
    return "the request holds " + std::to_string(submission.images.size()) + " images; this worker takes at most " +
           std::to_string(context.model.images.max_images) + " (--max-images-per-request)";
  }
  if (submission.kv_handoff) {
    if (context.kv_transport == nullptr)
      return "this worker does not prefill for decode workers (serve --role prefill)";
    if (submission.kv_handoff->mode == KvTransferMode::kStore && !context.has_kv_store) {
      return "this prefill worker has no persistent KV store for the store transfer mode: start it with "
             "--kv-cache-dir on a shared directory or --kv-cache-backend redis://HOST:PORT";
    }
  }
  if (submission.continues && !submission.continues->kv_lost) {
    if (context.prefilled_inbox == nullptr)
      return "this worker does not decode prefilled requests (serve --role decode)";
    if (submission.continues->mode == KvTransferMode::kStore && !context.has_kv_store) {
      return "this decode worker has no persistent KV store for the store transfer mode: start it with the prefill "
             "workers' --kv-cache-dir or --kv-cache-backend";
    }
  }
  return std::nullopt;
}

// A decode worker's request: the prefilled request it continues, its KV pushed here, or to be
// loaded from the store or computed again (kv_lost).
Result<std::shared_ptr<PrefilledRequest>> resolve_prefilled(const Submission& submission, ServerContext& context) {
  const PrefilledSource& source = *submission.continues;
  auto prefilled = std::make_shared<PrefilledRequest>();
  if (source.mode == KvTransferMode::kPush && !source.kv_lost) {
    std::optional<PrefilledRequest> pushed = context.prefilled_inbox->take(source.transfer_id);
    if (!pushed) {
      return Error{"no KV was pushed to this worker under transfer id '" + source.transfer_id +
                   "' (never sent, or expired)"};
    }
    if (pushed->prompt_token_ids != submission.prompt_token_ids || pushed->first_token != source.first_token) {
      return Error{"the KV pushed under transfer id '" + source.transfer_id + "' is of another prompt"};
    }
    *prefilled = std::move(*pushed);
    // The decode stage's sampling: n > 1 samples fork here (the prefill worker ran sample 0 alone).
    const std::optional<uint64_t> seed = prefilled->params.seed;
    prefilled->params = submission.params;
    if (!prefilled->params.seed) prefilled->params.seed = seed;
  } else {
    prefilled->prompt_token_ids = submission.prompt_token_ids;
    prefilled->params = submission.params;
    prefilled->first_token = source.first_token;
    prefilled->kv_not_carried = true;
  }
  prefilled->first_token_delivered = true;  // the router relayed it from the prefill worker
  return prefilled;
}

// Waits, off the connection's thread, until the store has written the prompt's queued pages.
asio::awaitable<void> wait_pages_written(ServerContext& context, const std::vector<BlockHash>& hashes) {
  if (hashes.empty()) co_return;
  if (context.model.pool == nullptr) {
    context.wait_kv_written(hashes);
    co_return;
  }
  std::future<void> written = context.model.pool->submit([&context, &hashes] { context.wait_kv_written(hashes); });
  asio::steady_timer poll(co_await asio::this_coro::executor);
  while (written.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    poll.expires_after(std::chrono::milliseconds(1));
    co_await poll.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  written.get();
}

// A prefill worker's request whose prefill is done: its KV to where handoff says. The event that
// follows the first token's: the seed it was drawn with, and why the KV did not get there (502).
// push: the push mode's stream, which the engine fed while the prefill ran.
asio::awaitable<EngineEvent> hand_over(const KvHandoff& handoff, const PrefilledRequest& prefilled,
                                       ServerContext& context, KvPush* push) {
  EngineEvent event;
  Result<void> sent;
  if (handoff.mode == KvTransferMode::kPush) {
    sent = co_await push->finish(prefilled.first_token, prefilled.params.seed.value_or(0));
  } else {
    co_await wait_pages_written(context, prefilled.queued_page_hashes);
  }
  event.first_token_seed = prefilled.params.seed.value_or(0);
  if (!sent.ok()) {
    event.error = Error{"the prefill is done but its KV did not reach the decode worker: " + sent.error().message};
    event.error_status = 502;
  }
  co_return event;
}

}  // namespace

asio::awaitable<bool> handle_token_generation(TcpStream& stream, const HttpRequest& request, ServerContext& context) {
  const std::string endpoint(kTokenApiPath);
  const double timeout_s = context.config.write_timeout_s;
  const auto plain = [&](http::status status, const std::string& message) {
    HttpResponse response = make_response(request, status, Json{{"error", message}}.dump());
    response.keep_alive(false);
    return response;
  };
  Json body = Json::parse(request.body(), nullptr, /*allow_exceptions=*/false);
  Result<Submission> submission =
      body.is_object() ? submission_from_json(body) : Result<Submission>(Error{"the body must be a JSON object"});
  if (!submission.ok()) {
    context.metrics->record_request(endpoint, 400);
    HttpResponse response = plain(http::status::bad_request, submission.error().message);
    co_return co_await write_response(stream, std::move(response), timeout_s);
  }
  if (std::optional<std::string> refusal = refuse_role(*submission, context)) {
    context.metrics->record_request(endpoint, 400);
    HttpResponse response = plain(http::status::bad_request, *refusal);
    co_return co_await write_response(stream, std::move(response), timeout_s);
  }
  // The router relays each image's file, decoded and preprocessed here for this worker's model, or
  // an image encoder's rows for it, which the engine takes as they are.
  std::vector<ImageInput> images;
  for (size_t i = 0; i < submission->images.size(); ++i) {
    ImageInput& relayed = submission->images[i];
    if (!relayed.rows.empty()) {
      images.push_back(std::move(relayed));
      continue;
    }
    if (auto error =
            read_image_file(std::move(relayed.file), "", "images[" + std::to_string(i) + "]", context.model, images)) {
      context.metrics->record_request(endpoint, 400);
      HttpResponse response = plain(http::status::bad_request, error->message);
      co_return co_await write_response(stream, std::move(response), timeout_s);
    }
    images.back().first_token = relayed.first_token;
  }
  submission->images = std::move(images);
  if (submission->continues) {
    Result<std::shared_ptr<PrefilledRequest>> prefilled = resolve_prefilled(*submission, context);
    if (!prefilled.ok()) {
      context.metrics->record_request(endpoint, 410);
      HttpResponse response = plain(http::status::gone, prefilled.error().message);
      co_return co_await write_response(stream, std::move(response), timeout_s);
    }
    submission->prefilled = std::move(*prefilled);
  }
  const std::optional<KvHandoff> handoff = submission->kv_handoff;
  // A push goes out while the prefill runs; unless it finishes, it is cancelled on the way out
  // (the request failed, was aborted, or its client left), so the decode worker drops it.
  struct CancelUnfinished {
    std::shared_ptr<KvPush> push;
    ~CancelUnfinished() {
      if (push) push->cancel();
    }
  } push;
  if (handoff && handoff->mode == KvTransferMode::kPush) {
    push.push = context.kv_transport->open(stream.get_executor(), KvPeer{handoff->host, handoff->port},
                                           handoff->transfer_id, submission->prompt_token_ids, submission->params);
    submission->kv_sink = push.push;
  }
  auto channel =
      std::make_shared<OutputChannel>(stream.get_executor(), static_cast<size_t>(context.config.stream_buffer_outputs));
  submission->channel = channel;
  RunningRequest running(stream, context, channel);
  const Admission admission = context.worker->submit(std::move(*submission));
  if (const Refusal* refusal = std::get_if<Refusal>(&admission)) {
    const int status = refusal->overloaded ? 429 : 503;
    context.metrics->record_request(endpoint, status);
    HttpResponse response = plain(static_cast<http::status>(status), refusal->message);
    co_return co_await write_response(stream, std::move(response), timeout_s);
  }
  running.set_id(std::get<int64_t>(admission));

  http::response<http::empty_body> head{http::status::ok, request.version()};
  head.set(http::field::server, "deepinfer");
  head.set(http::field::content_type, "application/x-ndjson");
  head.keep_alive(false);
  head.chunked(true);
  http::response_serializer<http::empty_body> serializer{head};
  const auto write_timeout =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  stream.expires_after(write_timeout);
  auto [head_error, head_bytes] =
      co_await http::async_write_header(stream, serializer, asio::as_tuple(asio::use_awaitable));
  if (head_error) {
    running.abort();
    co_return false;
  }
  context.metrics->record_request(endpoint, 200);
  EngineEvent event;
  for (;;) {
    const Wait wait = co_await running.next(event);
    if (wait == Wait::kDisconnected || wait == Wait::kDropped) {
      running.abort();
      co_return false;
    }
    bool last = false;
    if (wait == Wait::kTimedOut) {
      running.abort();
      event = EngineEvent{};
      event.error = Error{"the request ran past the worker's limit of " +
                          std::to_string(context.config.request_timeout_s) + " s (--request-timeout)"};
      event.error_status = 408;
      last = true;
    }
    last = last || event.error.has_value() || event.output.finished;
    const std::shared_ptr<const PrefilledRequest> prefilled = std::move(event.prefilled);
    // The first token's line names its seed too: should this worker fail before its last line, the
    // router still continues the request elsewhere with the same draws.
    if (prefilled && handoff) event.first_token_seed = prefilled->params.seed.value_or(0);
    std::string line = event_to_json(event).dump() + "\n";
    if (prefilled && handoff) {
      // The first token goes out before the KV moves, so the router relays it at once.
      stream.expires_after(write_timeout);
      auto [first_error, first_written] =
          co_await asio::async_write(stream, http::make_chunk(asio::buffer(line)), asio::as_tuple(asio::use_awaitable));
      if (first_error) co_return false;
      const std::shared_ptr<KvPush> finishing = std::exchange(push.push, nullptr);
      const EngineEvent handed = co_await hand_over(*handoff, *prefilled, context, finishing.get());
      line = event_to_json(handed).dump() + "\n";
    }
    stream.expires_after(write_timeout);
    auto [write_error, written] =
        co_await asio::async_write(stream, http::make_chunk(asio::buffer(line)), asio::as_tuple(asio::use_awaitable));
    if (write_error) {
      running.abort();
      co_return false;
    }
    if (last) break;
  }
  stream.expires_after(write_timeout);
  co_await asio::async_write(stream, http::make_chunk_last(), asio::as_tuple(asio::use_awaitable));
  stream.expires_never();
  co_return false;
}

}  // namespace deepinfer::server
