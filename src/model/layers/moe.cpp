// The mixture-of-experts block: loading every expert layout, routing and the expert kernels.
#include "model/layers/moe.h"

#include <algorithm>
#include <unordered_map>

#include "core/check.h"
#include "model/expert_parallel.h"
#include "runtime/device_upload.h"
#include "weights/mxfp4.h"

namespace deepinfer {
namespace {

std::string expert_name(const std::string& prefix, int32_t expert, const std::string& projection) {
  return prefix + ".experts." + std::to_string(expert) + "." + projection + ".weight";
}

// A view of one expert's [rows, cols] slice of a 3-D checkpoint tensor, made usable by the backend.
Result<kernels::WeightView> load_slice(const ModelSource& source, const TensorView& tensor, int64_t index,
                                       int64_t row_begin, int64_t rows, int64_t cols) {
  TensorView slice = tensor;
  const size_t element = dtype_size_bytes(tensor.dtype);
  const auto offset = static_cast<size_t>((index * tensor.shape[1] + row_begin) * cols) * element;
  slice.data = static_cast<const char*>(tensor.data) + offset;
  slice.shape = {rows, cols};
  slice.size_bytes = static_cast<size_t>(rows * cols) * element;
  slice.name = tensor.name + "[" + std::to_string(index) + "]";
  return source.backend->load_weight(slice);
}

// Expert `index`'s values of a [num_experts, ...] checkpoint tensor of `shape`, as float32.
Result<std::vector<float>> read_expert_f32(const ModelSource& source, const std::string& name,
                                           const std::vector<int64_t>& shape, int64_t index) {
  auto tensor = source.weights->get(name, shape);
  if (!tensor.ok()) return tensor.error();
  const auto per_expert = static_cast<size_t>(tensor->numel() / shape[0]);
  if (tensor->dtype == DType::kF8E4M3) {  // block scales span experts: dequantise the whole tensor
    auto all = read_tensor_f32(source, name, shape);
    if (!all.ok()) return all.error();
    const auto first = all->begin() + static_cast<std::ptrdiff_t>(index * per_expert);
    return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(per_expert));
  }
  std::vector<float> values(per_expert);
  const size_t offset = static_cast<size_t>(index) * per_expert * dtype_size_bytes(tensor->dtype);
  convert_to_f32(static_cast<const char*>(tensor->data) + offset, tensor->dtype, per_expert, values.data());
  return values;
}

// out_rows rows of the [rows, cols] matrix's transpose, row o being column col_begin + o * col_step
// (GPT-OSS stores unquantised experts as [in, out], gate and up columns interleaved). Tile by tile,
// so reads and writes both stay in cache: element by element, strided writes made loading
// GPT-OSS-20B's bf16 experts take minutes.
template <typename T>
void gather_transposed(const T* in, int64_t rows, int64_t cols, int64_t col_begin, int64_t col_step, int64_t out_rows,
                       T* out) {
  constexpr int64_t kTile = 64;
  for (int64_t o0 = 0; o0 < out_rows; o0 += kTile) {
    for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
      for (int64_t r = r0; r < std::min(r0 + kTile, rows); ++r) {
        const T* row = in + r * cols + col_begin;
        for (int64_t o = o0; o < std::min(o0 + kTile, out_rows); ++o) out[o * rows + r] = row[o * col_step];
      }
    }
  }
}

// Expert `index`'s [rows, cols] matrix of a [num_experts, rows, cols] checkpoint tensor, as the
// gathered transpose above, loaded onto the backend as `name`: bf16 and float32 elements move as
// they are; other dtypes go through float32.
Result<kernels::WeightView> load_gathered_transpose(const ModelSource& source, const std::string& name,
                                                    const std::string& tensor_name, int64_t num_experts, int64_t index,
                                                    int64_t rows, int64_t cols, int64_t col_begin, int64_t col_step,
                                                    int64_t out_rows) {
  auto tensor = source.weights->get(tensor_name, {num_experts, rows, cols});
  if (!tensor.ok()) return tensor.error();
  const std::vector<int64_t> shape{out_rows, rows};
  const size_t offset = static_cast<size_t>(index * rows * cols);
  const auto gathered = [&](auto element) {
    using T = decltype(element);
    std::vector<uint8_t> bytes(static_cast<size_t>(out_rows * rows) * sizeof(T));
    gather_transposed(static_cast<const T*>(tensor->data) + offset, rows, cols, col_begin, col_step, out_rows,
                      reinterpret_cast<T*>(bytes.data()));
    return load_arena_weight(source, source.arena->add_bytes(name, shape, tensor->dtype, std::move(bytes)));
  };
  if (tensor->dtype == DType::kBF16) return gathered(uint16_t{});
  if (tensor->dtype == DType::kF32) return gathered(float{});
  auto values = read_expert_f32(source, tensor_name, {num_experts, rows, cols}, index);
  if (!values.ok()) return values.error();
  std::vector<float> out(static_cast<size_t>(out_rows * rows));
  gather_transposed(values->data(), rows, cols, col_begin, col_step, out_rows, out.data());
  return load_host_tensor(source, name, out_rows, rows, out, DType::kF32);
}

