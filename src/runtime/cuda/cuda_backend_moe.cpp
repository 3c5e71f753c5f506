// CudaBackend's mixture of experts: the router kernel, grouping of the routed (token, slot) rows by
// expert (for decode-sized steps in the router's own launch), one grouped launch for
// gate+up+activation and one for down, then the weighted combine in slot order (the reference's
// summation order), with no host synchronisation; everything but the
// expert pointer table (uploaded once per layer) lives in the caller's workspace. Prompt-sized
// eager steps instead read the grouping's offsets back and run the products as grouped GEMMs
// (kernels/cuda/moe_grouped_gemm.h: bf16 on the wgmma kernel, the activation in gate|up's epilogue;
// FP8 in 128 x 128 blocks on its FP8 twin over rows quantised per 128 columns; f16 on cuBLAS).
#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_fp8.h"
#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {
namespace {

// Average routed rows per expert from which a step takes the tensor cores: below it each active
// expert holds a handful of rows and the step is bound by reading the weights.
constexpr int64_t kTensorCoreRowsPerExpert = 4;
// ... below which (batch-invariant mode aside) the weights stream straight into the MMAs from
// global memory, a tile of up to 32 rows reading its expert's weights once; the 64-row WMMA tiles
// stage them through shared memory. On the H200 the streamed tiles read 3.1-3.3 TB/s at 4-8 rows
// per expert and 2.2 at 16 (WMMA: 2.0 / 1.9); at 24 (DeepSeek-V2-Lite, batch 256) many experts
// overflow one tile and read their weights twice: 1.7 against WMMA's 1.9.
constexpr int64_t kStreamedRowsPerExpert = 20;
// ... and from which an eager step (no graph capture) runs them as grouped GEMMs, at the price of
// reading the grouping's offsets back (a prompt chunk: 384 rows per expert for
// DeepSeek-V2-Lite's 4K prompt). Decode steps of that size skip the graphs (moe_step_reads_back):
// on an H100, 256 tokens on DeepSeek-V3's layers with 17 experts (120 rows each) ran 1.8x (bf16)
// and 4x (FP8) faster eagerly than from a graph on the tiles.
constexpr int64_t kGroupedGemmRowsPerExpert = 64;
// ... from fewer rows for FP8 experts the grouped FP8 GEMM takes: the streamed tiles, which read
// each 32-row tile's expert codes anew, read DeepSeek-V3's experts (17 of them) at 0.38 TB/s at 30
// rows an expert on an H100, where the grouped FP8 GEMM's 128-row tiles read them once.
constexpr int64_t kFp8GroupedGemmRowsPerExpert = 24;
// The bf16 copy of packed (MXFP4, FP8) experts their grouped GEMMs read, a chunk of experts at a
// time: within the allocator's cached sizes, so prompt steps reuse one block (a larger one would be
// freed each time, which synchronises the device, and would describe its address to the GEMMs' TMA
// anew).
constexpr int64_t kPackedDequantisedBytes = static_cast<int64_t>(DeviceAllocator::kUncachedBytes);

// The grouped GEMMs' gate|up epilogue: the experts' activation, biases of bias_dtype.
kc::WgmmaEpilogue activation_epilogue(const kernels::MoeExperts& experts, DType bias_dtype) {
  kc::WgmmaEpilogue activation;
  activation.bias_dtype = bias_dtype;
  activation.activation = experts.activation;
  activation.swiglu_alpha = experts.swiglu_alpha;
  activation.swiglu_limit = experts.swiglu_limit;
  return activation;
}

bool is_packed(DType dtype) { return dtype == DType::kMxfp4 || dtype == DType::kF8E4M3; }

// w (an expert's MXFP4 or FP8 matrix on the device) as bf16 into out.
void dequantize_packed_bf16(const kernels::WeightView& w, void* out, cudaStream_t stream) {
  if (w.dtype == DType::kMxfp4) {
    kc::dequantize_mxfp4_bf16(w.data, static_cast<const uint8_t*>(w.scales), w.rows, w.cols, out, stream);
  } else {
    kc::dequantize_fp8_to_bf16(w, out, stream);
  }
}

const void* data_of(const kernels::WeightView* views, int32_t e) { return views ? views[e].data : nullptr; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

float* align16(float* p) { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t{15}); }

bool has_biases(const kernels::MoeExperts& experts) {
  for (const kernels::WeightView* biases : {experts.gate_bias, experts.up_bias, experts.down_bias}) {
    for (int32_t e = 0; biases != nullptr && e < experts.num_experts; ++e) {
      if (biases[e].data != nullptr) return true;
    }
  }
  return false;
}

}  // namespace

