// `deepinfer router`: the cluster's entry point. Serves the same HTTP APIs as `deepinfer serve`,
// renders and tokenises each request once, and runs it on a worker registered in Redis
// (`deepinfer serve --register URL`) chosen by a load-balancing policy (docs/cluster.md).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include "cluster/balancer_policy.h"
#include "cluster/seeds_policy.h"
#include "commands.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "server/http_server.h"
#include "server/shutdown.h"
#include "server/token_api.h"
#include "server/worker_pool.h"
#include "server/worker_registry.h"
#include "server/encoder_selector.h"
#include "server/worker_selector.h"
#include "server_flags.h"
#include "session.h"
#include "tokenizer/tokenizer.h"
#include "weights/hf_config.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kDefaultModelDir = "models/default";

constexpr const char* kUsage =
    R"(usage: deepinfer router --redis redis://HOST:PORT [--model DIR] [--host 127.0.0.1] [--port 8000]
                        [--policy seeds|round-robin|least-loaded|prefix-affinity|single]
                        [--served-model-name NAME] [--api-key KEY] [--worker-api-key KEY]
                        [--block-size N] [--max-model-len N] [--max-n N] [--request-timeout S]
                        [--max-body-bytes N] [--shutdown-timeout S] [--io-threads N]
                        [--max-attempts N] [--registry-poll-ms MS] [--kv-transfer push|store] [--ui]
                        [--cost-model FILE.json] [--quota-ms MS] [--window-ms MS] [--group-size N]
                        [--max-image-pixels N] [--max-images-per-request N] [--allow-image-urls]
The cluster's entry point: the same HTTP APIs as `deepinfer serve` (POST /v1/chat/completions,
/v1/completions, /v1/responses, /v1/messages, /tokenize, /detokenize; GET /v1/models, /health,
/metrics). Each request is rendered and tokenised once here (the router loads the model
directory's tokenizer and chat format, not its weights), its prompt's KV block chain hashed once,
and its token ids and sampling parameters sent to a worker's token-level API; the worker's tokens
come back and are turned into the API's response (streams relayed as they come, with back-pressure).
Workers are `deepinfer serve --register redis://HOST:PORT` processes of the same model: the router
lists them in Redis every --registry-poll-ms (default 250), drops a worker whose heartbeat key
expired, and skips one it could not reach until it heartbeats again. A request whose worker fails
before its first token goes to another worker (up to --max-attempts workers, default 3); one that
fails later ends with a 502 (or the API's error event on a stream). No worker: 503 naming the registry.
--policy: the balancer from src/cluster (docs/cluster.md; default seeds: length buckets, quota pull,
least-loaded; its quota and windows from --cost-model, --quota-ms, --window-ms, --group-size as in
lb-sim). Prefill/decode disaggregation: while workers of --role prefill and --role decode are
registered, each request's prompt runs on a prefill worker (the policy's prefill choice) and its
decode on a decode worker (its decode choice); the first token is relayed from the prefill worker,
the rest from the decode worker, as one response. Otherwise --role both workers run whole requests.
--kv-transfer: how the prompt's KV moves: push (default; the prefill worker sends it to the decode
worker's --kv-port over TCP) or store (through the persistent KV store both workers share).
--block-size, --max-model-len: the workers' KV page size and context length. By default both come
from the workers' registry records (the first worker routed to sets them, later ones must agree);
given, every worker must have them. A worker that differs is not routed to (logged, and counted as
refused in /metrics); at start-up such workers are an error. The page size is the unit in which
prompt blocks are hashed; the context length bounds prompt + max_tokens and sets the default
max_tokens (before any worker is listed: the model's own).
--worker-api-key: the key the workers were started with (--api-key on serve), if any.
Images (a Gemma 3 multimodal or Qwen2.5-VL directory): each image part is decoded and placed here
(image URLs fetched here with --allow-image-urls). With image encoders registered (serve --role
encoder on the same model), a request's image files go to the one with the fewest image tokens
outstanding, and the worker gets its rows; without one (or when none takes them, --max-attempts
tried), the files go to the worker, which preprocesses and encodes them.
--max-image-pixels, --max-images-per-request, --allow-image-urls as on serve.
--ui: the web playground at GET / as on `deepinfer serve --ui`; its live figures are the workers'
last reports (requests running and waiting summed, KV use averaged, cached over prompt tokens).
The first line printed is "deepinfer router: listening on http://HOST:PORT".
)";

Result<SeedsPolicyOptions> seeds_options_from_args(const Args& args) {
  SeedsPolicyOptions options;
  auto quota = args.get_double("--quota-ms", options.quota_ms);
  auto window = args.get_double("--window-ms", options.window_ms);
  auto group = args.get_int("--group-size", options.group_size);
  if (!quota.ok()) return quota.error();
  if (!window.ok()) return window.error();
  if (!group.ok()) return group.error();
  if (!(*quota > 0) || !(*window > 0)) return Error{"--quota-ms and --window-ms must be positive"};
  if (*group < 1 || *group > 4096) return Error{"--group-size must be in [1, 4096]"};
  options.quota_ms = *quota;
  options.window_ms = *window;
  options.group_size = static_cast<int32_t>(*group);
  return options;
}

}  // namespace