// An MXFP4 tensor pair of num_experts [rows, cols] matrices: `name`_blocks and `name`_scales.
struct Mxfp4Tensors {
  TensorView blocks;  // U8 [num_experts, rows, cols / 32, 16]
  TensorView scales;  // U8 [num_experts, rows, cols / 32]
};

Result<Mxfp4Tensors> find_mxfp4(const ModelSource& source, const std::string& name, int64_t num_experts, int64_t rows,
                                int64_t cols) {
  const std::optional<TensorView> blocks = source.weights->find(name + "_blocks");
  const std::optional<TensorView> scales = source.weights->find(name + "_scales");
  if (!blocks || !scales) {
    return Error{name + "_blocks and " + name + "_scales (MXFP4) are missing from " + source.weights->source()};
  }
  const std::vector<int64_t> expected = {num_experts, rows, cols / 32, 16};
  if (cols % 32 != 0 || blocks->shape != expected) {
    return Error{"tensor " + blocks->name + " in " + blocks->file + " has shape " + shape_to_string(blocks->shape) +
                 "; expected MXFP4 blocks " + shape_to_string(expected) + " (" + std::to_string(cols) +
                 " inputs a row in groups of 32)"};
  }
  if (auto checked = check_mxfp4(*blocks, *scales); !checked.ok()) return checked.error();
  return Mxfp4Tensors{*blocks, *scales};
}

// Expert `index` of an MXFP4 tensor pair as float32 [rows, cols].
Result<std::vector<float>> read_mxfp4_expert(const ModelSource& source, const std::string& name, int64_t num_experts,
                                             int64_t rows, int64_t cols, int64_t index) {
  auto tensors = find_mxfp4(source, name, num_experts, rows, cols);
  if (!tensors.ok()) return tensors.error();
  return dequantize_mxfp4(tensors->blocks, tensors->scales, index);
}

// Rows [first_row, first_row + row_step * num_rows) of expert `index`, every row_step-th, as one
// packed MXFP4 weight [num_rows, cols]: a view into the mapped file when the rows are contiguous,
// else their bytes copied (still packed) into the arena.
Result<kernels::WeightView> load_mxfp4_rows(const ModelSource& source, const Mxfp4Tensors& tensors, int64_t index,
                                            int64_t first_row, int64_t row_step, int64_t num_rows) {
  const int64_t rows = tensors.blocks.shape[1];
  const int64_t cols = tensors.blocks.shape[2] * 32;
  const int64_t row_bytes = cols / 2;
  const int64_t scale_row_bytes = cols / kernels::kMxfp4Block;
  const auto* blocks = static_cast<const uint8_t*>(tensors.blocks.data) + (index * rows + first_row) * row_bytes;
  const auto* scales = static_cast<const uint8_t*>(tensors.scales.data) + (index * rows + first_row) * scale_row_bytes;
  kernels::WeightView view;
  view.dtype = DType::kMxfp4;
  view.rows = num_rows;
  view.cols = cols;
  view.scale_block_rows = 1;
  view.scale_block_cols = static_cast<int32_t>(kernels::kMxfp4Block);
  if (row_step == 1) {
    view.data = blocks;
    view.scales = scales;
    return source.backend->load_packed_weight(view);
  }
  std::vector<uint8_t> row_blocks(static_cast<size_t>(num_rows * row_bytes));
  std::vector<uint8_t> row_scales(static_cast<size_t>(num_rows * scale_row_bytes));
  for (int64_t r = 0; r < num_rows; ++r) {
    std::copy_n(blocks + r * row_step * row_bytes, row_bytes, row_blocks.begin() + r * row_bytes);
    std::copy_n(scales + r * row_step * scale_row_bytes, scale_row_bytes, row_scales.begin() + r * scale_row_bytes);
  }
  const std::string name = tensors.blocks.name + "[" + std::to_string(index) + "]";
  view.data = source.arena->add_bytes(name, {num_rows, row_bytes}, DType::kU8, std::move(row_blocks)).data;
  view.scales = source.arena->add_bytes(name + ".scales", {num_rows, scale_row_bytes}, DType::kU8,
                                        std::move(row_scales)).data;
  return load_arena_packed_weight(source, view);
}

