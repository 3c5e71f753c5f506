// The image encoder's wire format and route.
#include "server/encode_api.h"

#include <algorithm>
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
#include "core/dtype.h"
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

}  // namespace

Json encode_request_to_json(const std::vector<ImageInput>& images) {
  Json files = Json::array();
  for (const ImageInput& image : images) files.push_back(Json{{"file", encode_base64(image.file)}});
  return Json{{"images", std::move(files)}};
}

Json encoded_image_to_json(const ImageInput& image) {
  Json json{{"grid", {image.grid.frames, image.grid.rows, image.grid.columns}},
            {"hash", to_hex(image_content_hash(image))}};
  // Rows a bf16 checkpoint's encoder rounded to bf16 travel as their 16 high bits: half the bytes,
  // the same values.
  const bool bf16 = std::all_of(image.rows.begin(), image.rows.end(),
                                [](float v) { return (std::bit_cast<uint32_t>(v) & 0xffffu) == 0; });
  if (bf16) {
    std::vector<uint16_t> high(image.rows.size());
    for (size_t i = 0; i < high.size(); ++i)
      high[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(image.rows[i]) >> 16);
    json["dtype"] = "bf16";
    json["rows"] = encode_base64({reinterpret_cast<const uint8_t*>(high.data()), high.size() * sizeof(uint16_t)});
  } else {
    json["dtype"] = "f32";
    json["rows"] =
        encode_base64({reinterpret_cast<const uint8_t*>(image.rows.data()), image.rows.size() * sizeof(float)});
  }
  return json;
}

Result<ImageInput> encoded_image_from_json(const Json& json) {
  try {
    ImageInput image;
    const Json& grid = json.at("grid");
    if (!grid.is_array() || grid.size() != 3) bad("grid must be [frames, rows, columns]", json);
    image.grid = ImageGrid{grid[0].get<int32_t>(), grid[1].get<int32_t>(), grid[2].get<int32_t>()};
    image.hash = digest_from_hex(json.at("hash").get<std::string>());
    if (!image.hash) bad("hash must be 64 lowercase hex digits", json);
    const std::string dtype = json.contains("dtype") ? json.at("dtype").get<std::string>() : "f32";
    if (dtype != "f32" && dtype != "bf16") bad("dtype must be f32 or bf16", json);
    const size_t width = dtype == "bf16" ? sizeof(uint16_t) : sizeof(float);
    Result<std::vector<uint8_t>> bytes = try_decode_base64(json.at("rows").get<std::string>());
    if (!bytes.ok()) bad("rows: " + bytes.error().message, json);
    if (bytes->empty() || bytes->size() % width != 0) bad("rows must be a whole number of " + dtype + " values", json);
    image.rows.resize(bytes->size() / width);
    if (dtype == "f32") {
      std::memcpy(image.rows.data(), bytes->data(), bytes->size());
    } else {
      for (size_t i = 0; i < image.rows.size(); ++i) {
        uint16_t high = 0;
        std::memcpy(&high, bytes->data() + 2 * i, sizeof(high));
        image.rows[i] = bf16_to_f32(high);
      }
    }
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
  } else if (std::optional<Refusal> full = context.encoder->refusal(static_cast<int64_t>(files->size()), 0)) {
    // Before any image is decoded: an overloaded encoder answers at once.
    refused =
        refuse(full->overloaded ? http::status::too_many_requests : http::status::service_unavailable, full->message);
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
    // The encoder is gone (shutdown, a lost device): 503; only this request's encoding failed: 500.
    const auto status =
        context.encoder->unavailable() ? http::status::service_unavailable : http::status::internal_server_error;
    HttpResponse response = refuse(status, rows.error().message);
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
