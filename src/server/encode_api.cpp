// The image encoder's wire format and route.
#include "server/encode_api.h"

#include <bit>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "core/base64.h"
#include "core/sha256.h"
#include "server/image_encoder_service.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
using Json = nlohmann::json;

static_assert(std::endian::native == std::endian::little, "the encoded rows travel as little-endian float32");

[[noreturn]] void bad(const std::string& what, const Json& where) {
  throw nlohmann::json::other_error::create(501, what, &where);
}

BlockHash hash_from_hex(const std::string& hex, const Json& where) {
  BlockHash hash{};
  if (hex.size() != 2 * hash.size()) bad("hash must be 64 hex digits", where);
  for (size_t i = 0; i < hash.size(); ++i) {
    unsigned value = 0;
    for (const char c : hex.substr(2 * i, 2)) {
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) bad("hash must be 64 lowercase hex digits", where);
      value = value * 16 + static_cast<unsigned>(digit);
    }
    hash[i] = static_cast<uint8_t>(value);
  }
  return hash;
}

}  // namespace

Json encode_request_to_json(const std::vector<ImageInput>& images) {
  Json files = Json::array();
  for (const ImageInput& image : images) files.push_back(Json{{"file", encode_base64(image.file)}});
  return Json{{"images", std::move(files)}};
}

Json encoded_image_to_json(const ImageInput& image) {
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(image.rows.data()),
                                       image.rows.size() * sizeof(float));
  return Json{{"grid", {image.grid.frames, image.grid.rows, image.grid.columns}},
              {"hash", to_hex(image_content_hash(image))},
              {"rows", encode_base64(bytes)}};
}

Result<ImageInput> encoded_image_from_json(const Json& json) {
  try {
    ImageInput image;
    const Json& grid = json.at("grid");
    if (!grid.is_array() || grid.size() != 3) bad("grid must be [frames, rows, columns]", json);
    image.grid = ImageGrid{grid[0].get<int32_t>(), grid[1].get<int32_t>(), grid[2].get<int32_t>()};
    image.hash = hash_from_hex(json.at("hash").get<std::string>(), json);
    Result<std::vector<uint8_t>> bytes = try_decode_base64(json.at("rows").get<std::string>());
    if (!bytes.ok()) bad("rows: " + bytes.error().message, json);
    if (bytes->empty() || bytes->size() % sizeof(float) != 0)
      bad("rows must be a whole number of float32 values", json);
    image.rows.resize(bytes->size() / sizeof(float));
    std::memcpy(image.rows.data(), bytes->data(), bytes->size());
    return image;
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("bad encoded image: ") + e.what()};
  }
}

Result<std::vector<ImageInput>> encode_response_from_json(const Json& json, size_t expected) {
  const auto images = json.is_object() ? json.find("images") : json.end();
  if (images == json.end() || !images->is_array() || images->size() != expected) {
    return Error{"the encoder's answer does not hold the " + std::to_string(expected) + " images asked for"};
  }
  std::vector<ImageInput> encoded;
  for (const Json& image : *images) {
    Result<ImageInput> one = encoded_image_from_json(image);
    if (!one.ok()) return one.error();
    encoded.push_back(std::move(*one));
  }
  return encoded;
}

asio::awaitable<bool> handle_image_encoding(TcpStream& stream, const HttpRequest& request, ServerContext& context) {
  const std::string endpoint(kEncodeApiPath);
  const double timeout_s = context.config.write_timeout_s;
  const auto answer = [&](http::status status, const Json& body) {
    context.metrics->record_request(endpoint, static_cast<int>(status));
    HttpResponse response = make_response(request, status, body.dump());
    response.keep_alive(false);
    return response;
  };
  const auto refuse = [&](http::status status, const std::string& message) {
    return answer(status, Json{{"error", message}});
  };
  const Json body = Json::parse(request.body(), nullptr, /*allow_exceptions=*/false);
  const auto files = body.is_object() ? body.find("images") : body.end();
  std::optional<HttpResponse> refused;
  std::vector<ImageInput> images;
  if (files == body.end() || !files->is_array() || files->empty()) {
    refused =
        refuse(http::status::bad_request, std::string("the body must be {\"images\": [{\"file\": base64}, ...]}"));
  } else if (files->size() > static_cast<size_t>(context.model.images.max_images)) {
    refused = refuse(http::status::bad_request,
                     "the request holds " + std::to_string(files->size()) + " images; this encoder takes at most " +
                         std::to_string(context.model.images.max_images) + " (--max-images-per-request)");
  }
  for (size_t i = 0; !refused && i < files->size(); ++i) {
    const std::string name = "images[" + std::to_string(i) + "]";
    const Json& part = (*files)[i];
    const auto file = part.is_object() ? part.find("file") : part.end();
    Result<std::vector<uint8_t>> bytes = file != part.end() && file->is_string()
                                             ? try_decode_base64(file->get<std::string>())
                                             : Result<std::vector<uint8_t>>(Error{"'file' must be a base64 string"});
    if (!bytes.ok()) {
      refused = refuse(http::status::bad_request, name + ": " + bytes.error().message);
    } else if (auto error = read_image_file(std::move(*bytes), "", name, context.model, images)) {
      refused = refuse(http::status::bad_request, error->message);
    }
  }
  if (refused) co_return co_await write_response(stream, std::move(*refused), timeout_s);
  // What the answer names each image by; the pixels go to the encoder.
  std::vector<ImageInput> answered(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    answered[i].grid = images[i].grid;
    answered[i].hash = images[i].hash;
  }
  auto queued = context.encoder->submit(std::move(images));
  if (const Refusal* refusal = std::get_if<Refusal>(&queued)) {
    const auto status = refusal->overloaded ? http::status::too_many_requests : http::status::service_unavailable;
    HttpResponse response = refuse(status, refusal->message);
    co_return co_await write_response(stream, std::move(response), timeout_s);
  }
  std::future<EncodedRows>& done = std::get<std::future<EncodedRows>>(queued);
  // The encoder's thread fills the future; this connection's thread polls it, serving others meanwhile.
  asio::steady_timer poll(co_await asio::this_coro::executor);
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    poll.expires_after(std::chrono::milliseconds(1));
    co_await poll.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  EncodedRows rows = done.get();
  if (!rows.ok()) {
    HttpResponse response = refuse(http::status::service_unavailable, rows.error().message);
    co_return co_await write_response(stream, std::move(response), timeout_s);
  }
  Json encoded = Json::array();
  for (size_t i = 0; i < answered.size(); ++i) {
    answered[i].rows = std::move((*rows)[i]);
    encoded.push_back(encoded_image_to_json(answered[i]));
  }
  HttpResponse response = answer(http::status::ok, Json{{"images", std::move(encoded)}});
  co_return co_await write_response(stream, std::move(response), timeout_s);
}

}  // namespace deepinfer::server