// The experts of `leaving` that are not in `staying` go: their views back to the backend (a device
// frees its copy), their arenas with the last reference.
void release_experts(Backend& backend, std::vector<std::shared_ptr<const LoadedExpert>> leaving,
                     const std::vector<std::shared_ptr<const LoadedExpert>>& staying) {
  std::sort(leaving.begin(), leaving.end());
  leaving.erase(std::unique(leaving.begin(), leaving.end()), leaving.end());  // two slots may share one
  for (const auto& expert : leaving) {
    if (std::find(staying.begin(), staying.end(), expert) != staying.end()) continue;
    for (const kernels::WeightView* view : {&expert->gate, &expert->up, &expert->down, &expert->gate_bias,
                                            &expert->up_bias, &expert->down_bias}) {
      if (view->data != nullptr) backend.release_weight(*view);
    }
  }
}

// What MXFP4 experts (and their biases) become when dequantised: bf16, where e2m1 values times powers
// of two are exact, unless the checkpoint stores its biases in float32 (the fixtures), whose biases
// and products then stay float32's.
DType mxfp4_expert_dtype(const ModelSource& source, const std::string& experts) {
  const std::optional<TensorView> bias = source.weights->find(experts + "gate_up_proj_bias");
  return bias && bias->dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
}

// A GPT-OSS expert stored in expert: its loaded gate, up and down views, and its biases loaded as
// `name`.gate_bias / .up_bias / .down_bias in bias_dtype (gate_up_proj_bias alternates gate and
// up); or the first error among them.
Result<void> set_gpt_oss_expert(const ModelSource& source, const std::string& name,
                                const Result<kernels::WeightView>& gate, const Result<kernels::WeightView>& up,
                                const Result<kernels::WeightView>& down, const std::vector<float>& gate_up_bias,
                                const std::vector<float>& down_bias, DType bias_dtype, LoadedExpert& expert) {
  const auto inter = static_cast<int64_t>(gate_up_bias.size() / 2);
  std::vector<float> gate_b(static_cast<size_t>(inter)), up_b(gate_b.size());
  for (size_t i = 0; i < gate_b.size(); ++i) {
    gate_b[i] = gate_up_bias[2 * i];
    up_b[i] = gate_up_bias[2 * i + 1];
  }
  const auto hidden = static_cast<int64_t>(down_bias.size());
  const auto gb = load_host_tensor(source, name + ".gate_bias", 0, inter, gate_b, bias_dtype);
  const auto ub = load_host_tensor(source, name + ".up_bias", 0, inter, up_b, bias_dtype);
  const auto db = load_host_tensor(source, name + ".down_bias", 0, hidden, down_bias, bias_dtype);
  for (const auto* view : {&gate, &up, &down, &gb, &ub, &db}) {
    if (!view->ok()) return view->error();
  }
  expert.gate = *gate;
  expert.up = *up;
  expert.down = *down;
  expert.gate_bias = *gb;
  expert.up_bias = *ub;
  expert.down_bias = *db;
  return {};
}

}  // namespace