int run_router(int argc, char** argv) {
  if (wants_help(argc, argv, kUsage)) return 0;
  auto args = Args::parse(argc, argv,
                          server_value_flags({"--redis", "--model", "--policy", "--worker-api-key", "--block-size",
                                              "--max-model-len", "--max-attempts", "--registry-poll-ms", "--cost-model",
                                              "--quota-ms", "--window-ms", "--group-size", "--kv-transfer"}),
                          {"--ui", "--allow-image-urls"});
  if (!args.ok()) return report_error("router", args.error());
  auto config = server_config_from_args(*args);
  if (!config.ok()) return report_error("router", config.error());
  if (!args->has("--redis")) {
    return report_error("router", Error{"--redis redis://HOST:PORT is required: the registry the workers join"});
  }
  server::RegistryOptions registry;
  registry.url = *args->find("--redis");
  auto poll_ms = non_negative_flag(*args, "--registry-poll-ms", registry.poll_interval.count());
  if (!poll_ms.ok()) return report_error("router", poll_ms.error());
  if (*poll_ms < 10 || *poll_ms > 60000)
    return report_error("router", Error{"--registry-poll-ms must be in [10, 60000]"});
  registry.poll_interval = std::chrono::milliseconds(*poll_ms);
  // Given, they are checked against every worker; not given, taken from the workers' records.
  server::WorkerShape pinned;
  if (args->has("--block-size")) {
    auto block_size = non_negative_flag(*args, "--block-size", 0);
    if (!block_size.ok()) return report_error("router", block_size.error());
    if (*block_size < 1 || *block_size > 65536)
      return report_error("router", Error{"--block-size must be in [1, 65536]"});
    pinned.block_size = static_cast<int32_t>(*block_size);
  }
  if (args->has("--max-model-len")) {
    auto max_model_len = non_negative_flag(*args, "--max-model-len", 0);
    if (!max_model_len.ok()) return report_error("router", max_model_len.error());
    if (*max_model_len < 1 || *max_model_len > std::numeric_limits<int32_t>::max())
      return report_error("router", Error{"--max-model-len must be positive"});
    pinned.max_model_len = static_cast<int32_t>(*max_model_len);
  }
  auto kv_transfer = server::parse_kv_transfer_mode(args->find("--kv-transfer").value_or("push"));
  if (!kv_transfer.ok()) return report_error("router", Error{"--kv-transfer: " + kv_transfer.error().message});
  auto max_attempts = non_negative_flag(*args, "--max-attempts", 3);
  if (!max_attempts.ok()) return report_error("router", max_attempts.error());
  if (*max_attempts < 1 || *max_attempts > 64)
    return report_error("router", Error{"--max-attempts must be in [1, 64]"});
  auto max_n = max_n_from_args(*args);
  if (!max_n.ok()) return report_error("router", max_n.error());
  auto images = image_input_from_args(*args);
  if (!images.ok()) return report_error("router", images.error());
  auto seeds = seeds_options_from_args(*args);
  if (!seeds.ok()) return report_error("router", seeds.error());
  CostModel cost_model;
  if (auto path = args->find("--cost-model")) {
    auto loaded = CostModel::from_json_file(*path);
    if (!loaded.ok()) return report_error("router", loaded.error());
    cost_model = *loaded;
  }
  auto policy =
      make_balancer_policy(args->find("--policy").value_or(balancer_policy_names().front()), cost_model, *seeds);
  if (!policy.ok()) return report_error("router", Error{"--policy: " + policy.error().message});

  const std::string model_dir = args->find("--model").value_or(kDefaultModelDir);
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json")) {
    return report_error("router", Error{"the router needs " + model_dir +
                                        "/tokenizer.json (--model DIR: the workers' model directory; its weights "
                                        "are not loaded)"});
  }
  auto model_config = ModelConfig::load(model_dir);
  if (!model_config.ok()) return report_error("router", model_config.error());
  // Images are placed here and preprocessed by the worker that runs them, from the files relayed.
  auto image_format = image_input_format(*model_config);
  if (!image_format.ok()) return report_error("router", image_format.error());
  auto tokenizer = Tokenizer::load(model_dir);
  if (!tokenizer.ok()) return report_error("router", tokenizer.error());
  if (auto reachable = server::check_registry(registry); !reachable.ok()) {
    return report_error("router", Error{"--redis: " + reachable.error().message});
  }

  server::ShutdownDeadline shutdown(config->shutdown_timeout_s);
  ThreadPool encode_pool(2);
  server::Metrics metrics;
  server::ServerContext context;
  context.config = *config;
  context.model.served_name = served_model_name(*args, model_dir);
  context.model.tokenizer = &*tokenizer;
  context.model.family = chat_family_or_qwen3(model_dir, "router");
  // Until a worker is listed (and no request can be routed) the flag or the model's own length.
  context.model.max_model_len =
      pinned.max_model_len.value_or(static_cast<int32_t>(model_config->max_position_embeddings));
  context.model.vocab_size = static_cast<int32_t>(model_config->vocab_size);
  context.model.pool = &encode_pool;
  context.model.max_n = *max_n;
  context.model.images = *images;
  context.model.images.preprocess = false;
  if (*image_format) {
    context.model.image_input = &**image_format;
  } else {
    context.model.skipped_vision_encoder = skipped_vision_encoder(*model_config);
  }
  context.metrics = &metrics;
  context.shutdown = &shutdown;
  context.started_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();

  server::WorkerSelectorOptions selector_options;
  selector_options.model = context.model.served_name;
  selector_options.pinned = pinned;
  selector_options.cost_model = cost_model;
  server::WorkerSelector selector(std::move(*policy), selector_options);
  server::WorkerPoolOptions pool_options;
  pool_options.kv_transfer = *kv_transfer;
  pool_options.registry_url = registry.url;
  pool_options.worker_api_key = args->find("--worker-api-key");
  pool_options.max_attempts = static_cast<int32_t>(*max_attempts);
  pool_options.request_timeout_s = config->request_timeout_s;
  pool_options.image_format = context.model.image_input;
  pool_options.row_width = model_config->hidden_size;
  server::EncoderSelector encoders(context.model.served_name);
  server::WorkerPool pool(selector, &encoders, &metrics, pool_options);
  context.worker = &pool;
  context.cluster = &selector;
  context.encoders = &encoders;

  server::HttpServer http_server(context);
  auto port = http_server.listen();
  if (!port.ok()) return report_error("router", port.error());
  auto watcher =
      server::RegistryWatcher::start(registry, [&selector, &encoders](const std::vector<server::WorkerRecord>& listed) {
        for (const std::string& line : selector.update(listed)) DI_LOG(kWarn, "router: " << line);
        for (const std::string& line : encoders.update(listed)) DI_LOG(kWarn, "router: " << line);
      });
  if (!watcher.ok()) return report_error("router", Error{"--redis: " + watcher.error().message});
  // Workers listed at start-up that disagree with the flags or with each other stop the router: a
  // cluster set up that way is a mistake to fix now. One that joins later is refused and logged.
  if (const std::vector<std::string> refused = selector.refused(); !refused.empty()) {
    std::string message = "the registered workers do not share one --block-size and --max-model-len:";
    for (const std::string& line : refused) message += "\n  worker " + line;
    return report_error("router", Error{message});
  }
  std::printf("deepinfer router: listening on http://%s:%u (model '%s', policy %s, registry %s, %zu workers)\n",
              config->host.c_str(), static_cast<unsigned>(*port), context.model.served_name.c_str(),
              selector.policy_name().c_str(), registry.url.c_str(), selector.num_registered());
  if (config->ui) {
    std::printf("deepinfer router: playground at http://%s:%u/\n", config->host.c_str(), static_cast<unsigned>(*port));
  }
  std::fflush(stdout);
  http_server.run();
  watcher->reset();
  std::fprintf(stderr, "deepinfer router: stopped\n");
  return 0;
}

}  // namespace deepinfer::cli
