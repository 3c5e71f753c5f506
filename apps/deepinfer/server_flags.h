// The HTTP front's settings that `serve` and `router` share: address, keys, limits, timeouts, and
// the served model's name and chat family.
#pragma once

#include <set>
#include <string>

#include "args.h"
#include "core/result.h"
#include "recipe/api.h"
#include "recipe/chat_template.h"
#include "server/server_context.h"
#include "weights/hf_config.h"

namespace deepinfer::cli {

// A flag's integer value, >= 0 (the error names the flag).
Result<int64_t> non_negative_flag(const Args& args, const char* flag, int64_t fallback);
// extra plus --host, --port, --served-model-name, --api-key, --max-queued-requests,
// --max-queued-tokens, --request-timeout, --max-body-bytes, --io-threads, --max-n,
// --shutdown-timeout, --max-image-pixels, --max-images-per-request.
std::set<std::string> server_value_flags(std::set<std::string> extra);
Result<server::ServerConfig> server_config_from_args(const Args& args);
// --max-n, in [1, 65536] (default 128).
Result<int32_t> max_n_from_args(const Args& args);
// --max-image-pixels (>= 1; default kDefaultMaxImagePixels), --max-images-per-request (0..1024,
// default 8) and --allow-image-urls (a bool flag the caller lists).
Result<ImageInputOptions> image_input_from_args(const Args& args);
// --served-model-name, else the model directory's own name through symlinks
// (models/default -> deepinfer-tiny-v3).
std::string served_model_name(const Args& args, const std::string& model_dir);
// The directory's chat family; when it cannot be told, qwen3's, with a line on stderr.
ChatFamily chat_family_or_qwen3(const std::string& model_dir, const char* command);
// The checkpoint's vision encoder that is not run (vision_config's model_type), for the image
// refusal message (ModelContext::skipped_vision_encoder); empty without a vision_config.
std::string skipped_vision_encoder(const ModelConfig& config);

}  // namespace deepinfer::cli
