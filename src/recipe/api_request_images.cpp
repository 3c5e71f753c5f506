// Image parts of the chat APIs' messages: OpenAI Chat image_url parts, Responses input_image parts
// and Anthropic image blocks. Each is read (data: URL or base64 source) and decoded at parse time,
// so a bad image is a 400 naming its part; a model with an image encoder gets it preprocessed as
// its processor would, a text-only model refuses a good one.
#include <algorithm>
#include <cctype>
#include <string_view>

#include "core/base64.h"
#include "engine/prompt_images.h"
#include "image/image.h"
#include "image/preprocess.h"
#include "recipe/api_request_internal.h"

namespace deepinfer::api {
namespace {

// Where an image part's bytes are: a URL (data: or http(s):), or Anthropic's base64 source.
struct ImageSource {
  std::string url;
  std::string media_type;  // declared by the sender; empty when none was
  std::string base64;
};

// "data:[<media type>][;param=value]*;base64,<data>" -> media type and data.
std::variant<ImageSource, ApiError> read_data_url(std::string_view url, const std::string& path) {
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) {
    return bad_request(path, path + ": malformed data: URL (no ',' before the data)");
  }
  const std::string_view header = url.substr(5, comma - 5);  // after "data:"
  constexpr std::string_view kBase64 = ";base64";
  if (header.size() < kBase64.size() || header.substr(header.size() - kBase64.size()) != kBase64) {
    return bad_request(path, path + ": image data: URLs must be base64 encoded (data:image/png;base64,...)");
  }
  const std::string_view media_type = header.substr(0, header.find(';'));
  return ImageSource{"", std::string(media_type), std::string(url.substr(comma + 1))};
}

// http:// or https://, the scheme in any case.
bool is_remote_url(std::string_view url) {
  const auto scheme_is = [&](std::string_view scheme) {
    return url.size() >= scheme.size() && std::equal(scheme.begin(), scheme.end(), url.begin(), [](char s, char u) {
             return s == std::tolower(static_cast<unsigned char>(u));
           });
  };
  return scheme_is("http://") || scheme_is("https://");
}

// An http(s) URL reaches here only when the server does not fetch it: with --allow-image-urls the
// server layer has put the fetched file in its place as a data: URL (remote_image_urls).
std::variant<ImageSource, ApiError> resolve_url(const std::string& url, const std::string& path) {
  if (url.rfind("data:", 0) == 0) return read_data_url(url, path);
  if (is_remote_url(url)) {
    return bad_request(path,
                       path +
                           ": image URLs are not fetched unless the server is started with "
                           "--allow-image-urls; send the image inline as a data: URL (data:image/png;base64,...)");
  }
  return bad_request(path, path + ": expected a data: URL (data:image/png;base64,...) or an http(s) URL");
}

// A good image sent to a model that reads none.
ApiError refuse_images(const std::string& path, const ModelContext& model) {
  std::string refusal = path;
  refusal.append(": model ").append(model.served_name);
  if (model.skipped_vision_encoder.empty()) {
    refusal.append(" does not accept images (it has no vision encoder)");
  } else {
    refusal.append(" does not accept images yet: its language model is served without its ")
        .append(model.skipped_vision_encoder)
        .append(" vision encoder");
  }
  return bad_request(path, refusal);
}

std::optional<ApiError> read_image(ImageSource source, const std::string& path, const ModelContext& model,
                                   std::vector<ImageInput>& images) {
  // A URL the server would fetch only to refuse what it finds: refused unfetched.
  if (model.images.allow_urls && model.image_input == nullptr && is_remote_url(source.url)) {
    return refuse_images(path, model);
  }
  if (!source.url.empty()) {
    auto resolved = resolve_url(source.url, path);
    if (auto* e = std::get_if<ApiError>(&resolved)) return *e;
    source = std::get<ImageSource>(std::move(resolved));
  }
  Result<std::vector<uint8_t>> bytes = try_decode_base64(source.base64);
  if (!bytes.ok()) return bad_request(path, path + ": " + bytes.error().message);
  return read_image_file(std::move(*bytes), source.media_type, path, model, images);
}

// OpenAI Chat {"type": "image_url", "image_url": {"url": ...}} (a bare string URL is taken too).
std::variant<ImageSource, ApiError> chat_image_source(const Json& part, const std::string& path) {
  const Json* image_url = find_field(part, "image_url");
  if (image_url != nullptr && image_url->is_object()) image_url = find_field(*image_url, "url");
  if (image_url == nullptr || !image_url->is_string()) {
    return bad_request(path + ".image_url", path + ".image_url: expected {\"url\": \"data:image/...;base64,...\"}");
  }
  return ImageSource{image_url->get<std::string>(), "", ""};
}

// Responses {"type": "input_image", "image_url": "data:..."}; file_id images are not stored here.
std::variant<ImageSource, ApiError> responses_image_source(const Json& part, const std::string& path) {
  if (find_field(part, "file_id") != nullptr) {
    return bad_request(path + ".file_id",
                       path + ".file_id: this server stores no files; send image_url as a data: URL");
  }
  const Json* image_url = find_field(part, "image_url");
  if (image_url == nullptr || !image_url->is_string()) {
    return bad_request(path + ".image_url", path + ".image_url: expected a string (data:image/...;base64,...)");
  }
  return ImageSource{image_url->get<std::string>(), "", ""};
}

// Anthropic {"type": "image", "source": {"type": "base64", "media_type": ..., "data": ...}} or
// {"type": "url", "url": ...}.
std::variant<ImageSource, ApiError> messages_image_source(const Json& block, const std::string& path) {
  const Json* source = find_field(block, "source");
  const std::string source_path = path + ".source";
  if (source == nullptr || !source->is_object()) return bad_request(source_path, source_path + ": expected an object");
  const std::string type = source->value("type", "");
  if (type == "url") {
    if (auto e = check_string(*source, "url", source_path)) return *e;
    return ImageSource{source->value("url", ""), "", ""};
  }
  if (type != "base64") {
    return bad_request(source_path + ".type", source_path + ".type: expected base64 or url, got '" + type + "'");
  }
  for (const char* key : {"media_type", "data"}) {
    const Json* value = find_field(*source, key);
    if (value == nullptr || !value->is_string()) {
      return bad_request(source_path + "." + key, source_path + "." + key + ": expected a string");
    }
  }
  return ImageSource{"", (*source)["media_type"].get<std::string>(), (*source)["data"].get<std::string>()};
}

// An image part of a request body: the part, where it is (for messages) and its JSON pointer.
struct ImagePart {
  const Json* part = nullptr;
  std::string path;     // "messages[1].content[0]"
  std::string pointer;  // "/messages/1/content/0"
};

// The body's image parts in order, counted before any is read; an error past max_images, or for
// Hugging Face's {"type": "image"}, which carries no image in Chat Completions.
std::variant<std::vector<ImagePart>, ApiError> find_image_parts(ApiKind kind, const Json& body, int32_t max_images) {
  const char* items_field = kind == ApiKind::kResponses ? "input" : "messages";
  const char* image_type = kind == ApiKind::kChatCompletions ? "image_url"
                           : kind == ApiKind::kResponses     ? "input_image"
                                                             : "image";
  std::vector<ImagePart> parts;
  const Json* items = find_field(body, items_field);
  if (items == nullptr || !items->is_array()) return parts;  // the API's own parser names it
  for (size_t i = 0; i < items->size(); ++i) {
    const Json& item = (*items)[i];
    const Json* content = item.is_object() ? find_field(item, "content") : nullptr;
    if (content == nullptr || !content->is_array()) continue;
    for (size_t j = 0; j < content->size(); ++j) {
      const Json& part = (*content)[j];
      if (!part.is_object()) continue;
      const std::string type = part.value("type", "");
      const std::string path =
          std::string(items_field) + "[" + std::to_string(i) + "].content[" + std::to_string(j) + "]";
      // Hugging Face's {"type": "image"} (which the conversation takes for its templates) carries
      // no image in this API.
      if (kind == ApiKind::kChatCompletions && type == "image") {
        return bad_request(path + ".type", path +
                                               ".type: Chat Completions images are {\"type\": \"image_url\", "
                                               "\"image_url\": {\"url\": \"data:image/...;base64,...\"}}");
      }
      if (type == image_type) {
        parts.push_back(
            {&part, path, "/" + std::string(items_field) + "/" + std::to_string(i) + "/content/" + std::to_string(j)});
      }
    }
  }
  if (parts.size() > static_cast<size_t>(max_images)) {
    const std::string& path = parts[static_cast<size_t>(max_images)].path;
    return bad_request(path, path + ": the request holds " + std::to_string(parts.size()) +
                                 " images; the server takes at most " + std::to_string(max_images) +
                                 " (--max-images-per-request)");
  }
  return parts;
}

}  // namespace

