// The HTTP front's flags, shared by serve and router.
#include "server_flags.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>

namespace deepinfer::cli {

Result<int64_t> non_negative_flag(const Args& args, const char* flag, int64_t fallback) {
  auto value = args.get_int(flag, fallback);
  if (!value.ok()) return value.error();
  if (*value < 0) return Error{std::string(flag) + " must be >= 0, got " + std::to_string(*value)};
  return *value;
}

std::set<std::string> server_value_flags(std::set<std::string> extra) {
  extra.insert({"--host", "--port", "--served-model-name", "--api-key", "--max-queued-requests", "--max-queued-tokens",
                "--request-timeout", "--max-body-bytes", "--max-internal-body-bytes", "--io-threads", "--max-n",
                "--shutdown-timeout", "--max-image-pixels", "--max-images-per-request"});
  return extra;
}

Result<server::ServerConfig> server_config_from_args(const Args& args) {
  server::ServerConfig config;
  config.host = args.find("--host").value_or(config.host);
  auto port = non_negative_flag(args, "--port", config.port);
  if (!port.ok()) return port.error();
  if (*port > 65535) return Error{"--port must be in [0, 65535]"};
  config.port = static_cast<uint16_t>(*port);
  config.api_key = args.find("--api-key");
  auto queued = non_negative_flag(args, "--max-queued-requests", config.max_queued_requests);
  if (!queued.ok()) return queued.error();
  config.max_queued_requests = static_cast<int32_t>(std::min<int64_t>(*queued, INT32_MAX));
  auto queued_tokens = non_negative_flag(args, "--max-queued-tokens", config.max_queued_tokens);
  if (!queued_tokens.ok()) return queued_tokens.error();
  config.max_queued_tokens = *queued_tokens;
  auto timeout = args.get_double("--request-timeout", config.request_timeout_s);
  if (!timeout.ok()) return timeout.error();
  if (!(*timeout > 0)) return Error{"--request-timeout must be > 0 seconds"};
  config.request_timeout_s = *timeout;
  auto body = non_negative_flag(args, "--max-body-bytes", config.max_body_bytes);
  if (!body.ok()) return body.error();
  config.max_body_bytes = *body;
  auto internal_body = non_negative_flag(args, "--max-internal-body-bytes", config.max_internal_body_bytes);
  if (!internal_body.ok()) return internal_body.error();
  config.max_internal_body_bytes = *internal_body;
  auto shutdown = args.get_double("--shutdown-timeout", config.shutdown_timeout_s);
  if (!shutdown.ok()) return shutdown.error();
  if (!(*shutdown > 0 && *shutdown <= 3600)) return Error{"--shutdown-timeout must be in (0, 3600] seconds"};
  config.shutdown_timeout_s = *shutdown;
  auto io_threads = non_negative_flag(args, "--io-threads", config.num_io_threads);
  if (!io_threads.ok()) return io_threads.error();
  config.num_io_threads = static_cast<int32_t>(std::clamp<int64_t>(*io_threads, 1, 64));
  config.check_invariants = args.has("--check-invariants");
  config.ui = args.has("--ui");
  return config;
}

Result<int32_t> max_n_from_args(const Args& args) {
  auto max_n = args.get_int("--max-n", 128);
  if (!max_n.ok()) return max_n.error();
  if (*max_n < 1 || *max_n > 65536) return Error{"--max-n must be in [1, 65536]"};
  return static_cast<int32_t>(*max_n);
}

Result<ImageInputOptions> image_input_from_args(const Args& args) {
  ImageInputOptions options;
  auto max_pixels = args.get_int("--max-image-pixels", options.max_pixels);
  if (!max_pixels.ok()) return max_pixels.error();
  if (*max_pixels < 1) return Error{"--max-image-pixels must be >= 1, got " + std::to_string(*max_pixels)};
  options.max_pixels = *max_pixels;
  auto max_images = args.get_int("--max-images-per-request", options.max_images);
  if (!max_images.ok()) return max_images.error();
  if (*max_images < 0 || *max_images > 1024) {
    return Error{"--max-images-per-request must be in [0, 1024], got " + std::to_string(*max_images)};
  }
  options.max_images = static_cast<int32_t>(*max_images);
  options.allow_urls = args.has("--allow-image-urls");
  return options;
}

std::string served_model_name(const Args& args, const std::string& model_dir) {
  if (auto name = args.find("--served-model-name")) return *name;
  std::error_code resolve_error;
  const auto resolved = std::filesystem::weakly_canonical(model_dir, resolve_error);
  std::string name =
      (resolve_error ? std::filesystem::path(model_dir) : resolved).lexically_normal().filename().string();
  return name.empty() ? model_dir : name;
}

std::string skipped_vision_encoder(const ModelConfig& config) {
  const auto vision = config.raw.find("vision_config");
  if (vision == config.raw.end() || !vision->is_object()) return {};
  return vision->value("model_type", std::string("unnamed"));
}

ChatFamily chat_family_or_qwen3(const std::string& model_dir, const char* command) {
  auto family = detect_chat_family(model_dir);
  if (family.ok()) return *family;
  std::fprintf(stderr, "deepinfer %s: %s; chat prompts use the qwen3 template\n", command,
               family.error().message.c_str());
  return ChatFamily::kQwen3;
}

}  // namespace deepinfer::cli
