// `deepinfer bench serve`: loads a running server the way vLLM's benchmark_serving does: for each
// concurrency level, N streaming /v1/completions requests of random token-id prompts with a fixed
// output length, then request throughput, output tokens/s, TTFT and inter-token latency
// percentiles. Only loopback or given URLs are contacted.
#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "core/percentile.h"
#include "session.h"

namespace deepinfer::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

constexpr const char* kUsage = R"(usage: deepinfer bench serve --url http://HOST:PORT [--concurrency 1,4,16] [--num-prompts N]
                             [--input-tokens N] [--output-tokens N] [--model NAME] [--seed S]
                             [--json FILE] [--label TEXT]
For each concurrency level, sends --num-prompts (default 4 x concurrency, at least 8) streaming
/v1/completions requests, each a random token-id prompt of --input-tokens (default 128) asking
for exactly --output-tokens (default 64; ignore_eos), keeping that many in flight. Prints one
row per level: requests/s, output tokens/s, time to first token and inter-token latency
(p50/p90/p99, ms), and the number of failed requests. --json FILE also writes each level as one
line of JSON (the figures, the request shape and --label, e.g. the machine and model), the form
docs/bench/ keeps and `make plots` charts.
)";

struct RequestResult {
  bool ok = false;
  double ttft_s = 0.0;
  double e2e_s = 0.0;
  int64_t output_tokens = 0;
  std::vector<double> itl_s;
};

struct Percentiles {
  double p50, p90, p99;
  nlohmann::ordered_json to_json() const { return {{"p50", p50}, {"p90", p90}, {"p99", p99}}; }
};

Percentiles percentiles(const std::vector<double>& values) {
  return {percentile(values, 50), percentile(values, 90), percentile(values, 99)};
}

struct Target {
  std::string host;
  std::string port;
  std::string model;
};

// One streaming request; token arrival times come from SSE frames as they are read.
asio::awaitable<RequestResult> one_request(const Target& target, std::string body) {
  RequestResult result;
  auto executor = co_await asio::this_coro::executor;
  tcp::resolver resolver(executor);
  auto [resolve_error, endpoints] = co_await resolver.async_resolve(target.host, target.port, kTuple);
  if (resolve_error) co_return result;
  beast::tcp_stream stream(executor);
  auto [connect_error, endpoint] = co_await stream.async_connect(endpoints, kTuple);
  if (connect_error) co_return result;
  http::request<http::string_body> request{http::verb::post, "/v1/completions", 11};
  request.set(http::field::host, target.host);
  request.set(http::field::content_type, "application/json");
  request.body() = std::move(body);
  request.prepare_payload();
  const auto start = Clock::now();
  auto [write_error, written] = co_await http::async_write(stream, request, kTuple);
  if (write_error) co_return result;
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  auto [header_error, header_bytes] = co_await http::async_read_header(stream, buffer, parser, kTuple);
  if (header_error || parser.get().result() != http::status::ok) co_return result;
  std::string pending;
  char chunk[8192];
  auto last = start;
  int64_t frames = 0;
  int64_t usage_tokens = -1;
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    // read_some returns as soon as body bytes arrive (read would wait for the buffer to fill).
    auto [read_error, n] = co_await http::async_read_some(stream, buffer, parser, kTuple);
    if (read_error && read_error != http::error::need_buffer) co_return result;
    pending.append(chunk, sizeof(chunk) - parser.get().body().size);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos; pending.erase(0, end + 2)) {
      const std::string frame = pending.substr(0, end);
      if (!frame.starts_with("data: ") || frame == "data: [DONE]") continue;
      const auto json = nlohmann::json::parse(frame.substr(6), nullptr, false);
      if (json.is_discarded()) continue;
      if (json.contains("usage") && json["usage"].is_object()) {
        usage_tokens = json["usage"].value("completion_tokens", int64_t{-1});
      }
      if (!json.contains("choices") || json["choices"].empty()) continue;
      const auto now = Clock::now();
      if (frames == 0) result.ttft_s = std::chrono::duration<double>(now - start).count();
      else result.itl_s.push_back(std::chrono::duration<double>(now - last).count());
      last = now;
      ++frames;
    }
  }
  result.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
  result.output_tokens = usage_tokens >= 0 ? usage_tokens : frames;
  result.ok = frames > 0;
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return result;
}

// One of the concurrent clients: takes the next request when its previous one ended (all
// clients run on one thread, so `next` needs no lock).
asio::awaitable<void> client_loop(const Target& target, const std::vector<std::string>& bodies,
                                  std::vector<RequestResult>& results, size_t& next) {
  while (next < bodies.size()) {
    const size_t i = next++;
    results[i] = co_await one_request(target, bodies[i]);
  }
}

std::string request_body(const Target& target, int64_t input_tokens, int64_t output_tokens, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> token(100, 5000);
  std::vector<int32_t> prompt(static_cast<size_t>(input_tokens));
  for (int32_t& id : prompt) id = token(rng);
  const nlohmann::json body = {{"model", target.model},           {"prompt", prompt},
                               {"max_tokens", output_tokens},     {"ignore_eos", true},
                               {"stream", true},                  {"temperature", 0.0},
                               {"stream_options", {{"include_usage", true}}}};
  return body.dump();
}

Result<Target> parse_url(const std::string& url) {
  const std::string prefix = "http://";
  if (!url.starts_with(prefix)) return Error{"--url must look like http://HOST:PORT, got '" + url + "'"};
  std::string rest = url.substr(prefix.size());
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return Target{rest, "80", ""};
  return Target{rest.substr(0, colon), rest.substr(colon + 1), ""};
}