std::optional<ApiError> read_image_parts(ApiKind kind, const Json& body, const ModelContext& model,
                                         std::vector<ImageInput>& images) {
  auto found = find_image_parts(kind, body, model.images.max_images);
  if (auto* e = std::get_if<ApiError>(&found)) return *e;
  for (const ImagePart& image : std::get<std::vector<ImagePart>>(found)) {
    const Json* part = image.part;
    const std::string& path = image.path;
    auto source = kind == ApiKind::kChatCompletions ? chat_image_source(*part, path)
                  : kind == ApiKind::kResponses     ? responses_image_source(*part, path)
                                                    : messages_image_source(*part, path);
    if (auto* e = std::get_if<ApiError>(&source)) return *e;
    if (auto e = read_image(std::get<ImageSource>(std::move(source)), path, model, images)) return e;
  }
  return std::nullopt;
}

std::optional<ApiError> place_images(ApiRequest& request, const ModelContext& model, const std::string& field) {
  if (request.images.empty()) return std::nullopt;
  const ImageInputFormat& format = *model.image_input;
  const std::vector<int32_t>& ids = request.prompt_token_ids;
  size_t placed = 0;
  for (size_t t = 0; t < ids.size();) {
    if (ids[t] != format.image_token_id) {
      ++t;
      continue;
    }
    size_t end = t;
    while (end < ids.size() && ids[end] == format.image_token_id) ++end;
    // The template writes each image's placeholders between the model's delimiters (a tokenizer
    // that lacks them as added tokens spells them as text instead).
    const bool delimited = (format.begin_token_id < 0 || (t > 0 && ids[t - 1] == format.begin_token_id)) &&
                           (format.end_token_id < 0 || (end < ids.size() && ids[end] == format.end_token_id));
    const int32_t expected =
        placed < request.images.size() ? format.tokens_for(request.images[placed].grid) : format.tokens_per_image;
    if (end - t != static_cast<size_t>(expected) || !delimited) {
      return bad_request(field, field + ": the prompt holds " + std::to_string(end - t) +
                                    " image placeholder tokens at token " + std::to_string(t) +
                                    " that are not one image of " + std::to_string(expected) +
                                    " between the model's image delimiters (does the tokenizer have them?)");
    }
    if (placed < request.images.size()) request.images[placed].first_token = static_cast<int32_t>(t);
    ++placed;
    t = end;
  }
  if (placed != request.images.size()) {
    return bad_request(field, field + ": the messages hold " + std::to_string(request.images.size()) +
                                  " images but the chat template placed " + std::to_string(placed) +
                                  " (images are read in user and assistant turns)");
  }
  return std::nullopt;
}

}  // namespace deepinfer::api

