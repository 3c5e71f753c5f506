// ImageEncoderService: the encoder's thread and its bounded queue.
#include "server/image_encoder_service.h"

#include <exception>
#include <utility>

#include "core/device_error.h"
#include "core/logging.h"

namespace deepinfer::server {

ImageEncoderService::ImageEncoderService(ImageEncoderModel& model, Metrics& metrics, int32_t max_queued_images,
                                         int64_t max_queued_tokens)
    : model_(model), metrics_(metrics), max_queued_images_(max_queued_images), max_queued_tokens_(max_queued_tokens) {
  {
    std::lock_guard lock(mutex_);
    publish_locked();
  }
  thread_ = std::thread([this] { loop(); });
}

ImageEncoderService::~ImageEncoderService() {
  stop(std::chrono::steady_clock::time_point::max());
  if (thread_.joinable()) thread_.join();
}

std::variant<std::future<EncodedRows>, Refusal> ImageEncoderService::submit(std::vector<ImageInput> images) {
  const ImageInputFormat& format = model_.encoder->format();
  Job job;
  for (const ImageInput& image : images) job.tokens += format.tokens_for(image.grid);
  const auto count = static_cast<int64_t>(images.size());
  job.images = std::move(images);
  std::future<EncodedRows> rows = job.rows.get_future();
  {
    std::lock_guard lock(mutex_);
    if (std::optional<Refusal> refused = refusal_locked(count, job.tokens)) return *refused;
    queued_images_ += count;
    queued_tokens_ += job.tokens;
    queue_.push_back(std::move(job));
    publish_locked();
  }
  wake_.notify_one();
  return rows;
}

std::optional<Refusal> ImageEncoderService::refusal(int64_t num_images, int64_t num_tokens) const {
  std::lock_guard lock(mutex_);
  return refusal_locked(num_images, num_tokens);
}

std::optional<Refusal> ImageEncoderService::refusal_locked(int64_t num_images, int64_t num_tokens) const {
  if (unavailable_) return Refusal{false, *unavailable_};
  // A request that arrives at an empty queue is always taken.
  if (queued_images_ > 0 && queued_images_ + num_images > max_queued_images_) {
    return Refusal{true, "this image encoder has " + std::to_string(queued_images_) +
                             " images queued; it takes at most " + std::to_string(max_queued_images_) +
                             " (--max-queued-requests)"};
  }
  if (queued_images_ > 0 && queued_tokens_ + num_tokens > max_queued_tokens_) {
    return Refusal{true, "this image encoder has images of " + std::to_string(queued_tokens_) +
                             " tokens queued; it takes at most " + std::to_string(max_queued_tokens_) +
                             " (--max-queued-tokens)"};
  }
  return std::nullopt;
}

std::optional<std::string> ImageEncoderService::unavailable() const {
  std::lock_guard lock(mutex_);
  return unavailable_;
}

void ImageEncoderService::shutdown(const std::string& reason) {
  std::deque<Job> dropped;
  {
    std::lock_guard lock(mutex_);
    if (!unavailable_) unavailable_ = reason;
    stop_ = true;
    dropped.swap(queue_);
    for (const Job& job : dropped) {
      queued_images_ -= static_cast<int64_t>(job.images.size());
      queued_tokens_ -= job.tokens;
    }
    publish_locked();
  }
  for (Job& job : dropped) job.rows.set_value(Error{reason});
  wake_.notify_one();
}

bool ImageEncoderService::stop(std::chrono::steady_clock::time_point deadline) {
  shutdown("the image encoder is shutting down");
  std::unique_lock lock(mutex_);
  return done_.wait_until(lock, deadline, [this] { return thread_done_; });
}

int64_t ImageEncoderService::queued_images() const {
  std::lock_guard lock(mutex_);
  return queued_images_;
}

int64_t ImageEncoderService::queued_tokens() const {
  std::lock_guard lock(mutex_);
  return queued_tokens_;
}

void ImageEncoderService::publish_locked() {
  metrics_.set_encoder(EncoderGauges{queued_images_, queued_tokens_, encoded_images_});
}

EncodedRows ImageEncoderService::encode(const std::vector<ImageInput>& images) {
  const ImageInputFormat& format = model_.encoder->format();
  std::vector<std::vector<float>> rows;
  for (const ImageInput& image : images) {
    const auto started = std::chrono::steady_clock::now();
    rows.emplace_back(static_cast<size_t>(format.encoded_values(image.grid, model_.row_width())));
    model_.encoder->encode(image.pixels.data(), image.grid, rows.back().data());
    metrics_.observe_image_encode(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return rows;
}

void ImageEncoderService::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) break;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    EncodedRows rows = Error{"not encoded"};
    try {
      rows = encode(job.images);
    } catch (const std::exception& e) {
      rows = Error{std::string("the image encoder failed: ") + e.what()};
      if (loses_device(e)) {
        DI_LOG(kError, "image encoder: the device is lost (" << e.what() << "); refusing every request");
        std::lock_guard lock(mutex_);
        unavailable_ = std::string("the image encoder's device is lost: ") + e.what();
      }
    }
    {
      std::lock_guard lock(mutex_);
      queued_images_ -= static_cast<int64_t>(job.images.size());
      queued_tokens_ -= job.tokens;
      if (rows.ok()) encoded_images_ += static_cast<int64_t>(job.images.size());
      publish_locked();
    }
    job.rows.set_value(std::move(rows));
  }
  std::lock_guard lock(mutex_);
  thread_done_ = true;
  done_.notify_all();
}

}  // namespace deepinfer::server