MoeOptions moe_options_from_config(const MoeConfig& config) {
  MoeOptions options;
  kernels::MoeRouting& routing = options.routing;
  routing.num_experts = static_cast<int32_t>(config.num_experts);
  routing.top_k = static_cast<int32_t>(config.num_experts_per_tok);
  routing.scoring = config.scoring_func == "sigmoid" ? kernels::MoeScoring::kSigmoid : kernels::MoeScoring::kSoftmax;
  if (config.topk_method != "greedy") {
    routing.num_groups = static_cast<int32_t>(config.n_group);
    routing.top_groups = static_cast<int32_t>(config.topk_group);
    routing.group_score =
        config.topk_method == "noaux_tc" ? kernels::MoeGroupScore::kTopTwoSum : kernels::MoeGroupScore::kMax;
  }
  routing.normalize = config.norm_topk_prob;
  routing.scaling = static_cast<float>(config.routed_scaling_factor);
  options.intermediate_size = config.moe_intermediate_size;
  options.selection_bias = config.topk_method == "noaux_tc";
  options.shared_intermediate_size = config.shared_expert_intermediate_size > 0
                                         ? config.shared_expert_intermediate_size
                                         : config.num_shared_experts * config.moe_intermediate_size;
  return options;
}

Result<MoeLayer> MoeLayer::load(const ModelSource& source, const std::string& prefix, int64_t hidden,
                                const MoeOptions& options, int32_t moe_index) {
  const kernels::MoeRouting& routing = options.routing;
  if (routing.num_experts <= 0 || routing.top_k <= 0 || routing.top_k > routing.num_experts) {
    return Error{"config.json: num_experts_per_tok (" + std::to_string(routing.top_k) +
                 ") must be between 1 and the number of experts (" + std::to_string(routing.num_experts) + ")"};
  }
  if (routing.num_groups < 1 || routing.num_experts % routing.num_groups != 0 || routing.top_groups < 1 ||
      routing.top_groups > routing.num_groups) {
    return Error{"config.json: n_group (" + std::to_string(routing.num_groups) + ") must divide the " +
                 std::to_string(routing.num_experts) + " experts and topk_group (" +
                 std::to_string(routing.top_groups) + ") must be between 1 and n_group"};
  }
  if (options.intermediate_size <= 0) return Error{"config.json: moe_intermediate_size must be positive"};
  MoeLayer layer;
  layer.hidden_ = hidden;
  layer.intermediate_ = options.intermediate_size;
  layer.routing_ = routing;
  layer.activation_ = options.activation;
  layer.swiglu_alpha_ = options.swiglu_alpha;
  layer.swiglu_limit_ = options.swiglu_limit;
  if (source.expert_parallel) {
    auto placement = source.expert_parallel->placement_for(moe_index, routing.num_experts);
    if (!placement.ok()) return Error{prefix + ": " + placement.error().message};
    if (!source.expert_exchange) return Error{prefix + ": expert parallelism needs the model's row exchange"};
    layer.parallel_ = source.expert_parallel;
    layer.exchange_ = source.expert_exchange;
    layer.placement_ = std::move(*placement);
  }
  const std::string router = prefix + "." + options.router_name;
  auto router_linear = Linear::load(source, router, routing.num_experts, hidden, options.router_bias);
  if (!router_linear.ok()) return router_linear.error();
  layer.router_ = *router_linear;
  if (options.selection_bias) {
    auto bias = load_tensor(source, router + ".e_score_correction_bias", {routing.num_experts});
    if (!bias.ok()) return bias.error();
    layer.selection_bias_ = *bias;
  }
  layer.prefix_ = prefix;
  layer.gate_name_ = options.gate_name;
  layer.up_name_ = options.up_name;
  layer.down_name_ = options.down_name;
  layer.expert_source_ = options.layout == ExpertLayout::kGptOss                  ? ExpertSource::kGptOss
                         : source.weights->find(prefix + ".experts.gate_up_proj") ? ExpertSource::kFused
                                                                                  : ExpertSource::kPerExpert;
  auto experts = layer.load_slots(source, layer.placement_, {});
  if (!experts.ok()) return experts.error();
  layer.set_experts(std::move(experts->experts));
  if (options.shared_intermediate_size > 0) {
    auto shared = GatedMlp::load(source, prefix + "." + options.shared_name, hidden,
                                 options.shared_intermediate_size, false);
    if (!shared.ok()) return shared.error();
    layer.shared_ = *shared;
  }
  layer.token_counts_ = source.backend->allocate(layer.gate_.size() * sizeof(int64_t));
  if (layer.parallel_) {
    layer.routed_tokens_.assign(static_cast<size_t>(routing.num_experts), 0);
    layer.upload_replicas(*source.backend);
  }
  return layer;
}

