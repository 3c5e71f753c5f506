// CudaBackend: the Backend vtable over kernels/cuda on one device and one stream.
#include "runtime/cuda/cuda_backend.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/gemv_fp8.h"
#include "kernels/ref/dequantize.h"
#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {
namespace {

// Batches with a prompt of at least this many new tokens take the tensor-core prefill kernel
// (16-bit models only), unless its bf16 copy of the keys and values would exceed the byte cap.
constexpr int32_t kTensorCorePrefillTokens = 64;
constexpr size_t kMaxPrefillWorkspaceBytes = size_t{1} << 30;
constexpr int64_t kExpandedMlaTokensPerSeq = 32;

}  // namespace

CudaBackend::CudaBackend(const BackendOptions& options)
    : batch_invariant_(options.batch_invariant),
      kv_cache_dtype_(options.kv_cache_dtype),
      packed_weights_(options.packed_weights),
      graphs_(options.graphs),
      fused_decode_(options.fused_decode),
      gemm_(options.batch_invariant) {
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_ = kc::OpStream(stream);
  main_stream_ = stream;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
  staging_ = std::make_unique<PinnedStaging>(stream_.for_op());
  readbacks_ = std::make_unique<PinnedReadbacks>(stream_.for_op());
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
  moe_route_done_ = allocate(sizeof(int32_t));
  DI_CUDA_CHECK(cudaMemsetAsync(moe_route_done_.data(), 0, sizeof(int32_t), stream_.for_op()));
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_.for_op());
  staging_.reset();
  readbacks_.reset();
  cudaStreamSynchronize(side_stream_);
  for (void* p : weights_) allocator_.deallocate(p);
  cudaEventDestroy(fork_event_);
  cudaEventDestroy(join_event_);
  cudaStreamDestroy(side_stream_);
  cudaStreamDestroy(main_stream_);
}

Result<kernels::WeightView> CudaBackend::load_weight(const TensorView& tensor) {
  if (tensor.dtype != DType::kF32 && tensor.dtype != DType::kBF16 && tensor.dtype != DType::kF16) {
    return Error{"tensor " + tensor.name + " in " + tensor.file + " has dtype " +
                 std::string(dtype_name(tensor.dtype)) + "; the CUDA backend takes F32, BF16 or F16 weights"};
  }
  if (tensor.shape.empty() || tensor.shape.size() > 2) {
    return Error{"tensor " + tensor.name + " in " + tensor.file + " has shape " + shape_to_string(tensor.shape) +
                 "; expected a vector or a matrix"};
  }
  kernels::WeightView view;
  view.dtype = tensor.dtype;
  view.rows = tensor.shape.size() == 2 ? tensor.shape[0] : 1;
  view.cols = tensor.shape.back();
  const size_t bytes = static_cast<size_t>(view.rows * view.cols) * dtype_size_bytes(view.dtype);
  void* device = allocator_.allocate(bytes);
  weights_.push_back(device);
  upload(device, tensor.data, bytes);
  view.data = device;
  return view;
}

Result<kernels::WeightView> CudaBackend::load_packed_weight(const kernels::WeightView& packed) {
  const auto upload_copy = [&](const void* src, size_t bytes) {
    void* device = allocator_.allocate(bytes);
    weights_.push_back(device);
    upload(device, src, bytes);
    return device;
  };
  if (packed.dtype == DType::kMxfp4 && reads_packed_weights(DType::kMxfp4, WeightUse::kExperts) &&
      packed.scales != nullptr && packed.cols % kernels::kMxfp4Block == 0) {
    const int64_t scale_bytes = kc::mxfp4_row_max_offset(packed.rows, packed.cols);
    std::vector<uint8_t> scales(static_cast<size_t>(kc::mxfp4_device_scale_bytes(packed.rows, packed.cols)));
    std::copy_n(static_cast<const uint8_t*>(packed.scales), scale_bytes, scales.begin());
    kc::fill_mxfp4_row_max(scales.data(), packed.rows, packed.cols);
    kernels::WeightView view = packed;
    view.data = upload_copy(packed.data, static_cast<size_t>(packed.rows * packed.cols / 2));
    view.scales = upload_copy(scales.data(), scales.size());
    return view;
  }
  if (!reads_packed_weights(packed.dtype, WeightUse::kMatmul) || packed.scales == nullptr) {
    return Backend::load_packed_weight(packed);
  }
  kernels::WeightView host = packed;
  host.data = nullptr;  // fp8_layout_supported checks the device copy's alignment, not the file's
  if (!kc::fp8_layout_supported(host)) {
    std::vector<float> values(static_cast<size_t>(packed.rows * packed.cols));
    for (int64_t r = 0; r < packed.rows; ++r) kernels::ref::dequantize_weight_row(packed, r, &values[r * packed.cols]);
    TensorView tensor;
    tensor.name = "(an FP8 weight dequantised at load)";
    tensor.dtype = DType::kF32;
    tensor.shape = {packed.rows, packed.cols};
    tensor.data = values.data();
    tensor.size_bytes = values.size() * sizeof(float);
    return load_weight(tensor);
  }
  kernels::WeightView view = packed;
  view.data = upload_copy(packed.data, static_cast<size_t>(packed.rows * packed.cols));
  view.scales = upload_copy(packed.scales,
                            static_cast<size_t>(kernels::block_scale_count(packed, packed.rows)) * sizeof(float));
  return view;
}

