// `deepinfer serve --role encoder` (docs/images.md, "The image encoder as a service").
#include "serve_encoder.h"

#include <chrono>
#include <cstdio>

#include "core/logging.h"
#include "model/image_encoder_model.h"
#include "server/http_server.h"
#include "server/image_encoder_service.h"
#include "server/shutdown.h"
#include "server_flags.h"
#include "session.h"

namespace deepinfer::cli {

int serve_image_encoder(const Args& args, const server::ServerConfig& config, const std::string& model_dir,
                        const std::optional<EncoderRegistration>& registration) {
  for (const char* flag :
       {"--data-parallel-size", "--kv-cache-dir", "--kv-cache-backend", "--speculative-tokens", "--ui",
        "--allow-image-urls", "--max-num-seqs", "--max-num-batched-tokens", "--max-model-len", "--kv-cache-bytes",
        "--kv-cache-dtype", "--block-size", "--gpu-memory-utilization"}) {
    if (args.has(flag)) {
      return report_error("serve", Error{std::string(flag) + " does not apply to --role encoder (it runs the image "
                                                             "encoder only: no engine, KV cache or public API)"});
    }
  }
  auto images = image_input_from_args(args);
  if (!images.ok()) return report_error("serve", images.error());
  auto options = backend_options_from_args(args);
  if (!options.ok()) return report_error("serve", options.error());
  server::ShutdownDeadline shutdown(config.shutdown_timeout_s);
  auto backend = make_backend(args.find("--device").value_or("cpu"), *options);
  if (!backend.ok()) return report_error("serve", backend.error());
  auto model = load_image_encoder(model_dir, **backend);
  if (!model.ok()) return report_error("serve", model.error());

  server::Metrics metrics;
  server::ImageEncoderService service(*model, metrics, config.max_queued_requests, config.max_queued_tokens);
  server::ServerContext context;
  context.config = config;
  context.model.served_name = served_model_name(args, model_dir);
  context.model.images = *images;
  context.model.image_input = &model->encoder->format();
  context.encoder = &service;
  context.metrics = &metrics;
  context.shutdown = &shutdown;
  context.started_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  server::HttpServer http_server(context);
  auto port = http_server.listen();
  if (!port.ok()) return report_error("serve", port.error());
  std::unique_ptr<server::WorkerHeartbeat> heartbeat;
  if (registration) {
    server::WorkerRecord identity;
    identity.host = registration->advertise_host;
    identity.port = *port;
    identity.id = identity.host + ":" + std::to_string(*port);
    identity.role = "encoder";
    identity.model = context.model.served_name;
    auto started = server::WorkerHeartbeat::start(registration->registry, std::move(identity), [&service] {
      server::WorkerLoadReport load;
      load.queued_tokens = service.queued_tokens();
      load.num_waiting = service.queued_images();
      return load;
    });
    if (!started.ok()) return report_error("serve", Error{"--register: " + started.error().message});
    heartbeat = std::move(*started);
    std::printf("deepinfer serve: registered as image encoder %s:%u in %s\n", registration->advertise_host.c_str(),
                static_cast<unsigned>(*port), registration->registry.url.c_str());
  }
  std::printf("deepinfer serve: listening on http://%s:%u (image encoder of model '%s')\n", config.host.c_str(),
              static_cast<unsigned>(*port), context.model.served_name.c_str());
  std::fflush(stdout);
  http_server.run();
  heartbeat.reset();  // deregisters: routers stop sending here before the encoder goes
  shutdown.set_stage("waiting for the image encoder to finish its image");
  if (!service.stop(shutdown.at_fraction(0.75))) {
    server::ShutdownDeadline::give_up("the image encoder did not finish its image");
  }
  std::fprintf(stderr, "deepinfer serve: stopped\n");
  return 0;
}

}  // namespace deepinfer::cli