void CudaBackend::moe_route(const float* logits, const kernels::WeightView& selection_bias, int64_t num_tokens,
                            const kernels::MoeRouting& routing, int32_t* expert_ids, float* expert_weights) {
  kc::moe_route(logits, selection_bias, num_tokens, routing, expert_ids, expert_weights, stream_.for_op());
}

kc::GroupedExperts CudaBackend::grouped_experts(const kernels::MoeExperts& experts) {
  const DType dtype = experts.gate[0].dtype;
  std::vector<kc::ExpertPointers> host(static_cast<size_t>(experts.num_experts));
  bool aligned = true;
  DType bias_dtype = DType::kF32;
  for (int32_t e = 0; e < experts.num_experts; ++e) {
    kc::ExpertPointers& p = host[static_cast<size_t>(e)];
    p = {experts.gate[e].data, experts.up[e].data, experts.down[e].data, data_of(experts.gate_bias, e),
         data_of(experts.up_bias, e), data_of(experts.down_bias, e)};
    if (is_packed(dtype)) {
      p.gate_scales = experts.gate[e].scales;
      p.up_scales = experts.up[e].scales;
      p.down_scales = experts.down[e].scales;
    }
    DI_CHECK(experts.gate[e].dtype == dtype && experts.up[e].dtype == dtype && experts.down[e].dtype == dtype,
             "expert " << e << "'s weights differ in dtype from expert 0's");
    for (const kernels::WeightView* w : {&experts.gate[e], &experts.up[e], &experts.down[e]}) {
      DI_CHECK(w->scale_block_rows == experts.gate[0].scale_block_rows &&
                   w->scale_block_cols == experts.gate[0].scale_block_cols,
               "expert " << e << "'s scale blocks differ from expert 0's");
    }
    aligned = aligned && aligned16(p.gate) && aligned16(p.up) && aligned16(p.down);
    for (const kernels::WeightView* biases : {experts.gate_bias, experts.up_bias, experts.down_bias}) {
      if (biases == nullptr || biases[e].data == nullptr) continue;
      bias_dtype = biases[e].dtype;
    }
  }
  ExpertTable& table = expert_tables_[experts.gate];
  const auto same = [](const kc::ExpertPointers& a, const kc::ExpertPointers& b) {
    return a.gate == b.gate && a.up == b.up && a.down == b.down && a.gate_bias == b.gate_bias &&
           a.up_bias == b.up_bias && a.down_bias == b.down_bias && a.gate_scales == b.gate_scales &&
           a.up_scales == b.up_scales && a.down_scales == b.down_scales;
  };
  if (!std::equal(host.begin(), host.end(), table.host.begin(), table.host.end(), same)) {
    const size_t bytes = host.size() * sizeof(kc::ExpertPointers);
    table.device = allocate(bytes);
    copy_to_device(table.device.data(), host.data(), bytes);
    table.host = std::move(host);
  }
  kc::GroupedExperts grouped;
  grouped.experts = table.device.as<const kc::ExpertPointers>();
  grouped.num_experts = experts.num_experts;
  grouped.top_k = experts.top_k;
  grouped.hidden = experts.hidden;
  grouped.intermediate = experts.intermediate;
  grouped.weight_dtype = dtype;
  grouped.bias_dtype = bias_dtype;
  grouped.aligned = aligned;
  if (dtype == DType::kF8E4M3) grouped.scale_block_rows = experts.gate[0].scale_block_rows;
  grouped.activation = experts.activation;
  grouped.swiglu_alpha = experts.swiglu_alpha;
  grouped.swiglu_limit = experts.swiglu_limit;
  return grouped;
}

