// The workers' internal token-level API, between `deepinfer router` and `deepinfer serve`: the
// router renders and tokenises a request once and POSTs its token ids and sampling parameters
// (a Submission) to a worker's kTokenApiPath; the worker answers with its engine's events as
// they come, one JSON object a line (NDJSON, chunked), and the router's own generation route
// turns them into the API's response. The lines carry every field of RequestOutput (token ids,
// text, logprobs, finish reasons, cached tokens), doubles in nlohmann's shortest round-trip form,
// so the router's response equals the worker's to the byte. A refused request gets a plain JSON
// answer: 429 (overloaded) or 503 with {"error": message}.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/result.h"
#include "server/generation_backend.h"
#include "server/server_context.h"

namespace deepinfer::server {

inline constexpr std::string_view kTokenApiPath = "/internal/v1/generate";

nlohmann::json sampling_params_to_json(const SamplingParams& params);
// Every field is optional (the default when absent); a wrong type is an error naming the field.
Result<SamplingParams> sampling_params_from_wire(const nlohmann::json& json);

std::string_view kv_transfer_mode_name(KvTransferMode mode);
// "push" or "store"; anything else is an error naming both.
Result<KvTransferMode> parse_kv_transfer_mode(std::string_view name);

// Submission without its channel (and without its resolved `prefilled`).
nlohmann::json submission_to_json(const Submission& submission);
Result<Submission> submission_from_json(const nlohmann::json& json);

nlohmann::json event_to_json(const EngineEvent& event);
Result<EngineEvent> event_from_json(const nlohmann::json& json);

// POST kTokenApiPath on a worker: validates the body, submits it to context.worker and streams
// its events. A router that hangs up aborts the request (its KV freed at once), as a client of
// the public API does. Returns false: the connection closes after it.
boost::asio::awaitable<bool> handle_token_generation(TcpStream& stream, const HttpRequest& request,
                                                     ServerContext& context);

}  // namespace deepinfer::server
