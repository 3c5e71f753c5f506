// `deepinfer serve --role encoder`: a multimodal checkpoint's image encoder as a service of its own.
#pragma once

#include <optional>
#include <string>

#include "args.h"
#include "server/server_context.h"
#include "server/worker_registry.h"

namespace deepinfer::cli {

// Where an encoder registers (serve --register), when it does.
struct EncoderRegistration {
  server::RegistryOptions registry;
  std::string advertise_host;
};

// Loads only the vision weights of model_dir and serves POST /internal/v1/encode (server/encode_api.h),
// /health and /metrics until SIGTERM / SIGINT; registers as a worker of role "encoder" when given.
// Returns the exit code.
int serve_image_encoder(const Args& args, const server::ServerConfig& config, const std::string& model_dir,
                        const std::optional<EncoderRegistration>& registration);

}  // namespace deepinfer::cli