Result<LoadedExpert> MoeLayer::load_expert(const ModelSource& source, int32_t expert) const {
  LoadedExpert loaded;
  loaded.expert_id = expert;
  Result<void> done = expert_source_ == ExpertSource::kGptOss ? load_gpt_oss_expert(source, loaded)
                      : expert_source_ == ExpertSource::kFused ? load_fused_expert(source, loaded)
                                                               : load_per_expert(source, loaded);
  if (!done.ok()) return done.error();
  return loaded;
}

Result<void> MoeLayer::load_per_expert(const ModelSource& source, LoadedExpert& expert) const {
  const int32_t e = expert.expert_id;
  const auto load = [&](Packing packing) -> Result<void> {
    auto gate = load_matrix(source, expert_name(prefix_, e, gate_name_), {intermediate_, hidden_}, packing);
    if (!gate.ok()) return gate.error();
    auto up = load_matrix(source, expert_name(prefix_, e, up_name_), {intermediate_, hidden_}, packing);
    if (!up.ok()) return up.error();
    auto down = load_matrix(source, expert_name(prefix_, e, down_name_), {hidden_, intermediate_}, packing);
    if (!down.ok()) return down.error();
    expert.gate = *gate;
    expert.up = *up;
    expert.down = *down;
    return {};
  };
  if (auto loaded = load(Packing::kExpertWhereSupported); !loaded.ok()) return loaded;
  // A backend may keep some of an expert's matrices packed and dequantise others whose layout its
  // kernels do not take (CUDA's FP8 ones: rows of a multiple of 128); the grouped kernels take one
  // dtype, so then all three are dequantised.
  const auto same_dtype = [&] { return expert.gate.dtype == expert.up.dtype && expert.up.dtype == expert.down.dtype; };
  if (same_dtype()) return {};
  for (const kernels::WeightView& w : {expert.gate, expert.up, expert.down}) source.backend->release_weight(w);
  if (auto loaded = load(Packing::kDequantise); !loaded.ok()) return loaded;
  if (same_dtype()) return {};
  return Error{"expert " + std::to_string(e) + " of " + prefix_ + ": gate, up and down load as " +
               std::string(dtype_name(expert.gate.dtype)) + ", " + std::string(dtype_name(expert.up.dtype)) + " and " +
               std::string(dtype_name(expert.down.dtype)) + "; the grouped expert kernels take one dtype"};
}

Result<void> MoeLayer::load_fused_expert(const ModelSource& source, LoadedExpert& expert) const {
  const int64_t num_experts = routing_.num_experts;
  const int64_t inter = intermediate_;
  auto gate_up = source.weights->get(prefix_ + ".experts.gate_up_proj", {num_experts, 2 * inter, hidden_});
  if (!gate_up.ok()) return gate_up.error();
  auto down = source.weights->get(prefix_ + ".experts.down_proj", {num_experts, hidden_, inter});
  if (!down.ok()) return down.error();
  const int32_t e = expert.expert_id;
  auto gate = load_slice(source, *gate_up, e, 0, inter, hidden_);
  if (!gate.ok()) return gate.error();
  auto up = load_slice(source, *gate_up, e, inter, inter, hidden_);
  if (!up.ok()) return up.error();
  auto down_e = load_slice(source, *down, e, 0, hidden_, inter);
  if (!down_e.ok()) return down_e.error();
  expert.gate = *gate;
  expert.up = *up;
  expert.down = *down_e;
  return {};
}

