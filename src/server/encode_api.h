// The image encoder service's internal API (serve --role encoder; docs/images.md): a router POSTs
// a request's image files to kEncodeApiPath, {"images": [{"file": base64}, ...]}, and gets each
// image's encoder output back, {"images": [encoded image, ...]} in the same order, which it then
// sends its prefill or role "both" worker in the token-level API's "images" instead of the file.
// An encoded image: {"grid": [frames, rows, columns], "hash": 64 hex digits, "dtype": "f32" or
// "bf16", "rows": base64 of the rows, little-endian}. The rows are the encoder's float32 output as
// is (bf16: every value is one, as a bf16 checkpoint's encoder rounds them, so only their high 16
// bits travel), so a worker that takes them computes what it would from the file; the hash is the
// one the engine names the image by in its prefix cache (image_content_hash of the pixels), so both
// hit the same blocks. A worker trusts both: its token-level API belongs behind --api-key.
// Refusals are plain JSON, {"error": message}: 400 (a bad file, naming images[i]), 429 (the
// encoder's queue is full), 500 (this request's encoding failed), 503 (unavailable: shutting down,
// or its device lost).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "engine/prompt_images.h"
#include "server/server_context.h"

namespace deepinfer::server {

inline constexpr std::string_view kEncodeApiPath = "/internal/v1/encode";

// The request for these images: their files.
nlohmann::json encode_request_to_json(const std::vector<ImageInput>& images);

// An encoded image (rows, grid and hash set) and back; errors name the field. The rows' count is
// not checked against the grid here: the engine does (PromptImageCache::take).
nlohmann::json encoded_image_to_json(const ImageInput& image);
Result<ImageInput> encoded_image_from_json(const nlohmann::json& json);

// An encoder's 200 answer: the images in order, as many as asked for.
Result<std::vector<ImageInput>> encode_response_from_json(const nlohmann::json& json, size_t expected);

// POST kEncodeApiPath on an image encoder (context.encoder set): decodes and preprocesses each file
// for its model (the worker's --max-image-pixels and --max-images-per-request apply), queues them
// and answers once they are encoded. Returns false: the connection closes after it.
boost::asio::awaitable<bool> handle_image_encoding(TcpStream& stream, const HttpRequest& request,
                                                   ServerContext& context);

}  // namespace deepinfer::server