// The served model's name from GET /v1/models.
Result<std::string> served_model(const Target& target) {
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  beast::error_code error;
  const auto endpoints = resolver.resolve(target.host, target.port, error);
  if (!error) stream.connect(endpoints, error);
  if (error) return Error{"cannot reach " + target.host + ":" + target.port + ": " + error.message()};
  http::request<http::empty_body> request{http::verb::get, "/v1/models", 11};
  request.set(http::field::host, target.host);
  http::write(stream, request, error);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  if (!error) http::read(stream, buffer, response, error);
  if (error) return Error{"GET /v1/models failed: " + error.message()};
  const auto json = nlohmann::json::parse(response.body(), nullptr, false);
  if (json.is_discarded() || !json.contains("data") || json["data"].empty()) {
    return Error{"GET /v1/models answered no model: " + response.body()};
  }
  return json["data"][0].value("id", std::string());
}

}  // namespace

int run_bench_serve(int argc, char** argv) {
  if (wants_help(argc, argv, kUsage)) return 0;
  auto args = Args::parse(argc, argv, {"--url", "--concurrency", "--num-prompts", "--input-tokens", "--output-tokens",
                                       "--model", "--seed", "--json", "--label"},
                          {});
  if (!args.ok()) return report_error("bench serve", args.error());
  auto url = args->get_string("--url");
  if (!url.ok()) return report_error("bench serve", url.error());
  auto target = parse_url(*url);
  if (!target.ok()) return report_error("bench serve", target.error());
  std::vector<int32_t> levels = {1, 4, 16};
  if (args->has("--concurrency")) {
    auto parsed = args->get_int_list("--concurrency");
    if (!parsed.ok()) return report_error("bench serve", parsed.error());
    levels = *parsed;
  }
  auto num_prompts = args->get_int("--num-prompts", 0);
  auto input_tokens = args->get_int("--input-tokens", 128);
  auto output_tokens = args->get_int("--output-tokens", 64);
  auto seed = args->get_int("--seed", 0);
  for (const auto* value : {&num_prompts, &input_tokens, &output_tokens, &seed}) {
    if (!value->ok()) return report_error("bench serve", value->error());
  }
  if (*input_tokens < 1 || *output_tokens < 1) {
    return report_error("bench serve", Error{"--input-tokens and --output-tokens must be >= 1"});
  }
  if (args->has("--model")) {
    target->model = *args->find("--model");
  } else {
    auto model = served_model(*target);
    if (!model.ok()) return report_error("bench serve", model.error());
    target->model = *model;
  }
  std::ofstream json_file;
  if (const auto path = args->find("--json")) {
    json_file.open(*path);
    if (!json_file) return report_error("bench serve", Error{"cannot write --json " + *path});
  }
  std::mt19937 rng(static_cast<uint32_t>(*seed));
  std::printf("bench serve: %s, model '%s', %lld input tokens, %lld output tokens per request\n", url->c_str(),
              target->model.c_str(), static_cast<long long>(*input_tokens), static_cast<long long>(*output_tokens));
  std::printf("| concurrency | requests | failed | req/s | output tok/s | TTFT p50/p90/p99 ms | ITL p50/p90/p99 ms |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int32_t concurrency : levels) {
    if (concurrency < 1) return report_error("bench serve", Error{"--concurrency levels must be >= 1"});
    const int64_t total = *num_prompts > 0 ? *num_prompts : std::max<int64_t>(8, 4 * int64_t{concurrency});
    std::vector<std::string> bodies;
    for (int64_t i = 0; i < total; ++i) bodies.push_back(request_body(*target, *input_tokens, *output_tokens, rng));
    std::vector<RequestResult> results(static_cast<size_t>(total));
    asio::io_context io;
    size_t next = 0;
    const auto start = Clock::now();
    // `concurrency` workers, each taking the next request when its previous one ends.
    for (int32_t w = 0; w < concurrency; ++w) {
      asio::co_spawn(io, client_loop(*target, bodies, results, next), asio::detached);
    }
    io.run();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<double> ttft, itl;
    int64_t generated = 0, failed = 0;
    for (const RequestResult& r : results) {
      if (!r.ok) {
        ++failed;
        continue;
      }
      ttft.push_back(r.ttft_s * 1e3);
      for (double s : r.itl_s) itl.push_back(s * 1e3);
      generated += r.output_tokens;
    }
    const double requests_per_s = static_cast<double>(total - failed) / seconds;
    const double output_tok_s = static_cast<double>(generated) / seconds;
    const Percentiles ttft_ms = percentiles(ttft), itl_ms = percentiles(itl);
    std::printf("| %d | %lld | %lld | %.2f | %.1f | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f |\n", concurrency,
                static_cast<long long>(total), static_cast<long long>(failed), requests_per_s, output_tok_s,
                ttft_ms.p50, ttft_ms.p90, ttft_ms.p99, itl_ms.p50, itl_ms.p90, itl_ms.p99);
    std::fflush(stdout);
    if (json_file.is_open()) {
      const nlohmann::ordered_json line = {{"kind", "serve"},
                                           {"label", args->find("--label").value_or("")},
                                           {"model", target->model},
                                           {"concurrency", concurrency},
                                           {"input_tokens", *input_tokens},
                                           {"output_tokens", *output_tokens},
                                           {"requests", total},
                                           {"failed", failed},
                                           {"seconds", seconds},
                                           {"requests_per_s", requests_per_s},
                                           {"output_tok_s", output_tok_s},
                                           {"ttft_ms", ttft_ms.to_json()},
                                           {"itl_ms", itl_ms.to_json()}};
      if (!(json_file << line.dump() << '\n' << std::flush)) {
        return report_error("bench serve", Error{"cannot write --json " + *args->find("--json")});
      }
    }
  }
  return 0;
}

}  // namespace deepinfer::cli
