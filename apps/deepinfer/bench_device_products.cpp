// The device benchmark's decode_product lines: each linear-layer shape of the model alone at a few
// decode batch sizes, as bandwidth beside the copy ceiling. Timed as a captured graph of
// back-to-back products where the backend captures, so host launch cost stays out of the figure.
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_device.h"

namespace deepinfer::cli {
namespace {

struct ProductShape {
  const char* name;
  int64_t out_features;
  int64_t in_features;
};

constexpr int kProductsPerTiming = 20;

}  // namespace

void bench_decode_products(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  const std::vector<ProductShape> shapes = {{"q_proj", q_dim, hidden},
                                            {"k_proj", kv_dim, hidden},
                                            {"o_proj", hidden, q_dim},
                                            {"gate_proj", c.intermediate_size, hidden},
                                            {"down_proj", hidden, c.intermediate_size},
                                            {"lm_head", c.vocab_size, hidden}};
  constexpr int64_t kMaxRows = 8;
  for (const ProductShape& shape : shapes) {
    // Zero weights: the bytes moved, not their values, set the time.
    std::vector<uint16_t> host(static_cast<size_t>(shape.out_features * shape.in_features), 0);
    TensorView tensor;
    tensor.name = shape.name;
    tensor.file = "(bench)";
    tensor.dtype = DType::kBF16;
    tensor.shape = {shape.out_features, shape.in_features};
    tensor.data = host.data();
    tensor.size_bytes = host.size() * sizeof(uint16_t);
    auto weight = backend.load_weight(tensor);
    if (!weight.ok()) throw UserError(weight.error());
    DeviceBuffer x = backend.allocate(static_cast<size_t>(kMaxRows * shape.in_features) * sizeof(float));
    DeviceBuffer y = backend.allocate(static_cast<size_t>(kMaxRows * shape.out_features) * sizeof(float));
    for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}}) {
      const auto products = [&] {
        for (int i = 0; i < kProductsPerTiming; ++i) {
          backend.matmul(x.as<float>(), *weight, kernels::WeightView{}, rows, y.as<float>());
        }
      };
      float sink = 0.0f;
      products();  // plans and lazy set-up outside any capture
      std::unique_ptr<CapturedGraph> graph;
      if (backend.can_capture()) {
        backend.begin_capture();
        products();
        graph = backend.end_capture();
      }
      const auto run = [&] { graph ? backend.replay(*graph) : products(); };
      run();
      backend.copy_to_host(&sink, y.data(), sizeof(float));
      constexpr int kRuns = 5;
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < kRuns; ++r) run();
      backend.copy_to_host(&sink, y.data(), sizeof(float));  // waits for the stream
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / (kRuns * kProductsPerTiming);
      const double bytes = static_cast<double>(host.size() * sizeof(uint16_t));
      std::printf("{\"kind\":\"decode_product\",\"name\":\"%s\",\"n\":%lld,\"k\":%lld,\"rows\":%lld,\"us\":%.2f,"
                  "\"tb_s\":%.3f,\"copy_fraction\":%.3f,\"graph\":%s}\n",
                  shape.name, static_cast<long long>(shape.out_features), static_cast<long long>(shape.in_features),
                  static_cast<long long>(rows), seconds * 1e6, bytes / seconds / 1e12,
                  bytes / seconds / peaks.copy_bytes_per_s, graph ? "true" : "false");
      std::fflush(stdout);
    }
  }
}

}  // namespace deepinfer::cli