CudaBackend::MoeStep CudaBackend::moe_step(const kernels::MoeExperts& experts, const float* x, int64_t num_tokens,
                                           float* workspace) {
  MoeStep step;
  step.num_rows = num_tokens * experts.top_k;
  step.grouped = grouped_experts(experts);
  // Batch-invariant mode keeps one kernel for every batch, so a row's numbers never depend on it.
  const DType dtype = step.grouped.weight_dtype;
  const bool packed = is_packed(dtype);  // never in batch-invariant mode (reads_packed_weights)
  const bool tensor_cores = dtype == DType::kBF16 || dtype == DType::kF16;
  if (packed) {
    DI_CHECK(!batch_invariant_, "packed experts are dequantised at load in the batch-invariant mode");
    step.kernel = kc::MoeKernel::kTensorCoreStream;
  } else if (!tensor_cores || (!batch_invariant_ && step.num_rows < kTensorCoreRowsPerExpert * experts.num_experts)) {
    step.kernel = kc::MoeKernel::kRowwise;
  } else if (!batch_invariant_ && step.num_rows < kStreamedRowsPerExpert * experts.num_experts &&
             kc::moe_stream_fits(step.grouped) && aligned16(x)) {
    step.kernel = kc::MoeKernel::kTensorCoreStream;
  } else {
    step.kernel = kc::MoeKernel::kTensorCore;
  }
  step.gemm_dtype = packed ? DType::kBF16 : dtype;
  step.on_wgmma =
      kc::MoeGroupedGemm::on_wgmma(step.gemm_dtype, experts.hidden, experts.intermediate, step.grouped.aligned);
  step.on_grouped_gemm = !capturing_ && grouped_gemm_step(experts, step.grouped, step.num_rows);
  // FP8 experts in 128 x 128 blocks keep their codes on the FP8 kernel, which writes float32.
  step.on_fp8_wgmma = step.on_grouped_gemm && dtype == DType::kF8E4M3 &&
                      kc::MoeGroupedGemm::on_fp8_wgmma(experts.hidden, experts.intermediate,
                                                       step.grouped.scale_block_rows, step.grouped.aligned) &&
                      aligned16(x);
  if (step.on_fp8_wgmma) step.gemm_dtype = DType::kF32;
  if (packed && !step.on_grouped_gemm) {
    DI_CHECK(kc::moe_stream_fits(step.grouped),
             dtype_name(dtype) << " experts need 16-byte aligned codes (FP8: rows of a multiple of 128)");
    DI_CHECK(aligned16(x), dtype_name(dtype) << " experts need a 16-byte aligned input");
  }
  // Workspace (kernels::moe_workspace_floats): h (or the grouped GEMMs' 16-bit h or gate|up, in
  // fewer bytes), y, then the grouping's ints.
  step.h = align16(workspace);                                      // [num_rows, intermediate]
  step.y = align16(step.h + step.num_rows * experts.intermediate);  // [num_rows, hidden]
  auto* ints = reinterpret_cast<int32_t*>(step.y + step.num_rows * experts.hidden);
  DI_CHECK(ints + kc::moe_grouping_ints(experts.num_experts, step.num_rows) <=
               reinterpret_cast<int32_t*>(workspace + kernels::moe_workspace_floats(num_tokens, experts)),
           "moe_experts workspace too small");
  step.grouping = kc::carve_moe_grouping(ints, experts.num_experts, step.num_rows);
  return step;
}