Result<void> MoeLayer::load_gpt_oss_expert(const ModelSource& source, LoadedExpert& expert) const {
  const int64_t num_experts = routing_.num_experts;
  const int64_t inter = intermediate_;
  const int64_t hidden = hidden_;
  const int32_t e = expert.expert_id;
  const std::string base = prefix_ + ".experts.";
  auto gu_bias = read_expert_f32(source, base + "gate_up_proj_bias", {num_experts, 2 * inter}, e);
  if (!gu_bias.ok()) return gu_bias.error();
  auto down_b = read_expert_f32(source, base + "down_proj_bias", {num_experts, hidden}, e);
  if (!down_b.ok()) return down_b.error();
  const bool mxfp4 = source.weights->find(base + "gate_up_proj_blocks").has_value();
  if (mxfp4 && source.backend->reads_packed_weights(DType::kMxfp4, WeightUse::kExperts)) {
    return load_packed_gpt_oss_expert(source, expert, *gu_bias, *down_b);
  }
  const std::string name = base + std::to_string(e);
  if (!mxfp4) {
    // Unquantised checkpoints store both as [in, out], gate|up's columns interleaved.
    const std::optional<TensorView> stored = source.weights->find(base + "gate_up_proj");
    const auto gate_up = [&](int64_t first) {
      return load_gathered_transpose(source, name + (first == 0 ? ".gate" : ".up"), base + "gate_up_proj", num_experts,
                                     e, hidden, 2 * inter, first, 2, inter);
    };
    return set_gpt_oss_expert(source, name, gate_up(0), gate_up(1),
                              load_gathered_transpose(source, name + ".down", base + "down_proj", num_experts, e, inter,
                                                      hidden, 0, 1, hidden),
                              *gu_bias, *down_b, host_rewrite_dtype(stored ? stored->dtype : DType::kF32), expert);
  }
  // Dequantised: gate|up as [2 * inter, hidden] rows (gate and up interleaved), down as [hidden, inter].
  auto gate_up_rows = read_mxfp4_expert(source, base + "gate_up_proj", num_experts, 2 * inter, hidden, e);
  if (!gate_up_rows.ok()) return gate_up_rows.error();
  auto down_rows = read_mxfp4_expert(source, base + "down_proj", num_experts, hidden, inter, e);
  if (!down_rows.ok()) return down_rows.error();
  const DType dtype = mxfp4_expert_dtype(source, base);
  std::vector<float> gate(static_cast<size_t>(inter * hidden)), up(gate.size());
  for (int64_t i = 0; i < inter; ++i) {
    const auto gate_row = gate_up_rows->begin() + 2 * i * hidden;
    std::copy(gate_row, gate_row + hidden, gate.begin() + i * hidden);
    std::copy(gate_row + hidden, gate_row + 2 * hidden, up.begin() + i * hidden);
  }
  return set_gpt_oss_expert(source, name, load_host_tensor(source, name + ".gate", inter, hidden, gate, dtype),
                            load_host_tensor(source, name + ".up", inter, hidden, up, dtype),
                            load_host_tensor(source, name + ".down", hidden, inter, *down_rows, dtype), *gu_bias,
                            *down_b, dtype, expert);
}

Result<void> MoeLayer::load_packed_gpt_oss_expert(const ModelSource& source, LoadedExpert& expert,
                                                  const std::vector<float>& gate_up_bias,
                                                  const std::vector<float>& down_bias) const {
  const int64_t num_experts = routing_.num_experts;
  const int64_t inter = intermediate_;
  const int64_t hidden = hidden_;
  const int32_t e = expert.expert_id;
  const std::string base = prefix_ + ".experts.";
  auto gate_up = find_mxfp4(source, base + "gate_up_proj", num_experts, 2 * inter, hidden);
  if (!gate_up.ok()) return gate_up.error();
  auto down = find_mxfp4(source, base + "down_proj", num_experts, hidden, inter);
  if (!down.ok()) return down.error();
  // Gate and up rows alternate in gate_up_proj: each is every other row, copied apart (packed).
  auto g = load_mxfp4_rows(source, *gate_up, e, 0, 2, inter);
  auto u = load_mxfp4_rows(source, *gate_up, e, 1, 2, inter);
  auto dn = load_mxfp4_rows(source, *down, e, 0, 1, hidden);
  // The biases in the dtype the dequantising path stores them in.
  return set_gpt_oss_expert(source, base + std::to_string(e), g, u, dn, gate_up_bias, down_bias,
                            mxfp4_expert_dtype(source, base), expert);
}

int64_t MoeLayer::host_copy_bytes() const {
  int64_t bytes = 0;
  for (const auto& expert : experts_) bytes += expert->arena ? expert->arena->size_bytes() : 0;
  return bytes;
}

std::vector<int32_t> MoeLayer::slot_experts(const ExpertPlacement& placement) const {
  if (parallel_) {
    const auto first =
        placement.physical_to_logical.begin() + int64_t{parallel_->group->rank()} * placement.slots_per_rank;
    return {first, first + placement.slots_per_rank};
  }
  std::vector<int32_t> all(static_cast<size_t>(routing_.num_experts));
  for (int32_t e = 0; e < routing_.num_experts; ++e) all[static_cast<size_t>(e)] = e;
  return all;
}

