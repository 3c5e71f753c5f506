// CPU KV-cache write and paged attention. The batch is cut into tasks of up to kTileTokens
// consecutive new tokens of one sequence times a range of kv heads; a task walks the cache in
// key blocks, heads outer and tokens inner, so a block's K/V slice is loaded once for all the
// tile's tokens. Every (token, head) takes the same steps however tasks are cut: batch invariant.
// Attention sinks enter once, in the final normalisation. 16-bit and fp8 caches are widened to
// float32 as a block's slice is packed, so every cache type runs the same float32 steps.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/attention_block.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {
namespace {

constexpr int32_t kTileTokens = 8;
// Tasks per thread to aim for when there are few tiles (decode): the kv heads are split to get there.
constexpr int32_t kTasksPerThread = 2;

DI_SIMD_CLONES float dot_portable(const float* a, const float* b, int32_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int32_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

DI_SIMD_CLONES void scale_and_add_values(float* acc, float rescale, const float* probs, const KeyBlockStep& step) {
#pragma omp simd
  for (int32_t d = 0; d < step.head_dim; ++d) acc[d] *= rescale;
  for (int32_t b = step.lo; b <= step.hi; ++b) {
    const float p = probs[b];
    const float* v = step.v_rows[b];
#pragma omp simd
    for (int32_t d = 0; d < step.head_dim; ++d) acc[d] += p * v[d];
  }
}

// Columns [first, first + count) of a cache row as float32 values (KvScales' reading): core/dtype's
// conversion (a table of the 256 values for e4m3, which measured faster here than decoding the
// bits in vector registers), then the columns' scales.
void unpack_columns(const uint8_t* row, DType dtype, const float* scales, int64_t first, int32_t count, float* dst) {
  convert_to_f32(row + first * static_cast<int64_t>(dtype_size_bytes(dtype)), dtype, static_cast<size_t>(count), dst);
  if (dtype != DType::kF8E4M3 || scales == nullptr) return;
#pragma omp simd
  for (int32_t d = 0; d < count; ++d) dst[d] *= scales[first + d];
}

// One row of write_kv: kv_dim values into a cache row of dtype.
void pack_row(const float* values, int64_t kv_dim, DType dtype, const float* scales, uint8_t* row) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(row, values, static_cast<size_t>(kv_dim) * sizeof(float));
      return;
    case DType::kBF16: {
      auto* bits = reinterpret_cast<uint16_t*>(row);
      for (int64_t c = 0; c < kv_dim; ++c) bits[c] = f32_to_bf16(values[c]);
      return;
    }
    case DType::kF8E4M3:
      if (scales == nullptr) {
        for (int64_t c = 0; c < kv_dim; ++c) row[c] = f32_to_f8e4m3(values[c]);
      } else {
        for (int64_t c = 0; c < kv_dim; ++c) row[c] = f32_to_f8e4m3(values[c] / scales[c]);
      }
      return;
    default:
      DI_CHECK(false, "a KV cache of " << dtype_name(dtype));
  }
}

struct Tile {
  int32_t seq;
  int32_t first_token;  // index into the batch's token dimension
  int32_t num_tokens;
};

struct AttentionContext {
  const float* q;
  const uint8_t* k_cache;
  const uint8_t* v_cache;
  bool keys_are_values;  // one cache and one scale vector for both (MLA)
  const PagedBatch* batch;
  const AttentionParams* params;
  float* out;
  void (*step_fn)(const KeyBlockStep&);
};

// One (token, kv head) state in a task's scratch: [group, kKeyBlock] probabilities, then
// [group, head_dim] accumulators, then per query head the running max, running sum and rescale.
struct StateView {
  float* probs;
  float* acc;
  float* running_max;
  float* running_sum;
  float* rescale;

  StateView(float* base, int32_t group, int32_t head_dim)
      : probs(base),
        acc(base + group * kKeyBlock),
        running_max(acc + static_cast<int64_t>(group) * head_dim),
        running_sum(running_max + group),
        rescale(running_sum + group) {}
};