bool CudaBackend::grouped_gemm_step(const kernels::MoeExperts& experts, const kc::GroupedExperts& grouped,
                                    int64_t num_rows) const {
  // Grouped GEMMs: bf16 experts on the wgmma kernel (biases and both activations), packed ones
  // dequantised to bf16 for it, other 16-bit plain SiLU-gated experts on cuBLAS's (GPT-OSS's biases
  // and clamped SwiGLU in f16 keep the mma kernels).
  const DType dtype = grouped.weight_dtype;
  const bool packed = is_packed(dtype);
  const bool tensor_cores = dtype == DType::kBF16 || dtype == DType::kF16;
  const bool on_wgmma = kc::MoeGroupedGemm::on_wgmma(packed ? DType::kBF16 : dtype, experts.hidden,
                                                     experts.intermediate, grouped.aligned);
  const bool cublas_fits = !packed && grouped.aligned && experts.activation == kernels::ExpertActivation::kSiluGated &&
                           !has_biases(experts) && experts.hidden % 8 == 0 && experts.intermediate % 8 == 0;
  const bool fp8_kernel =
      dtype == DType::kF8E4M3 &&
      kc::MoeGroupedGemm::on_fp8_wgmma(experts.hidden, experts.intermediate, grouped.scale_block_rows, grouped.aligned);
  const int64_t rows_per_expert = fp8_kernel ? kFp8GroupedGemmRowsPerExpert : kGroupedGemmRowsPerExpert;
  return (tensor_cores || packed) && !batch_invariant_ && (on_wgmma || cublas_fits) &&
         num_rows >= rows_per_expert * experts.num_experts;
}

bool CudaBackend::moe_step_reads_back(int64_t num_tokens, const kernels::MoeExperts& experts) {
  // The fewest rows any grouped step takes first: most decode steps stop there, before the expert
  // table is looked at.
  const int64_t num_rows = num_tokens * experts.top_k;
  return num_rows >= kFp8GroupedGemmRowsPerExpert * experts.num_experts &&
         grouped_gemm_step(experts, grouped_experts(experts), num_rows);
}

void CudaBackend::moe_products(const float* x, int64_t num_tokens, const float* expert_weights,
                               const kernels::MoeExperts& experts, const MoeStep& step, float* out) {
  if (step.on_grouped_gemm) {
    grouped_gemm_expert_products(x, experts, step);
  } else {
    kc::grouped_gate_up(x, step.grouped, step.grouping, step.num_rows, step.kernel, step.h, stream_.for_op());
    kc::grouped_down(step.h, step.grouped, step.grouping, step.num_rows, step.kernel, step.y, stream_.for_op());
  }
  kc::moe_combine(step.y, step.on_grouped_gemm ? step.gemm_dtype : DType::kF32, step.grouping.position, expert_weights,
                  num_tokens, experts.top_k, experts.hidden, out, stream_.for_op());
}

void CudaBackend::moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids,
                              const float* expert_weights, const kernels::MoeExperts& experts, float* workspace,
                              int64_t* expert_token_counts, float* out) {
  if (num_tokens == 0) return;
  const MoeStep step = moe_step(experts, x, num_tokens, workspace);
  kc::group_by_expert(expert_ids, step.num_rows, experts.num_experts, kc::moe_rows_per_tile(step.kernel), step.grouping,
                      expert_token_counts, stream_.for_op());
  moe_products(x, num_tokens, expert_weights, experts, step, out);
}