Result<StagedPlacement> MoeLayer::load_slots(const ModelSource& source, const ExpertPlacement& placement,
                                             const std::vector<std::shared_ptr<const LoadedExpert>>& held) const {
  StagedPlacement staged;
  staged.placement = placement;
  std::unordered_map<int32_t, std::shared_ptr<const LoadedExpert>> by_id;
  for (const auto& expert : held) by_id.emplace(expert->expert_id, expert);
  // Values computed at load go to each expert's own arena, so they leave with the expert (a
  // device backend's copies leave it empty: load_arena_weight).
  ModelSource expert_source = source;
  for (int32_t e : slot_experts(placement)) {
    std::shared_ptr<const LoadedExpert>& slot = by_id[e];
    if (!slot) {
      expert_source.arena = std::make_shared<WeightArena>();
      auto loaded = load_expert(expert_source, e);
      if (!loaded.ok()) return loaded.error();
      if (!expert_source.arena->empty()) loaded->arena = expert_source.arena;
      slot = std::make_shared<const LoadedExpert>(std::move(*loaded));
      ++staged.num_loaded;
    }
    staged.experts.push_back(slot);
  }
  return staged;
}

void MoeLayer::set_experts(std::vector<std::shared_ptr<const LoadedExpert>> experts) {
  experts_ = std::move(experts);
  const bool biases = !experts_.empty() && experts_.front()->gate_bias.data != nullptr;
  // clear() keeps each array's buffer, so a re-placement (same slot count) leaves the arrays where
  // the backend saw them last (the CUDA backend keeps a device pointer table per array).
  for (auto* views : {&gate_, &up_, &down_, &gate_bias_, &up_bias_, &down_bias_}) views->clear();
  for (const auto& expert : experts_) {
    gate_.push_back(expert->gate);
    up_.push_back(expert->up);
    down_.push_back(expert->down);
    if (!biases) continue;
    gate_bias_.push_back(expert->gate_bias);
    up_bias_.push_back(expert->up_bias);
    down_bias_.push_back(expert->down_bias);
  }
}

kernels::MoeExperts MoeLayer::experts_view() const {
  kernels::MoeExperts experts;
  experts.num_experts = static_cast<int32_t>(gate_.size());
  experts.top_k = routing_.top_k;
  experts.hidden = hidden_;
  experts.intermediate = intermediate_;
  experts.gate = gate_.data();
  experts.up = up_.data();
  experts.down = down_.data();
  if (!gate_bias_.empty()) {
    experts.gate_bias = gate_bias_.data();
    experts.up_bias = up_bias_.data();
    experts.down_bias = down_bias_.data();
  }
  experts.activation = activation_;
  experts.swiglu_alpha = swiglu_alpha_;
  experts.swiglu_limit = swiglu_limit_;
  return experts;
}

int64_t MoeLayer::scratch_floats(int64_t num_tokens) const {
  int64_t floats = num_tokens * routing_.num_experts + 2 * num_tokens * routing_.top_k;
  floats += kernels::moe_workspace_floats(num_tokens, experts_view());
  if (shared_) floats += num_tokens * hidden_ + 2 * num_tokens * shared_->intermediate_size();
  return floats;
}

int64_t MoeLayer::expert_bytes() const {
  int64_t bytes = 0;
  for (size_t e = 0; e < gate_.size(); ++e) {
    for (const auto* views : {&gate_, &up_, &down_, &gate_bias_, &up_bias_, &down_bias_}) {
      if (views->empty()) continue;
      bytes += kernels::weight_bytes((*views)[e]);
    }
  }
  return bytes / static_cast<int64_t>(gate_.size());
}

int64_t MoeLayer::weight_bytes() const {
  int64_t bytes = router_.weight_bytes();
  if (shared_) bytes += shared_->weight_bytes();
  return bytes + expert_bytes() * routing_.top_k;
}