// The task's tile, kv heads [head_begin, head_end), and where their states live.
struct TaskView {
  const AttentionContext* ctx;
  Tile tile;
  int32_t head_begin;
  int32_t head_end;
  int32_t first_pos;                  // position of the tile's first token
  float* scratch;                     // [tile tokens, kv heads] states, see state()
  float* k_pack;                      // [kKeyBlock, head_dim]: one kv head's K slice of the current block, float32
  float* v_pack;                      // [kKeyBlock, head_dim]
  const float* const* packed_k_rows;  // [kKeyBlock] rows of k_pack
  const float* const* packed_v_rows;

  int32_t group() const { return ctx->params->num_heads / ctx->params->num_kv_heads; }
  int32_t head_dim() const { return ctx->params->head_dim; }
  int64_t token_floats() const { return static_cast<int64_t>(ctx->params->num_heads) * head_dim(); }
  DType cache_dtype() const { return ctx->params->cache_dtype; }
  StateView state(int32_t t, int32_t h) const {
    const int64_t index = static_cast<int64_t>(t) * (head_end - head_begin) + (h - head_begin);
    return StateView(scratch + index * key_state_floats(group(), head_dim()), group(), head_dim());
  }
  // The last key token t of the tile sees: its own position, or past it by its lookahead.
  int32_t last_key(int32_t t) const {
    const int32_t* lookahead = ctx->batch->lookahead;
    return first_pos + t + (lookahead != nullptr ? lookahead[tile.first_token + t] : 0);
  }
  // The first key a token at `pos` sees.
  int32_t first_key(int32_t pos) const {
    const int32_t window = ctx->params->sliding_window;
    return window > 0 ? std::max(0, pos - window + 1) : 0;
  }
  // Cache rows (all kv heads) of positions [first, first + count) of the tile's sequence.
  void rows(int32_t first, int32_t count, const uint8_t** k_rows, const uint8_t** v_rows) const {
    const PagedBatch& batch = *ctx->batch;
    const int32_t* blocks = batch.block_table + static_cast<int64_t>(tile.seq) * batch.max_blocks_per_seq;
    const int64_t stride = static_cast<int64_t>(ctx->params->num_kv_heads) * head_dim() *
                           static_cast<int64_t>(dtype_size_bytes(cache_dtype()));
    for (int32_t b = 0; b < count; ++b) {
      const int32_t pos = first + b;
      const int64_t row =
          static_cast<int64_t>(blocks[pos / batch.block_size]) * batch.block_size + pos % batch.block_size;
      k_rows[b] = ctx->k_cache + row * stride;
      v_rows[b] = ctx->v_cache + row * stride;
    }
  }
  // Copies the kv head slice at column `head_offset` of the block's rows into k_pack / v_pack as
  // float32. In the cache the slices of consecutive positions sit num_kv_heads * head_dim elements
  // apart, often exactly 4 KiB: read in place, a block's 16 rows would fight over the same few L1 sets.
  // Keys that are their own values (MLA's latent rows) are packed once: packed_v_rows then point
  // into k_pack.
  void pack(const uint8_t* const* k_rows, const uint8_t* const* v_rows, int32_t count, int64_t head_offset) const {
    const KvScales& scales = ctx->params->cache_scales;
    for (int32_t b = 0; b < count; ++b) {
      unpack_columns(k_rows[b], cache_dtype(), scales.k, head_offset, head_dim(),
                     k_pack + static_cast<int64_t>(b) * head_dim());
      if (ctx->keys_are_values) continue;
      unpack_columns(v_rows[b], cache_dtype(), scales.v, head_offset, head_dim(),
                     v_pack + static_cast<int64_t>(b) * head_dim());
    }
  }
  // Pulls this task's slice of the given rows towards the cache while the current block computes:
  // a kv head's slices of consecutive positions sit num_kv_heads * head_dim elements apart, often a
  // new 4 KiB page per key, where the hardware prefetchers stop.
  void prefetch(const uint8_t* const* rows, int32_t count) const {
    const auto element = static_cast<int64_t>(dtype_size_bytes(cache_dtype()));
    const int64_t offset = static_cast<int64_t>(head_begin) * head_dim() * element;
    const int64_t bytes = static_cast<int64_t>(head_end - head_begin) * head_dim() * element;
    for (int32_t b = 0; b < count; ++b) {
      const uint8_t* base = rows[b] + offset;
      for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(base + off, 0, 2);
    }
  }
};