void CudaBackend::moe_route_experts(const float* logits, const kernels::WeightView& selection_bias,
                                    const kernels::MoeRouting& routing, const float* x, int64_t num_tokens,
                                    int32_t* expert_ids, float* expert_weights, const kernels::MoeExperts& experts,
                                    float* workspace, int64_t* expert_token_counts, float* out) {
  if (num_tokens == 0) return;
  DI_CHECK(routing.num_experts == experts.num_experts,
           "the router scores " << routing.num_experts << " experts, the layer holds " << experts.num_experts);
  const MoeStep step = moe_step(experts, x, num_tokens, workspace);
  if (step.num_rows > kc::moe_route_group_max_rows(routing.num_experts)) {
    moe_route(logits, selection_bias, num_tokens, routing, expert_ids, expert_weights);
    kc::group_by_expert(expert_ids, step.num_rows, experts.num_experts, kc::moe_rows_per_tile(step.kernel),
                        step.grouping, expert_token_counts, stream_.for_op());
  } else {
    kc::moe_route_and_group(logits, selection_bias, num_tokens, routing, expert_ids, expert_weights,
                            kc::moe_rows_per_tile(step.kernel), step.grouping, expert_token_counts,
                            moe_route_done_.as<int32_t>(), stream_.for_op());
  }
  moe_products(x, num_tokens, expert_weights, experts, step, out);
}

void CudaBackend::grouped_gemm_expert_products(const float* x, const kernels::MoeExperts& experts,
                                               const MoeStep& step) {
  std::vector<int32_t> offsets(static_cast<size_t>(experts.num_experts) + 1);
  copy_to_host(offsets.data(), step.grouping.offsets, offsets.size() * sizeof(int32_t));  // waits for the grouping
  if (step.on_fp8_wgmma) {
    fp8_grouped_gemms(x, offsets, experts, step);
    return;
  }
  const int64_t rows = offsets.back();
  const std::vector<kc::ExpertPointers>& pointers = expert_tables_.at(experts.gate).host;
  const int64_t hidden = experts.hidden;
  const int64_t inter = experts.intermediate;
  const DType dtype = step.gemm_dtype;
  // One rounded buffer: the rows' inputs, then (on cuBLAS, once gate|up has read them) the activations.
  void* rounded = take_workspace(static_cast<size_t>(rows * std::max(hidden, inter)) * dtype_size_bytes(dtype));
  try {
    kc::gather_grouped_rows(x, step.grouping.position, step.num_rows / experts.top_k, experts.top_k, hidden, dtype,
                            rounded, stream_.for_op());
    if (step.on_wgmma) {
      const kc::WgmmaEpilogue activation = activation_epilogue(experts, step.grouped.bias_dtype);
      if (is_packed(step.grouped.weight_dtype)) {
        packed_grouped_gemms(offsets, experts, step, activation, rounded);
      } else {
        moe_gemm_.gate_up_activated(pointers, offsets, hidden, inter, activation, rounded, step.h, stream_.for_op());
        moe_gemm_.down_biased(pointers, offsets, hidden, inter, step.grouped.bias_dtype, step.h, step.y,
                              stream_.for_op());
      }
    } else {
      moe_gemm_.gate_up(pointers, offsets, hidden, inter, dtype, rounded, step.h, stream_.for_op());
      kc::glu_rounded(step.h, dtype, rows, inter, false, dtype, rounded, stream_.for_op());
      moe_gemm_.down(pointers, offsets, hidden, inter, dtype, rounded, step.y, stream_.for_op());
    }
  } catch (...) {
    give_back_workspace(rounded);
    throw;
  }
  give_back_workspace(rounded);
}