void CudaBackend::release_weight(const kernels::WeightView& weight) {
  for (const void* part : {weight.data, weight.scales}) {
    const auto it = std::find(weights_.begin(), weights_.end(), part);
    if (it == weights_.end()) continue;  // not a copy of ours (a view into host memory)
    // Work already enqueued may still read it, and the allocator may hand the block out again.
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_.for_op()));
    allocator_.deallocate(*it);
    *it = weights_.back();
    weights_.pop_back();
  }
}

void CudaBackend::paged_attention(const float* q, const void* k_cache, const void* v_cache,
                                const kernels::PagedBatch& batch, const kernels::AttentionParams& params,
                                float* out) {
  if (batch.num_seqs == 0) return;
  // float32 models and the batch-invariant mode keep the float32 kernel (exact to the fixtures), as
  // do steps with lookahead (image tokens), which only the general kernel masks.
  if (!batch_invariant_ && batch.lookahead == nullptr && params.allow_bf16 &&
      batch.max_query_len >= kTensorCorePrefillTokens && kc::prefill_attention_supported(params)) {
    const size_t bytes = kc::prefill_attention_workspace_bytes(batch, params);
    if (bytes <= kMaxPrefillWorkspaceBytes) {
      void* workspace = take_workspace(bytes);
      try {
        kc::prefill_attention(q, k_cache, v_cache, batch, params, workspace, out, stream_.for_op());
      } catch (...) {
        give_back_workspace(workspace);
        throw;
      }
      give_back_workspace(workspace);
      return;
    }
  }
  planned_attention(q, k_cache, v_cache, batch, params,
                    kc::plan_paged_attention(batch, params, batch_invariant_ ? kInvariantSplitKeys : 0, num_sms_), out,
                    nullptr);
}

void CudaBackend::attention_with_front_end(const kernels::AttentionFrontEnd& f, const kernels::PagedBatch& batch,
                                           const kernels::AttentionParams& params, float* out) {
  const bool decode_only = batch.num_seqs > 0 && batch.max_query_len == 1 && f.num_tokens == batch.num_tokens;
  // The fused kernel writes each row's KV inside that row's attention, unordered against the rows
  // of the same sequence that read it.
  if (fused_decode_ && !batch_invariant_ && decode_only && !batch.rows_share_sequences && batch.lookahead == nullptr &&
      f.head_dim == params.head_dim && f.cache_dtype == params.cache_dtype) {
    const kc::AttentionPlan plan = kc::plan_paged_attention(batch, params, 0, num_sms_);
    if (plan.balanced_splits) {
      planned_attention(nullptr, f.k_cache, f.v_cache, batch, params, plan, out, &f);
      return;
    }
  }
  Backend::attention_with_front_end(f, batch, params, out);
}

void CudaBackend::planned_attention(const float* q, const void* k_cache, const void* v_cache,
                                    const kernels::PagedBatch& batch, const kernels::AttentionParams& params,
                                    const kc::AttentionPlan& plan, float* out, const kernels::AttentionFrontEnd* front) {
  // The workspace goes back to the cache right after the launches are enqueued: the stream
  // orders any later user after them.
  void* workspace = plan.workspace_bytes > 0 ? take_workspace(plan.workspace_bytes) : nullptr;
  try {
    kc::paged_attention(q, k_cache, v_cache, batch, params, plan, workspace, out, stream_.for_op(), front);
  } catch (...) {
    give_back_workspace(workspace);
    throw;
  }
  give_back_workspace(workspace);
}

bool CudaBackend::mla_expanded_attention(const kernels::PagedBatch& batch, const kernels::MlaExpandedAttention& a) {
  if (batch_invariant_ || batch.lookahead != nullptr || batch.num_seqs == 0 ||
      batch.max_query_len < kTensorCorePrefillTokens || batch.num_tokens < batch.num_seqs * kExpandedMlaTokensPerSeq ||
      !kc::mla_prefill_supported(a)) {
    return false;
  }
  const size_t bytes = kc::mla_prefill_workspace_bytes(batch, a);
  if (bytes > kMaxPrefillWorkspaceBytes) return false;
  void* workspace = take_workspace(bytes);
  try {
    kc::mla_prefill_attention(batch, a, head_gemm_, workspace, stream_.for_op());
  } catch (...) {
    give_back_workspace(workspace);
    throw;
  }
  give_back_workspace(workspace);
  return true;
}

void CudaBackend::head_matmul(const kernels::HeadProducts& p, float* scratch) {
  if (batch_invariant_) {
    Backend::head_matmul(p, scratch);
    return;
  }
  const size_t bytes = kc::HeadGemm::input_bytes(p);
  void* rounded = bytes > 0 ? take_workspace(bytes) : nullptr;
  try {
    head_gemm_.run(p, rounded, stream_.for_op());
  } catch (...) {
    give_back_workspace(rounded);
    throw;
  }
  give_back_workspace(rounded);
}

int32_t count_cuda_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return Error{std::string("--device cuda: no usable CUDA device (") +
                 (status != cudaSuccess ? cudaGetErrorString(status) : "none found") + ")"};
  }
  if (options.batch_invariant && options.kv_cache_dtype == DType::kBF16) {
    return Error{
        "kv_cache_dtype bfloat16 (--kv-cache-dtype) with batch-invariant mode: the CUDA backend keeps "
        "float32 caches in that mode (or fp8 ones when asked); use auto, float32 or fp8"};
  }
  try {
    return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(options));
  } catch (const kernels::cuda::CudaError& error) {
    return Error{std::string("--device cuda: ") + error.what()};
  }
}

}  // namespace deepinfer