void run_task(const TaskView& task) {
  const int32_t group = task.group();
  const int32_t head_dim = task.head_dim();
  int32_t last_pos = 0;  // the last key any token of the tile sees
  for (int32_t t = 0; t < task.tile.num_tokens; ++t) last_pos = std::max(last_pos, task.last_key(t));
  for (int32_t t = 0; t < task.tile.num_tokens; ++t) {
    for (int32_t h = task.head_begin; h < task.head_end; ++h) {
      const StateView s = task.state(t, h);
      std::fill(s.acc, s.acc + static_cast<int64_t>(group) * head_dim, 0.0f);
      std::fill(s.running_max, s.running_max + group, -INFINITY);
      std::fill(s.running_sum, s.running_sum + group, 0.0f);
    }
  }
  const uint8_t* k_rows[kKeyBlock];
  const uint8_t* v_rows[kKeyBlock];
  const uint8_t* next_k_rows[kKeyBlock];
  const uint8_t* next_v_rows[kKeyBlock];
  const float* in_place_k_rows[kKeyBlock];
  const float* in_place_v_rows[kKeyBlock];
  int32_t block_start = task.first_key(task.first_pos) / kKeyBlock * kKeyBlock;
  task.rows(block_start, std::min(kKeyBlock, last_pos - block_start + 1), k_rows, v_rows);
  for (; block_start <= last_pos; block_start += kKeyBlock) {
    const int32_t count = std::min(kKeyBlock, last_pos - block_start + 1);
    const int32_t next_count = std::clamp(last_pos - block_start - kKeyBlock + 1, 0, kKeyBlock);
    task.rows(block_start + kKeyBlock, next_count, next_k_rows, next_v_rows);
    task.prefetch(next_k_rows, next_count);
    task.prefetch(next_v_rows, next_count);
    // Heads outer, tokens inner: one kv head's slice of the block is packed once for all tokens.
    // A single token (decode) over a float32 cache reads each slice once, so it reads them in
    // place: the step takes every 64-byte line once whatever the stride, and a copy would only add
    // traffic. Same values, same arithmetic: the results do not change.
    for (int32_t h = task.head_begin; h < task.head_end; ++h) {
      const float* const* step_k_rows = task.packed_k_rows;
      const float* const* step_v_rows = task.packed_v_rows;
      if (task.tile.num_tokens == 1 && task.cache_dtype() == DType::kF32) {
        const int64_t head_offset = static_cast<int64_t>(h) * head_dim;
        // The AVX-512 step loads all kKeyBlock rows (masking the scores): rows past count repeat row 0.
        for (int32_t b = 0; b < kKeyBlock; ++b) {
          in_place_k_rows[b] = reinterpret_cast<const float*>(k_rows[b < count ? b : 0]) + head_offset;
          in_place_v_rows[b] = reinterpret_cast<const float*>(v_rows[b < count ? b : 0]) + head_offset;
        }
        step_k_rows = in_place_k_rows;
        step_v_rows = in_place_v_rows;
      } else {
        task.pack(k_rows, v_rows, count, static_cast<int64_t>(h) * head_dim);
      }
      for (int32_t t = 0; t < task.tile.num_tokens; ++t) {
        const int32_t pos = task.first_pos + t;
        const int32_t lo = std::max(block_start, task.first_key(pos)) - block_start;
        const int32_t hi = std::min(block_start + kKeyBlock - 1, task.last_key(t)) - block_start;
        if (lo > hi) continue;
        const StateView s = task.state(t, h);
        const float* q = task.ctx->q + (task.tile.first_token + t) * task.token_floats() +
                         static_cast<int64_t>(h) * group * head_dim;
        task.ctx->step_fn(KeyBlockStep{q, step_k_rows, step_v_rows, lo, hi, group, head_dim,
                                       task.ctx->params->scale, s.probs, s.acc, s.running_max, s.running_sum,
                                       s.rescale});
      }
    }
    std::copy(next_k_rows, next_k_rows + next_count, k_rows);
    std::copy(next_v_rows, next_v_rows + next_count, v_rows);
  }
  for (int32_t t = 0; t < task.tile.num_tokens; ++t) {
    for (int32_t h = task.head_begin; h < task.head_end; ++h) {
      const StateView s = task.state(t, h);
      float* out = task.ctx->out + (task.tile.first_token + t) * task.token_floats() +
                   static_cast<int64_t>(h) * group * head_dim;
      const float* sinks = task.ctx->params->sinks;
      for (int32_t g = 0; g < group; ++g) {
        // A sink joins the denominator only: the scores' online sum is relative to running_max.
        const float sink_term = sinks != nullptr ? fast_exp(sinks[h * group + g] - s.running_max[g]) : 0.0f;
        const float inv_sum = 1.0f / (s.running_sum[g] + sink_term);
        for (int32_t d = 0; d < head_dim; ++d) out[g * head_dim + d] = s.acc[g * head_dim + d] * inv_sum;
      }
    }
  }
}

}  // namespace

