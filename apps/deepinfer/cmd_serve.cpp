// `deepinfer serve`: the OpenAI- and Anthropic-compatible HTTP server (src/server) over one model.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.h"
#include "data_parallel_flags.h"
#include "serve_encoder.h"
#include "server_flags.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "kvstore/model_identity.h"
#include "recipe/chat_template.h"
#include "server/engine_worker.h"
#include "server/http_server.h"
#include "server/kv_transport.h"
#include "server/prefilled_inbox.h"
#include "server/rank_router.h"
#include "server/shutdown.h"
#include "server/worker_registry.h"
#include "session.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

// The model `serve` runs without --model (relative to the working directory).
constexpr const char* kDefaultModelDir = "models/default";

constexpr const char* kUsage = R"(usage: deepinfer serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--served-model-name NAME]
                       [--api-key KEY] [--ui] [--max-queued-requests N] [--max-queued-tokens N]
                       [--request-timeout S] [--max-body-bytes N] [--max-n N] [--shutdown-timeout S]
                       [--max-image-pixels N] [--max-images-per-request N] [--allow-image-urls]
                       [--max-num-seqs N]
                       [--max-num-batched-tokens N] [--max-model-len N] [--kv-cache-bytes N]
                       [--kv-cache-dtype auto|float32|bfloat16|fp8]
                       [--gpu-memory-utilization F] [--block-size N] [--io-threads N] [--device cpu|ref|cuda] [--threads N]
                       [--batch-invariant] [--no-cuda-graphs] [--host-sampling] [--dequantize-weights]
                       [--[no-]async-scheduling] [--check-invariants]
                       [--kv-cache-dir DIR]
                       [--kv-cache-host-bytes N] [--kv-cache-disk-bytes N]
                       [--kv-cache-backend disk|redis://host:port] [--kv-cache-load auto|always]
                       [--swa-replay-tokens N|exact] [--speculative-tokens K] [--spec-varlen on|off]
                       [--data-parallel-size N [--expert-parallel] [--num-redundant-experts R]
                        [--expert-placement FILE] [--data-parallel-size-local L --data-parallel-start-rank S]
                        [--data-parallel-rank R] [--data-parallel-address DIR|redis://HOST:PORT]
                        [--data-parallel-host H] [--eplb-interval N] [--eplb-window N]
                        [--eplb-policy peak-aware|deepseek] [--expert-placement-out FILE]
                        [--expert-parallel-transport auto|nccl|host]
                        [--expert-parallel-payload auto|float32|bf16|fp8] [--expert-parallel-fixed-tokens N]
                        [--data-parallel-routing least-loaded|prefix-affinity]]
                       [--register redis://HOST:PORT [--advertise-host H] [--role both|prefill|decode|encoder]
                        [--kv-port N]] [--max-internal-body-bytes N]
Serves the model over HTTP/1.1: POST /v1/chat/completions, /v1/completions, /v1/responses,
/v1/messages (Anthropic), /tokenize, /detokenize; GET /v1/models, /health, /metrics (Prometheus).
The model directory needs tokenizer.json (and tokenizer_config.json for the chat format).
Without --model it serves models/default. --port 0 picks a free port; the first line printed
is "deepinfer serve: listening on http://HOST:PORT".
--api-key: clients must send 'Authorization: Bearer KEY' or 'x-api-key: KEY'.
--ui: serve the web playground at GET / (chat with streaming, sampling controls, structured output,
live metrics; its files are compiled in). The page itself loads without the key; its API calls
send the key typed into it. Off by default (a plain `serve` answers 404 on /).
--max-queued-requests / --max-queued-tokens: bounds on requests waiting for the engine and on
the tokens they may run, n x (prompt + max_tokens) each; past them requests get 429 (529 on
/v1/messages) with Retry-After. --max-n: the most samples one request may ask for (default 128).
--request-timeout: seconds a request may run (default 600). --max-body-bytes: default 8 MiB.
--max-image-pixels: the most pixels an image part may declare in its header (default 33554432);
larger ones get 400 before they are decoded. --max-images-per-request: the most image parts one
request may hold (default 8), counted before any is decoded. Models with an image encoder (Gemma 3
multimodal and Qwen2.5-VL checkpoints) take images through every API; others refuse them
(docs/images.md). http(s) image URLs are refused unless --allow-image-urls is given: then the server
fetches each (10 s a URL, the body with the files in it within --max-body-bytes, 3 redirects,
https verified against the system's CAs), from any host a client names, its own network included.
--shutdown-timeout: on SIGTERM / SIGINT the server stops accepting, ends every open request with
an error (503, or an error event on a stream), writes the KV store's queued pages and exits;
past this many seconds (default 5) it exits anyway, logging what was stuck. A second signal
ends it at once.
--kv-cache-dir DIR: keep prompt KV pages in a persistent store (host memory, then DIR on disk,
then a Redis server with --kv-cache-backend redis://host:port) so any later request with the
same prefix, in this process or another, loads them instead of recomputing (docs/kvstore.md);
--kv-cache-load always skips the load-vs-recompute check (default auto). --swa-replay-tokens
N|exact: prefix tokens a hit of a sliding-window model runs again to rebuild its sliding layers'
KV (default max(128, window); exact: sliding layers x window).
--speculative-tokens K: speculative decoding with the model's draft module (DeepSeek-V3-style MTP
layers): chains of up to K drafts (<= 16) verified in the next step; the output is the same as
without it (token for token with --batch-invariant). --spec-varlen on (the default) verifies the
drafts DSpark's budget picks across requests from the confidence head and step times profiled at
start-up, and stops drafting when it does not pay; off verifies K drafts a request every step
(required with --batch-invariant). Steps then run one at a time (no --async-scheduling overlap).
--kv-cache-bytes N: the KV cache's size (default: automatic, 1 GiB on the CPU). --gpu-memory-utilization
F: on a GPU, the fraction of its memory the server may hold (default 0.9): the KV cache gets what
is left of it after a dry run of the heaviest step the limits allow (--max-num-batched-tokens
with prompt logprobs, --max-num-seqs decodes at --max-model-len, the CUDA graphs).
--kv-cache-dtype auto|float32|bfloat16|fp8: the KV cache's element type (default auto: float32 on the
CPU, bf16 for 16-bit models on CUDA, float32 there with --batch-invariant). fp8 keeps e4m3 codes with
the checkpoint's per-layer k_scale / v_scale (one per tensor, kv head or column), else scale 1: a
quarter of float32's bytes, so up to four times the tokens in the same --kv-cache-bytes (the cache
never holds more than --max-num-seqs sequences of --max-model-len; CPU and CUDA).
--dequantize-weights: FP8 and MXFP4 checkpoints load dequantised (bf16 / float32) instead of packed
(two to eight times the weights' memory; on CUDA today dequantised MXFP4 experts run prompts faster
and decode slower or no faster).
--register redis://HOST:PORT: join a serving cluster as a worker (docs/cluster.md): the server keeps a
key in that Redis with its address (--advertise-host, default --host) and load (queued tokens,
running and waiting requests, KV usage, cached tokens), refreshed every second and expiring after
3 s, so `deepinfer router --redis redis://HOST:PORT` sends it requests through its token-level API
(POST /internal/v1/generate) until it stops (SIGTERM deletes the key) or goes silent. A Redis
outage is logged and the server keeps serving. --role both (the default) runs whole requests.
Prefill/decode disaggregation (docs/cluster.md): --role prefill computes a prompt's KV and first
token and hands the KV on as the router says, pushed to the decode worker or written to the
persistent KV store (the store mode needs --kv-cache-dir on a directory every worker shares, or
--kv-cache-backend redis://); --role decode continues from it and takes pushed KV on --kv-port N
(default 0: any free port; routers learn it from the registry). Both roles serve the same model
directory, --block-size and KV dtype; a role's worker answers only the router. With
--data-parallel-size N a role's ranks each register as a worker of their own (rank 0 at
--advertise-host with --kv-port, the others at --data-parallel-host with any free KV port), named
as one DP group, which the router's policy treats as one (the seeds' quota pull between groups).
--role encoder (docs/images.md): a multimodal checkpoint's image encoder as a service of its own:
only its vision weights load (no text model, engine or KV cache); it answers POST
/internal/v1/encode (image files in, the encoder's rows out), /health and /metrics, one image at a
time, at most --max-queued-requests images queued (more: 429). With --register it joins the
cluster as an image encoder: a router of the same model sends it a request's images and gives the
worker the rows, which then runs no encoder. --max-image-pixels and --max-images-per-request apply.
--max-internal-body-bytes: the body limit of the internal routes a router calls (/internal/*,
whose requests may carry an encoder's rows: megabytes an image; default 268435456).
--check-invariants: assert the engine's KV bookkeeping every time it goes idle (tests).
--async-scheduling, --no-async-scheduling: the pipelined step loop or the synchronous one (default:
pipelined with --device cuda, synchronous on the CPU): the next step is scheduled and launched before
the last one is post-processed (docs/architecture.md, "The pipelined step loop"); the same tokens.
--data-parallel-size N: N ranks (processes this one starts), each with its own engine, scheduler
and KV cache; rank 0 answers on --host:--port and sends each generation request to the rank with
the fewest outstanding tokens (its own, or another rank's HTTP server on --data-parallel-host,
relayed byte for byte); the other routes are rank 0's. --data-parallel-routing prefix-affinity
sends a request to the rank that likely caches the longest run of its prompt's leading KV blocks,
unless that rank is more than --max-num-batched-tokens outstanding tokens above the least loaded. --expert-parallel spreads the MoE layers'
experts over the ranks, which then run their forwards together (steps run one at a time, without
--async-scheduling). Their token rows travel by --expert-parallel-transport: nccl (GPU to GPU,
one GPU per rank), host (through host memory over Gloo), or auto (the default: nccl with --device
cuda where every rank has its own GPU and NCCL loads, else host), as --expert-parallel-payload:
bf16, fp8 (e4m3 with a scale per 128 values to the experts, bf16 back), float32, or auto (the
default: float32 with --batch-invariant, so the group gives one rank's bits, else bf16). Rounds
whose busiest rank has at most --expert-parallel-fixed-tokens tokens (default 256; 0: none) plan
the exchange on the device and send fixed-size blocks, with no routing or counts through the host
first; larger rounds send the counts first, then only the routed rows. With
--device cuda the ranks this command starts take the GPUs of CUDA_VISIBLE_DEVICES (or every GPU) in turn. Multi-machine groups:
--data-parallel-size-local, --data-parallel-start-rank, --data-parallel-rank, --data-parallel-address
(docs/parallel.md).
EPLB while serving: every --eplb-interval forward rounds (default 10000; 0: never) the experts are
re-placed from the last --eplb-window rounds' loads (default 1000) by --eplb-policy (default
peak-aware); --expert-placement-out FILE keeps the current placement (docs/parallel.md).
)";

struct ServeSetup {
  DataParallelGroup data_parallel;  // declared first: the model's MoE layers use its group
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
  std::optional<Tokenizer> tokenizer;
  ChatFamily family = ChatFamily::kQwen3;
};

Result<ServeSetup> load(const Args& args, const std::string& model_dir, const DataParallelConfig& data_parallel) {
  ServeSetup setup;
  auto options = backend_options_from_args(args);
  if (!options.ok()) return options.error();
  auto group = join_data_parallel_group(data_parallel, model_dir, options->batch_invariant);
  if (!group.ok()) return group.error();
  setup.data_parallel = std::move(*group);
  auto backend = make_backend(args.find("--device").value_or("cpu"), *options);
  if (!backend.ok()) return backend.error();
  setup.backend = std::move(*backend);
  auto model = load_model(model_dir, *setup.backend, data_parallel.rank == 0, setup.data_parallel.expert_parallel);
  if (!model.ok()) return model.error();
  setup.model = std::move(*model);
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json")) {
    return Error{"serve needs " + model_dir + "/tokenizer.json: the APIs take and return text"};
  }
  auto tokenizer = Tokenizer::load(model_dir);
  if (!tokenizer.ok()) return tokenizer.error();
  setup.tokenizer = std::move(*tokenizer);
  setup.family = chat_family_or_qwen3(model_dir, "serve");
  return setup;
}

Result<EngineConfig> engine_config(const Args& args) {
  EngineConfig config;
  auto seqs = non_negative_flag(args, "--max-num-seqs", 64);
  auto batched = non_negative_flag(args, "--max-num-batched-tokens", 2048);
  auto model_len = non_negative_flag(args, "--max-model-len", 0);
  auto block = non_negative_flag(args, "--block-size", config.block_size);
  auto memory = cache_memory_from_args(args);
  if (!memory.ok()) return memory.error();
  for (const auto* value : {&seqs, &batched, &model_len, &block}) {
    if (!value->ok()) return value->error();
  }
  if (*seqs < 1 || *batched < 1 || *block < 1) {
    return Error{"--max-num-seqs, --max-num-batched-tokens and --block-size must be >= 1"};
  }
  config.scheduler.max_num_seqs = static_cast<int32_t>(*seqs);
  config.scheduler.max_num_batched_tokens = static_cast<int32_t>(*batched);
  config.max_model_len = static_cast<int32_t>(*model_len);
  config.kv_cache_bytes = memory->kv_cache_bytes;
  config.gpu_memory_utilization = memory->gpu_memory_utilization;
  config.block_size = static_cast<int32_t>(*block);
  config.device_sampling = !args.has("--host-sampling");
  auto async_scheduling = async_scheduling_from_args(args);
  if (!async_scheduling.ok()) return async_scheduling.error();
  config.async_scheduling = *async_scheduling;
  auto speculative = speculative_from_args(args);
  if (!speculative.ok()) return speculative.error();
  config.speculative.num_tokens = speculative->num_tokens;
  config.speculative.varlen = speculative->varlen;
  config.deterministic = args.has("--batch-invariant");
  return config;
}

// --register: the registry to join as a cluster worker (docs/cluster.md).
struct Registration {
  server::RegistryOptions registry;
  std::string advertise_host;
  std::string role;
  uint16_t kv_port = 0;  // decode: the KV receiver's port (0: any free one)
};

Result<std::optional<Registration>> registration_from_args(const Args& args, const server::ServerConfig& config) {
  const std::string role = args.find("--role").value_or("both");
  if (role != "both" && role != "prefill" && role != "decode" && role != "encoder") {
    return Error{"--role must be both, prefill, decode or encoder, got '" + role + "'"};
  }
  if (args.has("--kv-port") && role != "decode") return Error{"--kv-port is for --role decode"};
  auto kv_port = non_negative_flag(args, "--kv-port", 0);
  if (!kv_port.ok()) return kv_port.error();
  if (*kv_port > 65535) return Error{"--kv-port must be a port number (0-65535)"};
  if (!args.has("--register")) {
    if (args.has("--advertise-host")) return Error{"--advertise-host needs --register redis://HOST:PORT"};
    if (args.has("--role") && role != "encoder") {
      return Error{"--role " + role + " needs --register redis://HOST:PORT (only --role encoder serves alone)"};
    }
    return std::optional<Registration>();
  }
  Registration registration;
  registration.registry.url = *args.find("--register");
  registration.role = role;
  registration.kv_port = static_cast<uint16_t>(*kv_port);
  registration.advertise_host = args.find("--advertise-host").value_or(config.host);
  if (registration.advertise_host == "0.0.0.0" || registration.advertise_host == "::") {
    return Error{"--register with --host " + config.host +
                 " needs --advertise-host: the address routers reach this worker at"};
  }
  return std::optional<Registration>(std::move(registration));
}

// What a worker's record says of it besides its address and load.
struct WorkerIdentity {
  uint16_t kv_port = 0;
  std::string served_name;
  int32_t block_size = 0;
  int32_t max_model_len = 0;
  int64_t max_body_bytes = 0;  // the token-level API's (--max-internal-body-bytes)
  std::string dp_group;  // a disaggregated role's rank: its group (empty: one engine, or a front)
  int32_t dp_rank = 0;
};

Result<std::unique_ptr<server::WorkerHeartbeat>> start_heartbeat(const Registration& registration, uint16_t port,
                                                                 const WorkerIdentity& worker_identity,
                                                                 int64_t pool_tokens, server::EngineWorker& worker,
                                                                 server::Metrics& metrics) {
  server::WorkerRecord identity;
  identity.host = registration.advertise_host;
  identity.port = port;
  identity.kv_port = worker_identity.kv_port;
  identity.id = identity.host + ":" + std::to_string(port);
  identity.role = registration.role;
  identity.model = worker_identity.served_name;
  identity.block_size = worker_identity.block_size;
  identity.max_model_len = worker_identity.max_model_len;
  identity.max_body_bytes = worker_identity.max_body_bytes;
  if (!worker_identity.dp_group.empty()) {
    identity.dp_group = worker_identity.dp_group;
    identity.dp_rank = worker_identity.dp_rank;
  }
  auto load_now = [&worker, &metrics, pool_tokens] {
    const server::EngineGauges gauges = metrics.engine();
    server::WorkerLoadReport load;
    load.queued_tokens = worker.queued_tokens();
    load.num_waiting = gauges.num_waiting;
    load.num_running = gauges.num_running;
    load.kv_usage = gauges.kv_usage;
    load.kv_tokens_used = static_cast<int64_t>(gauges.kv_usage * static_cast<double>(pool_tokens));
    load.kv_tokens_free = pool_tokens - load.kv_tokens_used;
    load.cached_tokens = gauges.prefix_hit_tokens;
    return load;
  };
  auto heartbeat = server::WorkerHeartbeat::start(registration.registry, std::move(identity), load_now);
  if (!heartbeat.ok()) return Error{"--register: " + heartbeat.error().message};
  std::printf("deepinfer serve: registered as worker %s:%u in %s\n", registration.advertise_host.c_str(),
              static_cast<unsigned>(port), registration.registry.url.c_str());
  return std::move(*heartbeat);
}

}  // namespace

int run_serve(int argc, char** argv) {
  if (wants_help(argc, argv, kUsage)) return 0;
  auto args = Args::parse(argc, argv,
                          data_parallel_value_flags(model_value_flags(kv_store_value_flags(server_value_flags(
                              {"--max-num-seqs", "--max-num-batched-tokens", "--max-model-len", "--kv-cache-bytes",
                               "--gpu-memory-utilization", "--block-size", "--data-parallel-routing",
                               kSpeculativeTokensFlag, kSpecVarlenFlag, "--register", "--advertise-host",
                               "--role", "--kv-port"})))),
                          data_parallel_bool_flags(
                              model_bool_flags({"--check-invariants", "--async-scheduling", "--no-async-scheduling", "--ui",
                                            "--allow-image-urls"})));
  if (!args.ok()) return report_error("serve", args.error());
  auto config = server_config_from_args(*args);
  if (!config.ok()) return report_error("serve", config.error());
  auto registration = registration_from_args(*args, *config);
  if (!registration.ok()) return report_error("serve", registration.error());
  if (registration->has_value()) {  // before the model loads: a wrong URL fails at once
    if (auto reachable = server::check_registry((*registration)->registry); !reachable.ok()) {
      return report_error("serve", Error{"--register: " + reachable.error().message});
    }
  }
  const std::string model_dir = args->find("--model").value_or(kDefaultModelDir);
  if (!args->has("--model") && !std::filesystem::exists(model_dir)) {
    return report_error("serve", Error{std::string("no --model given and the default model ") + kDefaultModelDir +
                                       " is not there; pass --model DIR (a Hugging Face model directory)"});
  }
  if (args->find("--role") == "encoder") {
    std::optional<EncoderRegistration> encoder_registration;
    if (registration->has_value()) {
      encoder_registration = EncoderRegistration{(*registration)->registry, (*registration)->advertise_host};
    }
    return serve_image_encoder(*args, *config, model_dir, encoder_registration);
  }
  auto engine_cfg = engine_config(*args);
  if (!engine_cfg.ok()) return report_error("serve", engine_cfg.error());
  LocalRanks ranks;
  auto data_parallel = data_parallel_from_args(*args, argc, argv, ranks);
  if (!data_parallel.ok()) return report_error("serve", data_parallel.error());
  const bool expert_parallel = data_parallel->expert_parallel && data_parallel->size > 1;
  auto routing = server::parse_rank_routing(args->find("--data-parallel-routing").value_or("least-loaded"));
  if (!routing.ok()) return report_error("serve", routing.error());
  if (args->has("--data-parallel-routing") && data_parallel->size < 2) {
    return report_error("serve", Error{"--data-parallel-routing needs --data-parallel-size of 2 or more"});
  }
  const std::string role = registration->has_value() ? (*registration)->role : "both";
  if (role == "prefill") engine_cfg->mode = EngineMode::kPrompt;
  if (role == "decode") engine_cfg->mode = EngineMode::kCompletion;
  if (expert_parallel) {
    // Rounds of the group are counted per step on the engine thread: steps run one at a time.
    engine_cfg->async_scheduling = false;
  }
  if (data_parallel->rank != 0) {  // the front is rank 0's; this rank's API is for the front
    config->host = data_parallel->host;
    config->port = 0;
    if (registration->has_value() && role != "both") {
      // A disaggregated role's ranks register one by one, where the router reaches them; their KV
      // receivers take any free port (rank 0 has --kv-port).
      (*registration)->advertise_host = data_parallel->host;
      (*registration)->kv_port = 0;
    }
  }
  auto threads = non_negative_flag(*args, "--threads", 0);
  if (!threads.ok()) return report_error("serve", threads.error());
  if (*threads > 0) omp_set_num_threads(static_cast<int>(*threads));
  auto max_n = max_n_from_args(*args);
  if (!max_n.ok()) return report_error("serve", max_n.error());
  auto images = image_input_from_args(*args);
  if (!images.ok()) return report_error("serve", images.error());

  auto kv_store = kv_store_config_from_args(*args, model_dir);
  if (!kv_store.ok()) return report_error("serve", kv_store.error());
  engine_cfg->kv_store = *kv_store;
  // Declared first, so its watchdog bounds every destructor below (the engine's flushes the KV store).
  server::ShutdownDeadline shutdown(config->shutdown_timeout_s);
  auto setup = load(*args, model_dir, *data_parallel);
  if (!setup.ok()) return report_error("serve", setup.error());
  std::unique_ptr<EngineCore> engine;
  try {
    engine = std::make_unique<EngineCore>(*setup->model, &*setup->tokenizer, *engine_cfg);
  } catch (const UserError& e) {  // a setting the model or the other settings rule out
    return report_error("serve", Error{e.what()});
  }
  ThreadPool encode_pool(2);

  server::Metrics metrics;
  server::WorkerLimits limits;
  limits.max_queued_requests = config->max_queued_requests;
  limits.max_queued_tokens = config->max_queued_tokens;
  limits.check_invariants = config->check_invariants;
  limits.group_rounds = expert_parallel;

  server::ServerContext context;
  context.config = *config;
  context.model.served_name = served_model_name(*args, model_dir);
  context.model.tokenizer = &*setup->tokenizer;
  context.model.family = setup->family;
  context.model.max_model_len = static_cast<int32_t>(engine_cfg->max_model_len > 0
                                                         ? engine_cfg->max_model_len
                                                         : setup->model->config().max_position_embeddings);
  context.model.vocab_size = static_cast<int32_t>(setup->model->config().vocab_size);
  context.model.pool = &encode_pool;
  context.model.max_n = static_cast<int32_t>(*max_n);
  context.model.images = *images;
  context.model.image_input = setup->model->image_input();
  if (context.model.image_input == nullptr) {
    context.model.skipped_vision_encoder = skipped_vision_encoder(setup->model->config());
  }
  context.metrics = &metrics;
  context.shutdown = &shutdown;
  context.started_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();

  server::HttpServer http_server(context);
  auto port = http_server.listen();
  if (!port.ok()) return report_error("serve", port.error());
  // Every rank's address reaches rank 0's front before any engine thread starts the group's rounds.
  std::optional<server::RankRouter> router;
  std::string dp_group_name;  // rank 0's address: what a disaggregated role's ranks register under
  if (setup->data_parallel.group) {
    const std::string own = config->host + " " + std::to_string(*port);
    std::vector<std::string> addresses;
    try {
      addresses = setup->data_parallel.group->all_gather(own);
    } catch (const std::exception& e) {
      return report_error("serve", Error{e.what()});
    }
    std::vector<server::RankAddress> ranks_at;
    for (const std::string& address : addresses) {
      const size_t space = address.find(' ');
      ranks_at.push_back({address.substr(0, space), static_cast<uint16_t>(std::stoi(address.substr(space + 1)))});
    }
    dp_group_name = ranks_at[0].host + ":" + std::to_string(ranks_at[0].port);
    if (data_parallel->rank == 0) {
      server::RankRouterOptions options;
      options.routing = *routing;
      options.block_size = engine->config().block_size;
      options.remembered_blocks_per_rank = engine->stats().num_kv_blocks;
      options.affinity_slack_tokens = engine->config().scheduler.max_num_batched_tokens;
      router.emplace(std::move(ranks_at), options);
      context.router = &*router;
    }
  }
  // A disaggregated role's KV: what both ends check (model identity, dtype, block and page sizes).
  std::unique_ptr<server::KvTransport> kv_transport;
  std::unique_ptr<server::PrefilledInbox> prefilled_inbox;
  std::unique_ptr<server::TcpKvReceiver> kv_receiver;
  context.has_kv_store = engine_cfg->kv_store.enabled();
  if (role != "both") {
    std::string model_identity = engine_cfg->kv_store.model_identity;
    if (model_identity.empty()) {
      auto identity = fingerprint_model_dir(model_dir, model_hash_cache_path(""));
      if (!identity.ok()) return report_error("serve", identity.error());
      model_identity = *identity;
    }
    server::KvLayout layout =
        server::KvLayout::of(*setup->model, std::move(model_identity), engine->config().block_size);
    if (role == "prefill") {
      kv_transport = std::make_unique<server::TcpKvTransport>(std::move(layout), std::chrono::seconds(30));
      context.kv_transport = kv_transport.get();
      context.wait_kv_written = [&engine](std::span<const BlockHash> hashes) { engine->wait_kv_written(hashes); };
    } else {
      // Pushed KV that no request claims within a minute is dropped (the router gave up on it).
      prefilled_inbox = std::make_unique<server::PrefilledInbox>(std::chrono::seconds(60));
      auto receiver =
          server::TcpKvReceiver::start(config->host, (*registration)->kv_port, std::move(layout), *prefilled_inbox);
      if (!receiver.ok()) return report_error("serve", receiver.error());
      kv_receiver = std::move(*receiver);
      context.prefilled_inbox = prefilled_inbox.get();
    }
  }
  // Read before the engine thread starts: stats() belongs to it from then on.
  const int64_t kv_pool_tokens = static_cast<int64_t>(engine->stats().num_kv_blocks) * engine->config().block_size;
  // Stopped before the server's io_context goes, so it never posts to a destroyed one.
  auto worker = std::make_unique<server::EngineWorker>(*engine, metrics, limits);
  context.worker = worker.get();
  std::unique_ptr<server::WorkerHeartbeat> heartbeat;
  // A role "both" group registers its front, which spreads requests over its ranks; a
  // disaggregated role's ranks each register, one DP group to the router's policy.
  if (registration->has_value() && (data_parallel->rank == 0 || role != "both")) {
    WorkerIdentity identity;
    identity.kv_port = kv_receiver ? kv_receiver->port() : 0;
    identity.served_name = context.model.served_name;
    identity.block_size = engine->config().block_size;
    identity.max_model_len = context.model.max_model_len;
    identity.max_body_bytes = config->max_internal_body_bytes;
    if (role != "both") identity.dp_group = dp_group_name;
    identity.dp_rank = data_parallel->rank;
    auto started = start_heartbeat(**registration, *port, identity, kv_pool_tokens, *worker, metrics);
    if (!started.ok()) return report_error("serve", started.error());
    heartbeat = std::move(*started);
  }
  std::printf("deepinfer serve: listening on http://%s:%u (model '%s', %s family)\n", config->host.c_str(),
              static_cast<unsigned>(*port), context.model.served_name.c_str(),
              std::string(chat_family_name(context.model.family)).c_str());
  if (role != "both") {
    std::printf("deepinfer serve: role %s", role.c_str());
    if (kv_receiver) {
      std::printf(", KV pushes on %s:%u", config->host.c_str(), static_cast<unsigned>(kv_receiver->port()));
    }
    std::printf("\n");
  }
  if (config->ui) {
    std::printf("deepinfer serve: playground at http://%s:%u/\n", config->host.c_str(), static_cast<unsigned>(*port));
  }
  std::fflush(stdout);
  http_server.run();
  heartbeat.reset();  // deregisters: routers stop sending here before the engine goes
  // Every connection is closed; the engine thread was told to abort what runs after its step.
  shutdown.set_stage("waiting for the engine thread to end its step");
  if (!worker->stop(shutdown.at_fraction(0.75))) {
    DI_LOG(kError, "shutdown: the engine thread is stuck, " << worker->activity()
                                                          << "; saving the KV store's queued pages and exiting without it");
    shutdown.set_stage("writing the KV store's queued pages (the engine thread is stuck)");
    engine->flush_kv_store();
    server::ShutdownDeadline::give_up("the engine thread did not end its step");
  }
  worker.reset();
  shutdown.set_stage("writing the KV store's queued pages");
  engine->flush_kv_store();
  shutdown.set_stage("releasing the engine");
  engine.reset();
  ranks.stop(std::chrono::milliseconds(0));
  std::fprintf(stderr, "deepinfer serve: stopped\n");
  return 0;
}

}  // namespace deepinfer::cli