void MoeLayer::forward(Backend& backend, const float* x, int64_t num_tokens, float* scratch, float* out) const {
  const int64_t n = num_tokens;
  const int32_t k = routing_.top_k;
  float* logits = scratch;                                      // [n, num_experts]
  auto* expert_ids = reinterpret_cast<int32_t*>(logits + n * routing_.num_experts);  // [n, top_k]
  float* expert_weights = logits + n * routing_.num_experts + n * k;                 // [n, top_k]
  float* workspace = expert_weights + n * k;
  const kernels::MoeExperts experts = experts_view();
  if (n > 0) router_.forward(backend, x, n, logits);
  // The shared experts run beside the routing and the routed experts (a device backend's side
  // stream): at decode sizes both are a few small launches that leave most of the device idle.
  const bool beside = shared_ && n > 0;
  float* shared_out = beside ? workspace + kernels::moe_workspace_floats(n, experts) : nullptr;  // [n, hidden]
  if (beside) {
    backend.begin_side_work();
    try {
      shared_->forward(backend, x, n, shared_out + n * hidden_, shared_out);
    } catch (...) {
      backend.end_side_work();
      backend.join_side_work();
      throw;
    }
    backend.end_side_work();
  }
  try {
    if (parallel_) {
      if (n > 0) backend.moe_route(logits, selection_bias_, n, routing_, expert_ids, expert_weights);
      forward_expert_parallel(backend, x, n, expert_ids, expert_weights, out);
    } else if (n > 0) {
      backend.moe_route_experts(logits, selection_bias_, routing_, x, n, expert_ids, expert_weights, experts, workspace,
                                token_counts_.as<int64_t>(), out);
    }
  } catch (...) {
    if (beside) backend.join_side_work();
    throw;
  }
  if (beside) {
    backend.join_side_work();
    backend.add(out, shared_out, n * hidden_, out);
  }
}

std::vector<int64_t> MoeLayer::expert_token_counts(Backend& backend) const {
  std::vector<int64_t> counts(gate_.size());
  backend.copy_to_host(counts.data(), token_counts_.data(), counts.size() * sizeof(int64_t));
  return counts;
}

void MoeLayer::reset_expert_token_counts(Backend& backend) const {
  const std::vector<int64_t> zeros(gate_.size(), 0);
  backend.copy_to_device(token_counts_.data(), zeros.data(), zeros.size() * sizeof(int64_t));
}

std::vector<int64_t> MoeLayer::take_routed_tokens() {
  std::vector<int64_t> taken(routed_tokens_.size(), 0);
  taken.swap(routed_tokens_);
  return taken;
}

void MoeLayer::upload_replicas(Backend& backend) {
  std::vector<int32_t> offsets = {0};
  std::vector<int32_t> slots;
  for (const std::vector<int32_t>& copies : placement_.replicas()) {
    slots.insert(slots.end(), copies.begin(), copies.end());
    offsets.push_back(static_cast<int32_t>(slots.size()));
  }
  replica_offsets_ = upload_vector(backend, offsets);
  replica_slots_ = upload_vector(backend, slots);
}

Result<StagedPlacement> MoeLayer::stage_placement(const ModelSource& source, const ExpertPlacement& placement) const {
  DI_CHECK(parallel_ != nullptr, "stage_placement needs expert parallelism");
  if (placement.num_logical_experts != placement_.num_logical_experts || placement.num_ranks != placement_.num_ranks ||
      placement.slots_per_rank != placement_.slots_per_rank) {
    return Error{prefix_ + ": a new placement must keep " + std::to_string(placement_.num_logical_experts) +
                 " experts on " + std::to_string(placement_.num_ranks) + " ranks x " +
                 std::to_string(placement_.slots_per_rank) + " slots"};
  }
  if (auto valid = placement.validate(); !valid.ok()) return Error{prefix_ + ": " + valid.error().message};
  return load_slots(source, placement, experts_);
}

void MoeLayer::install_placement(Backend& backend, StagedPlacement staged) {
  DI_CHECK(staged.experts.size() == experts_.size(), "a staged placement must fill this rank's slots");
  std::vector<std::shared_ptr<const LoadedExpert>> old = std::move(experts_);
  placement_ = std::move(staged.placement);
  set_experts(std::move(staged.experts));
  release_experts(backend, std::move(old), experts_);
  token_counts_ = backend.allocate(gate_.size() * sizeof(int64_t));
  upload_replicas(backend);
}

void MoeLayer::discard_placement(Backend& backend, StagedPlacement staged) const {
  release_experts(backend, std::move(staged.experts), experts_);
}

}  // namespace deepinfer
