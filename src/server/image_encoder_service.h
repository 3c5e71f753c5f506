// The image encoder service of `deepinfer serve --role encoder` (docs/images.md): one thread owns a
// multimodal checkpoint's image encoder and runs the images the encode route queues, a request's
// images together, in arrival order (the route's HTTP threads decode and preprocess them). The
// queue is bounded in images and in the tokens they become: past either a request is refused as
// overloaded, and a router then tries another encoder or has its worker encode the image itself.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "core/result.h"
#include "engine/prompt_images.h"
#include "model/image_encoder_model.h"
#include "server/generation_backend.h"
#include "server/metrics.h"

namespace deepinfer::server {

// Each image's rows (ImageInputFormat::encoded_values float32 values), in the request's order.
using EncodedRows = Result<std::vector<std::vector<float>>>;

class ImageEncoderService {
 public:
  // Starts the thread; model and metrics must outlive the service. The queue holds at most
  // max_queued_images images and max_queued_tokens of the tokens they become.
  ImageEncoderService(ImageEncoderModel& model, Metrics& metrics, int32_t max_queued_images, int64_t max_queued_tokens);
  // stop() without a deadline.
  ~ImageEncoderService();
  ImageEncoderService(const ImageEncoderService&) = delete;
  ImageEncoderService& operator=(const ImageEncoderService&) = delete;

  // Thread-safe. Queues the images (preprocessed: pixels and grid), or refuses them at once: the
  // queue is full (overloaded; a request arriving at an empty queue is always taken), or the service
  // is unavailable. The future gets the rows, or the encoder's error.
  std::variant<std::future<EncodedRows>, Refusal> submit(std::vector<ImageInput> images);
  // Thread-safe: why submit would refuse this many images now (checked again by submit), so a
  // request is refused before its images are decoded.
  std::optional<Refusal> refusal(int64_t num_images, int64_t num_tokens) const;
  // Thread-safe: why every request is refused (the device was lost, shutdown began), or nullopt.
  std::optional<std::string> unavailable() const;
  // Thread-safe: refuses new requests with reason and fails the queued ones with it; the image
  // being encoded finishes.
  void shutdown(const std::string& reason);
  // Waits until the thread ended, or deadline: false while it is still inside an encoding.
  bool stop(std::chrono::steady_clock::time_point deadline);
  // Thread-safe: images queued or being encoded, and the tokens they become (a registered
  // encoder's load).
  int64_t queued_images() const;
  int64_t queued_tokens() const;

 private:
  struct Job {
    std::vector<ImageInput> images;
    int64_t tokens = 0;
    std::promise<EncodedRows> rows;
  };

  std::optional<Refusal> refusal_locked(int64_t num_images, int64_t num_tokens) const;
  void loop();
  EncodedRows encode(const std::vector<ImageInput>& images);
  void publish_locked();

  ImageEncoderModel& model_;
  Metrics& metrics_;
  const int32_t max_queued_images_;
  const int64_t max_queued_tokens_;

  mutable std::mutex mutex_;  // guards the fields below, down to thread_done_
  std::condition_variable wake_;
  std::condition_variable done_;
  std::deque<Job> queue_;
  int64_t queued_images_ = 0;  // in queue_ and in the job being encoded
  int64_t queued_tokens_ = 0;
  int64_t encoded_images_ = 0;
  std::optional<std::string> unavailable_;
  bool stop_ = false;
  bool thread_done_ = false;
  std::thread thread_;
};

}  // namespace deepinfer::server