// The same arithmetic as key_block_step_avx512, one query head at a time.
void key_block_step_portable(const KeyBlockStep& step) {
  for (int32_t g = 0; g < step.group; ++g) {
    float* p = step.probs + g * kKeyBlock;
    float block_max = -INFINITY;
    for (int32_t b = step.lo; b <= step.hi; ++b) {
      p[b] = dot_portable(step.q + static_cast<int64_t>(g) * step.head_dim, step.k_rows[b], step.head_dim) * step.scale;
      block_max = std::max(block_max, p[b]);
    }
    const float new_max = std::max(step.running_max[g], block_max);
    const float rescale = fast_exp(step.running_max[g] - new_max);  // ~0 on the first step (max -inf)
    float block_sum = 0.0f;
    for (int32_t b = step.lo; b <= step.hi; ++b) {
      p[b] = fast_exp(p[b] - new_max);
      block_sum += p[b];
    }
    step.running_sum[g] = step.running_sum[g] * rescale + block_sum;
    step.running_max[g] = new_max;
    scale_and_add_values(step.acc + static_cast<int64_t>(g) * step.head_dim, rescale, p, step);
  }
}

void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim,
              DType cache_dtype, KvScales scales, void* k_cache, void* v_cache) {
  const int64_t row_bytes = kv_dim * static_cast<int64_t>(dtype_size_bytes(cache_dtype));
  // MLA writes its latent rows as keys and values of one cache: once is enough.
  const bool same_rows = k == v && k_cache == v_cache && scales.k == scales.v;
#pragma omp parallel for schedule(static) if (num_tokens * kv_dim >= 65536)
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;  // a replayed token whose KV is already cached (as the CUDA kernel)
    pack_row(k + t * kv_dim, kv_dim, cache_dtype, scales.k, static_cast<uint8_t*>(k_cache) + slot * row_bytes);
    if (same_rows) continue;
    pack_row(v + t * kv_dim, kv_dim, cache_dtype, scales.v, static_cast<uint8_t*>(v_cache) + slot * row_bytes);
  }
}