namespace deepinfer {

Result<ImageInput> preprocess_image(const RgbImage& image, const ImageInputFormat& format, bool make_pixels) {
  ImageInput input;
  input.first_token = -1;  // placed once the prompt is encoded (place_images)
  if (format.preprocessor == ImageInputFormat::Preprocessor::kGemma3) {
    if (make_pixels) input.pixels = preprocess_gemma3(image, format.image_size);
    return input;
  }
  if (!make_pixels) {
    // The grid (how many tokens the image takes) from the resized size alone.
    auto size = try_qwen2_vl_smart_resize(image.height, image.width, format.patch_size * format.merge_size,
                                          format.min_pixels, format.max_pixels);
    if (!size.ok()) return size.error();
    input.grid = {1, size->first / format.patch_size, size->second / format.patch_size};
    return input;
  }
  Qwen2VlProcessorConfig processor;
  processor.patch_size = format.patch_size;
  processor.temporal_patch_size = format.temporal_patch_size;
  processor.merge_size = format.merge_size;
  processor.min_pixels = format.min_pixels;
  processor.max_pixels = format.max_pixels;
  processor.image_mean = format.image_mean;
  processor.image_std = format.image_std;
  auto pixels = try_preprocess_qwen2_vl(image, processor);
  if (!pixels.ok()) return pixels.error();
  const auto& [frames, rows, columns] = pixels->grid_thw;
  input.grid = {static_cast<int32_t>(frames), static_cast<int32_t>(rows), static_cast<int32_t>(columns)};
  input.pixels = std::move(pixels->pixel_values);
  return input;
}

std::optional<ApiError> read_image_file(std::vector<uint8_t> file, const std::string& media_type,
                                        const std::string& path, const ModelContext& model,
                                        std::vector<ImageInput>& images) {
  Result<RgbImage> image = try_decode_image(
      file, ImageDecodeOptions{.max_pixels = model.images.max_pixels, .declared_media_type = media_type});
  if (!image.ok()) return api::bad_request(path, path + ": " + image.error().message);
  if (model.image_input != nullptr) {
    auto input = preprocess_image(*image, *model.image_input, model.images.preprocess);
    if (!input.ok()) return api::bad_request(path, path + ": " + input.error().message);
    if (model.images.preprocess) input->hash = image_content_hash(*input);
    input->file = std::move(file);
    images.push_back(std::move(*input));
    return std::nullopt;
  }
  return api::refuse_images(path, model);
}

std::variant<std::vector<RemoteImageUrl>, ApiError> remote_image_urls(ApiKind kind, const nlohmann::ordered_json& body,
                                                                      const ModelContext& model) {
  // Completions reads no messages, and a model without an image encoder refuses its images
  // unfetched (read_image_parts).
  if (kind == ApiKind::kCompletions || model.image_input == nullptr) return std::vector<RemoteImageUrl>{};
  auto found = api::find_image_parts(kind, body, model.images.max_images);
  if (auto* e = std::get_if<ApiError>(&found)) return *e;
  std::vector<RemoteImageUrl> urls;
  for (const api::ImagePart& image : std::get<std::vector<api::ImagePart>>(found)) {
    // Where each API keeps the URL; a part of the wrong shape is left for the parser to name.
    const nlohmann::ordered_json& part = *image.part;
    std::string field;
    if (kind == ApiKind::kChatCompletions) {
      const nlohmann::ordered_json* image_url = api::find_field(part, "image_url");
      field = image_url != nullptr && image_url->is_object() ? "/image_url/url" : "/image_url";
    } else if (kind == ApiKind::kResponses) {
      field = "/image_url";
    } else {
      field = "/source/url";
    }
    const nlohmann::ordered_json::json_pointer pointer(image.pointer + field);
    if (body.contains(pointer) && body[pointer].is_string() &&
        api::is_remote_url(body[pointer].get_ref<const std::string&>())) {
      urls.push_back({image.path, image.pointer + field, body[pointer].get<std::string>()});
    }
  }
  return urls;
}

}  // namespace deepinfer
