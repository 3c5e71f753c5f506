// deepinfer bench images: the image encoder's speed (vision tower and projector or merger) on one
// image, as the engine runs it on a step that holds the image. tools/gpu/bench_vision.sh sets it
// beside transformers' tower on the same weights.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "args.h"
#include "commands.h"
#include "recipe/api.h"
#include "session.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage = R"(usage: deepinfer bench images --model DIR [--device cpu|cuda] [--width W] [--height H]
                              [--runs N] [--threads N]
Times the model's image encoder on one W x H image of random pixels (default 1024 x 1024),
preprocessed as the model's processor does (Qwen2.5-VL: resized to its dynamic resolution; Gemma 3:
its fixed square): 2 warm-up calls, then N timed ones (default 10), each until its rows are back in
host memory. Prints one JSON object: the grid, patches and tokens, every run's milliseconds, the
median and the tokens per second at the median.
)";

}  // namespace

int run_bench_images(int argc, char** argv) {
  auto args = Args::parse(argc, argv, model_value_flags({"--width", "--height", "--runs"}), model_bool_flags({}));
  if (!args.ok()) {
    std::fputs(kUsage, stderr);
    return report_error("bench images", args.error());
  }
  auto width = args->get_int("--width", 1024);
  auto height = args->get_int("--height", 1024);
  auto runs = args->get_int("--runs", 10);
  for (const Result<int64_t>* value : {&width, &height, &runs}) {
    if (!value->ok()) return report_error("bench images", value->error());
  }
  if (*width < 1 || *height < 1 || *width * *height > kDefaultMaxImagePixels || *runs < 1) {
    return report_error("bench images",
                        Error{"--width and --height must be positive with at most " +
                              std::to_string(kDefaultMaxImagePixels) + " pixels in all, --runs at least 1"});
  }
  auto loaded = load_model_from_args(*args);
  if (!loaded.ok()) return report_error("bench images", loaded.error());
  CausalLM& model = *loaded->model;
  const ImageInputFormat* format = model.image_input();
  if (format == nullptr) {
    return report_error("bench images", Error{"the model at --model has no image encoder"});
  }

  RgbImage image;
  image.width = static_cast<int32_t>(*width);
  image.height = static_cast<int32_t>(*height);
  image.pixels.resize(static_cast<size_t>(image.num_pixels()) * 3);
  std::mt19937 random(1234);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& value : image.pixels) value = static_cast<uint8_t>(byte(random));
  auto preprocessed = preprocess_image(image, *format);
  if (!preprocessed.ok()) return report_error("bench images", preprocessed.error());
  const std::vector<float>& pixels = preprocessed->pixels;
  const ImageGrid grid = preprocessed->grid;
  const int32_t tokens = format->tokens_for(grid);
  std::vector<float> rows(static_cast<size_t>(format->encoded_values(grid, model.config().hidden_size)));
  constexpr int kWarmups = 2;
  std::vector<double> milliseconds;
  for (int64_t i = 0; i < kWarmups + *runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    model.encode_image(pixels.data(), grid, rows.data());
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    if (i >= kWarmups) milliseconds.push_back(took.count());
  }
  std::vector<double> sorted = milliseconds;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
  nlohmann::json report = {{"model", *args->find("--model")},
                           {"device", args->find("--device").value_or("cpu")},
                           {"width", *width},
                           {"height", *height},
                           {"tokens", tokens},
                           {"runs_ms", milliseconds},
                           {"median_ms", median},
                           {"tokens_per_s", static_cast<double>(tokens) / (median / 1000.0)}};
  if (format->preprocessor == ImageInputFormat::Preprocessor::kQwen2Vl) {
    report["grid"] = {grid.frames, grid.rows, grid.columns};
    report["patches"] = int64_t{grid.frames} * grid.rows * grid.columns;
  }
  std::printf("%s\n", report.dump().c_str());
  return 0;
}

}  // namespace deepinfer::cli