void CudaBackend::packed_grouped_gemms(const std::vector<int32_t>& offsets, const kernels::MoeExperts& experts,
                                       const MoeStep& step, const kc::WgmmaEpilogue& activation, const void* rounded) {
  const std::vector<kc::ExpertPointers>& packed = expert_tables_.at(experts.gate).host;
  const int64_t hidden = experts.hidden;
  const int64_t inter = experts.intermediate;
  const int64_t expert_values = 3 * hidden * inter;  // gate, up, down
  std::vector<int32_t> with_rows;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    if (offsets[e + 1] > offsets[e]) with_rows.push_back(static_cast<int32_t>(e));
  }
  if (with_rows.empty()) return;
  const auto per_chunk = static_cast<size_t>(
      std::clamp<int64_t>(kPackedDequantisedBytes / (expert_values * static_cast<int64_t>(sizeof(uint16_t))), 1,
                          static_cast<int64_t>(with_rows.size())));
  auto* dequantised =
      static_cast<uint16_t*>(take_workspace(per_chunk * static_cast<size_t>(expert_values) * sizeof(uint16_t)));
  try {
    for (size_t first = 0; first < with_rows.size(); first += per_chunk) {
      const size_t last = std::min(first + per_chunk, with_rows.size());
      // The chunk's experts in bf16: the experts from its first to its last, those between without
      // rows; every other expert's rows are left out of this pass (clamped to none).
      std::vector<kc::ExpertPointers> pointers = packed;
      const int32_t begin = offsets[static_cast<size_t>(with_rows[first])];
      const int32_t end = offsets[static_cast<size_t>(with_rows[last - 1]) + 1];
      std::vector<int32_t> chunk_offsets(offsets.size());
      for (size_t e = 0; e < offsets.size(); ++e) chunk_offsets[e] = std::clamp(offsets[e], begin, end);
      for (size_t i = first; i < last; ++i) {
        const auto e = static_cast<size_t>(with_rows[i]);
        uint16_t* gate = dequantised + (i - first) * static_cast<size_t>(expert_values);
        uint16_t* up = gate + inter * hidden;
        uint16_t* down = up + inter * hidden;
        dequantize_packed_bf16(experts.gate[e], gate, stream_.for_op());
        dequantize_packed_bf16(experts.up[e], up, stream_.for_op());
        dequantize_packed_bf16(experts.down[e], down, stream_.for_op());
        kc::ExpertPointers& q = pointers[e];
        q.gate = gate;
        q.up = up;
        q.down = down;
      }
      moe_gemm_.gate_up_activated(pointers, chunk_offsets, hidden, inter, activation, rounded, step.h,
                                  stream_.for_op());
      moe_gemm_.down_biased(pointers, chunk_offsets, hidden, inter, step.grouped.bias_dtype, step.h, step.y,
                            stream_.for_op());
    }
  } catch (...) {
    give_back_workspace(dequantised);
    throw;
  }
  give_back_workspace(dequantised);
}

void CudaBackend::fp8_grouped_gemms(const float* x, const std::vector<int32_t>& offsets,
                                    const kernels::MoeExperts& experts, const MoeStep& step) {
  const std::vector<kc::ExpertPointers>& pointers = expert_tables_.at(experts.gate).host;
  const int64_t rows = offsets.back();
  if (rows == 0) return;
  const int64_t hidden = experts.hidden;
  const int64_t inter = experts.intermediate;
  // One buffer of quantised rows: the inputs, then (once gate|up has read them) the activations.
  void* quantised = take_workspace(kc::fp8_rows_bytes(rows, std::max(hidden, inter)));
  try {
    const kc::Fp8Rows x_rows = kc::fp8_rows_at(quantised, rows, hidden);
    kc::quantize_fp8_grouped_rows(x, step.grouping.position, step.num_rows / experts.top_k, experts.top_k, hidden,
                                  x_rows, rows, stream_.for_op());
    moe_gemm_.gate_up_activated(pointers, offsets, hidden, inter, activation_epilogue(experts, step.grouped.bias_dtype),
                                nullptr, step.h, stream_.for_op(), &x_rows);
    const kc::Fp8Rows h_rows = kc::fp8_rows_at(quantised, rows, inter);
    kc::quantize_fp8_rows(step.h, rows, inter, h_rows, stream_.for_op());
    moe_gemm_.down_biased(pointers, offsets, hidden, inter, step.grouped.bias_dtype, nullptr, step.y, stream_.for_op(),
                          &h_rows);
  } catch (...) {
    give_back_workspace(quantised);
    throw;
  }
  give_back_workspace(quantised);
}

}  // namespace deepinfer