void paged_attention_with(Isa isa, const float* q, const void* k_cache, const void* v_cache, const PagedBatch& batch,
                          const AttentionParams& params, float* out) {
  DI_CHECK(
      params.num_kv_heads > 0 && params.num_heads % params.num_kv_heads == 0 && params.head_dim > 0,
      "num_heads " << params.num_heads << ", num_kv_heads " << params.num_kv_heads << ", head_dim " << params.head_dim);
  DI_CHECK(
      params.cache_dtype == DType::kF32 || params.cache_dtype == DType::kBF16 || params.cache_dtype == DType::kF8E4M3,
      "a KV cache of " << dtype_name(params.cache_dtype));
  std::vector<Tile> tiles;
  for (int32_t s = 0; s < batch.num_seqs; ++s) {
    const int32_t num_new = batch.query_start[s + 1] - batch.query_start[s];
    DI_CHECK(num_new >= 0 && num_new <= batch.seq_len[s],
             "sequence " << s << " has " << num_new << " new tokens but length " << batch.seq_len[s]);
    for (int32_t j = 0; batch.lookahead != nullptr && j < num_new; ++j) {
      DI_CHECK(
          batch.lookahead[batch.query_start[s] + j] >= 0 && j + batch.lookahead[batch.query_start[s] + j] < num_new,
          "token " << batch.query_start[s] + j << " looks past its sequence's new tokens");
    }
    for (int32_t j = 0; j < num_new; j += kTileTokens) {
      tiles.push_back(Tile{s, batch.query_start[s] + j, std::min(kTileTokens, num_new - j)});
    }
  }
  if (tiles.empty()) return;
  const auto num_tiles = static_cast<int32_t>(tiles.size());
  const int32_t wanted_tasks = kTasksPerThread * omp_get_max_threads();
  const int32_t wanted_splits = std::clamp((wanted_tasks + num_tiles - 1) / num_tiles, 1, params.num_kv_heads);
  const int32_t heads_per_task = (params.num_kv_heads + wanted_splits - 1) / wanted_splits;
  const int32_t head_splits = (params.num_kv_heads + heads_per_task - 1) / heads_per_task;
  const int64_t num_tasks = static_cast<int64_t>(num_tiles) * head_splits;
  const int32_t group = params.num_heads / params.num_kv_heads;
  const bool keys_are_values = k_cache == v_cache && params.cache_scales.k == params.cache_scales.v;
  const AttentionContext ctx{q,
                             static_cast<const uint8_t*>(k_cache),
                             static_cast<const uint8_t*>(v_cache),
                             keys_are_values,
                             &batch,
                             &params,
                             out,
                             isa == Isa::kAvx512 ? &key_block_step_avx512 : &key_block_step_portable};

#pragma omp parallel if (num_tasks > 1)
  {
    const int64_t states_floats = kTileTokens * heads_per_task * key_state_floats(group, params.head_dim);
    // Per thread and kept between calls: no allocation per layer in decode (run_task sets every state).
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(states_floats + 2 * kKeyBlock * params.head_dim));
    float* k_pack = scratch.data() + states_floats;
    float* v_pack = k_pack + kKeyBlock * params.head_dim;
    const float* packed_k_rows[kKeyBlock];
    const float* packed_v_rows[kKeyBlock];
    for (int32_t b = 0; b < kKeyBlock; ++b) {
      packed_k_rows[b] = k_pack + static_cast<int64_t>(b) * params.head_dim;
      packed_v_rows[b] = (keys_are_values ? k_pack : v_pack) + static_cast<int64_t>(b) * params.head_dim;
    }
    // Dynamic: causal tiles differ in length, and which thread runs a task never changes its result.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < num_tasks; ++task) {
      const Tile& tile = tiles[static_cast<size_t>(task / head_splits)];
      const auto head_begin = static_cast<int32_t>(task % head_splits) * heads_per_task;
      const int32_t num_new = batch.query_start[tile.seq + 1] - batch.query_start[tile.seq];
      const int32_t first_pos = batch.seq_len[tile.seq] - num_new + (tile.first_token - batch.query_start[tile.seq]);
      run_task(TaskView{&ctx, tile, head_begin, std::min(head_begin + heads_per_task, params.num_kv_heads), first_pos,
                        scratch.data(), k_pack, v_pack, packed_k_rows, packed_v_rows});
    }
  }
}

void paged_attention(const float* q, const void* k_cache, const void* v_cache, const PagedBatch& batch,
                     const AttentionParams& params, float* out) {
  paged_attention_with(best_isa(), q, k_cache, v_cache, batch, params, out);
}

}  // namespace deepinfer::kernels::cpu
