// paged_attention and write_kv: the reference against closed forms, every cpu implementation
// against the reference (GQA ratios, head dims, block sizes, windows, lookahead, chunked prefill), and the
// cpu kernel's batch invariance; attention sinks against a closed form and the reference; bf16 and
// fp8 caches against core/dtype's conversions (KvScales' definition) and the reference.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/cpu/attention_block.h"

namespace deepinfer::kernels {
namespace {

// A batch of sequences over a paged cache whose blocks are handed out in shuffled order.
struct Scenario {
  AttentionParams params;
  int32_t block_size = 0;
  std::vector<int32_t> seq_len;
  std::vector<int32_t> query_start;
  std::vector<int32_t> block_table;  // [num_seqs, max_blocks]
  int32_t max_blocks = 0;
  std::vector<float> k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim]
  std::vector<float> v_cache;
  std::vector<float> q;  // [num_tokens, num_heads, head_dim]

  int64_t kv_dim() const { return static_cast<int64_t>(params.num_kv_heads) * params.head_dim; }
  int64_t num_tokens() const { return query_start.back(); }
  PagedBatch batch() const {
    return PagedBatch{static_cast<int32_t>(seq_len.size()),
                      query_start.data(),
                      seq_len.data(),
                      block_table.data(),
                      max_blocks,
                      block_size};
  }
  // Cache slot of position pos of sequence s.
  int32_t slot(size_t s, int32_t pos) const {
    return block_table[s * static_cast<size_t>(max_blocks) + static_cast<size_t>(pos / block_size)] * block_size +
           pos % block_size;
  }
};

// Sequence s holds seq_len[s] tokens of which the last num_new[s] are new (the queries).
Scenario make_scenario(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim, int32_t block_size, int32_t window,
                       const std::vector<int32_t>& seq_len, const std::vector<int32_t>& num_new, uint32_t seed) {
  Scenario sc;
  sc.params =
      AttentionParams{num_heads, num_kv_heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim)), window};
  sc.block_size = block_size;
  sc.seq_len = seq_len;
  sc.query_start.push_back(0);
  for (int32_t n : num_new) sc.query_start.push_back(sc.query_start.back() + n);
  for (int32_t len : seq_len) sc.max_blocks = std::max(sc.max_blocks, (len + block_size - 1) / block_size);
  const int32_t num_blocks = sc.max_blocks * static_cast<int32_t>(seq_len.size()) + 1;
  std::vector<int32_t> order(static_cast<size_t>(num_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  sc.block_table.assign(seq_len.size() * static_cast<size_t>(sc.max_blocks), -1);
  size_t next = 0;
  for (size_t s = 0; s < seq_len.size(); ++s) {
    for (int32_t b = 0; b < (seq_len[s] + block_size - 1) / block_size; ++b) {
      sc.block_table[s * static_cast<size_t>(sc.max_blocks) + static_cast<size_t>(b)] = order[next++];
    }
  }
  const size_t cache_floats = static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size * sc.kv_dim());
  // Unwritten rows hold NaN: reading a key outside a sequence's blocks poisons the result.
  sc.k_cache.assign(cache_floats, std::numeric_limits<float>::quiet_NaN());
  sc.v_cache.assign(cache_floats, std::numeric_limits<float>::quiet_NaN());
  for (size_t s = 0; s < seq_len.size(); ++s) {
    const auto k =
        testing::random_floats(static_cast<size_t>(seq_len[s] * sc.kv_dim()), seed + 100 + static_cast<uint32_t>(s));
    const auto v =
        testing::random_floats(static_cast<size_t>(seq_len[s] * sc.kv_dim()), seed + 200 + static_cast<uint32_t>(s));
    std::vector<int32_t> slots;
    for (int32_t p = 0; p < seq_len[s]; ++p) slots.push_back(sc.slot(s, p));
    ref::write_kv(k.data(), v.data(), slots.data(), seq_len[s], sc.kv_dim(), DType::kF32, {}, sc.k_cache.data(),
                  sc.v_cache.data());
  }
  sc.q = testing::random_floats(static_cast<size_t>(sc.num_tokens() * num_heads * head_dim), seed + 300);
  return sc;
}

std::vector<float> run_ref(const Scenario& sc) {
  std::vector<float> out(sc.q.size());
  ref::paged_attention(sc.q.data(), sc.k_cache.data(), sc.v_cache.data(), sc.batch(), sc.params, out.data());
  return out;
}

// Softmax-weighted mean of V (|v| <= 1) with fp32 scores. A score is an fp32 dot of length d whose
// rounding error grows like eps sqrt(d) |q|_2 max|k| (max|k| <= 1); it and exp's few ulp move each
// weight by that relative amount. The weighted sum of values is a convex combination: its own
// roundings stay within a few eps of max|v|.
double attention_tolerance(const Scenario& sc) {
  const int32_t d = sc.params.head_dim;
  double max_q_norm = 0.0;
  for (size_t r = 0; r < sc.q.size() / static_cast<size_t>(d); ++r) {
    double sum_squares = 0.0;
    for (int32_t i = 0; i < d; ++i) {
      const double v = sc.q[r * static_cast<size_t>(d) + static_cast<size_t>(i)];
      sum_squares += v * v;
    }
    max_q_norm = std::max(max_q_norm, std::sqrt(sum_squares));
  }
  const double score_error = std::sqrt(static_cast<double>(d)) * sc.params.scale * max_q_norm;
  return 8.0 * testing::kEpsF32 * (score_error + 4.0);
}

std::vector<cpu::Isa> attention_isas() {
  std::vector<cpu::Isa> isas{cpu::Isa::kPortable};
  if (cpu::best_isa() == cpu::Isa::kAvx512) isas.push_back(cpu::Isa::kAvx512);
  return isas;
}

// Five sequences: a 1-token prompt, a decode step, chunked prefill after a cached prefix, a whole
// prompt, and a few new tokens after a prefix longer than one 128-token block.
const std::vector<int32_t> kSeqLen = {1, 37, 50, 20, 150};
const std::vector<int32_t> kNumNew = {1, 1, 13, 20, 3};

TEST(PagedAttention, CpuMatchesRefAcrossShapes) {
  for (int32_t ratio : {1, 2, 4, 8}) {
    for (int32_t head_dim : {16, 64, 80, 128}) {
      for (int32_t block_size : {1, 16, 128}) {
        for (int32_t window : {0, 5, 1000}) {
          const Scenario sc = make_scenario(2 * ratio, 2, head_dim, block_size, window, kSeqLen, kNumNew,
                                            static_cast<uint32_t>(ratio * 1000 + head_dim + block_size + window));
          const std::vector<float> expected = run_ref(sc);
          const double tolerance = attention_tolerance(sc);
          for (cpu::Isa isa : attention_isas()) {
            std::vector<float> actual(sc.q.size());
            cpu::paged_attention_with(isa, sc.q.data(), sc.k_cache.data(), sc.v_cache.data(), sc.batch(), sc.params,
                                      actual.data());
            testing::expect_within(actual, expected, tolerance,
                                   std::string(cpu::isa_name(isa)) + " gqa " + std::to_string(ratio) + " head_dim " +
                                       std::to_string(head_dim) + " block " + std::to_string(block_size) + " window " +
                                       std::to_string(window));
          }
        }
      }
    }
  }
}

TEST(PagedAttention, CpuIsBatchInvariant) {
  const Scenario sc = make_scenario(8, 2, 64, 16, 0, kSeqLen, kNumNew, 7);
  std::vector<float> batched(sc.q.size());
  cpu::paged_attention(sc.q.data(), sc.k_cache.data(), sc.v_cache.data(), sc.batch(), sc.params, batched.data());
  const int64_t token_floats = static_cast<int64_t>(sc.params.num_heads) * sc.params.head_dim;
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, saved_threads}) {
    omp_set_num_threads(threads);
    for (size_t s = 0; s < sc.seq_len.size(); ++s) {
      const int32_t num_new = sc.query_start[s + 1] - sc.query_start[s];
      const int32_t query_start[2] = {0, num_new};
      const PagedBatch alone{1,
                             query_start,
                             &sc.seq_len[s],
                             sc.block_table.data() + s * static_cast<size_t>(sc.max_blocks),
                             sc.max_blocks,
                             sc.block_size};
      std::vector<float> out(static_cast<size_t>(num_new * token_floats));
      cpu::paged_attention(sc.q.data() + sc.query_start[s] * token_floats, sc.k_cache.data(), sc.v_cache.data(), alone,
                           sc.params, out.data());
      EXPECT_EQ(0,
                std::memcmp(out.data(), batched.data() + sc.query_start[s] * token_floats, out.size() * sizeof(float)))
          << "sequence " << s << " with " << threads << " threads";
    }
  }
  omp_set_num_threads(saved_threads);
}

TEST(PagedAttention, CpuChunkedPrefillMatchesOneShot) {
  // A 45-token prompt prefilled at once vs in chunks of 13, 20 and 12 tokens (the cache already
  // holds every chunk's keys): each token's output must be bitwise the same.
  for (int32_t window : {0, 7}) {
    const Scenario sc = make_scenario(8, 2, 64, 16, window, {45}, {45}, 11);
    std::vector<float> whole(sc.q.size());
    cpu::paged_attention(sc.q.data(), sc.k_cache.data(), sc.v_cache.data(), sc.batch(), sc.params, whole.data());
    const int64_t token_floats = static_cast<int64_t>(sc.params.num_heads) * sc.params.head_dim;
    int32_t done = 0;
    for (int32_t chunk : {13, 20, 12}) {
      const int32_t seq_len = done + chunk;
      const int32_t query_start[2] = {0, chunk};
      const PagedBatch batch{1, query_start, &seq_len, sc.block_table.data(), sc.max_blocks, sc.block_size};
      std::vector<float> out(static_cast<size_t>(chunk * token_floats));
      cpu::paged_attention(sc.q.data() + done * token_floats, sc.k_cache.data(), sc.v_cache.data(), batch, sc.params,
                           out.data());
      EXPECT_EQ(0, std::memcmp(out.data(), whole.data() + done * token_floats, out.size() * sizeof(float)))
          << "chunk ending at " << seq_len << ", window " << window;
      done = seq_len;
    }
  }
}

TEST(PagedAttention, CpuDecodeStepsMatchPrefill) {
  // One new token reads the cache in place, several pack it: a token decoded alone must still
  // give the bits it gets inside a prefill (partial key blocks, sliding window included).
  for (int32_t window : {0, 7}) {
    const Scenario sc = make_scenario(8, 2, 64, 16, window, {45}, {45}, 13);
    std::vector<float> whole(sc.q.size());
    cpu::paged_attention(sc.q.data(), sc.k_cache.data(), sc.v_cache.data(), sc.batch(), sc.params, whole.data());
    const int64_t token_floats = static_cast<int64_t>(sc.params.num_heads) * sc.params.head_dim;
    for (int32_t seq_len : {1, 16, 17, 31, 45}) {
      const int32_t query_start[2] = {0, 1};
      const PagedBatch batch{1, query_start, &seq_len, sc.block_table.data(), sc.max_blocks, sc.block_size};
      std::vector<float> out(static_cast<size_t>(token_floats));
      cpu::paged_attention(sc.q.data() + (seq_len - 1) * token_floats, sc.k_cache.data(), sc.v_cache.data(), batch,
                           sc.params, out.data());
      EXPECT_EQ(0, std::memcmp(out.data(), whole.data() + (seq_len - 1) * token_floats, out.size() * sizeof(float)))
          << "token " << seq_len - 1 << ", window " << window;
    }
  }
}

TEST(RefAttention, OneKeyReturnsItsValue) {
  const Scenario sc = make_scenario(4, 2, 16, 16, 0, {1}, {1}, 3);
  const std::vector<float> out = run_ref(sc);
  for (int32_t h = 0; h < 4; ++h) {
    for (int32_t d = 0; d < 16; ++d) {
      EXPECT_EQ(out[static_cast<size_t>(h * 16 + d)],
                sc.v_cache[static_cast<size_t>(sc.slot(0, 0) * sc.kv_dim() + (h / 2) * 16 + d)]);
    }
  }
}

// With q = 0 every visible key scores 0, so each output is the plain mean of the visible V rows:
// this pins down the causal, sliding-window and lookahead masks exactly (lookahead: per new token,
// empty for none).
void expect_mean_of_visible_values(int32_t window, const std::vector<int32_t>& lookahead = {}) {
  const std::vector<int32_t> seq_len = {9};
  const std::vector<int32_t> num_new = {4};
  Scenario sc = make_scenario(2, 1, 16, 4, window, seq_len, num_new, 5);
  std::fill(sc.q.begin(), sc.q.end(), 0.0f);
  PagedBatch batch = sc.batch();
  batch.lookahead = lookahead.empty() ? nullptr : lookahead.data();
  std::vector<float> out(sc.q.size());
  ref::paged_attention(sc.q.data(), sc.k_cache.data(), sc.v_cache.data(), batch, sc.params, out.data());
  for (int32_t j = 0; j < 4; ++j) {
    const int32_t pos = 9 - 4 + j;
    const int32_t first = window == 0 ? 0 : std::max(0, pos - window + 1);
    const int32_t last = pos + (lookahead.empty() ? 0 : lookahead[static_cast<size_t>(j)]);
    for (int32_t h = 0; h < 2; ++h) {
      for (int32_t d = 0; d < 16; ++d) {
        double sum = 0.0;
        for (int32_t k = first; k <= last; ++k) sum += sc.v_cache[static_cast<size_t>(sc.slot(0, k) * sc.kv_dim() + d)];
        const double mean = sum / (last - first + 1);
        EXPECT_NEAR(out[static_cast<size_t>((j * 2 + h) * 16 + d)], mean, 4 * testing::kEpsF32)
            << "window " << window << " token " << j << " head " << h << " dim " << d;
      }
    }
  }
}

TEST(RefAttention, UniformScoresAverageVisibleValues) {
  expect_mean_of_visible_values(0);
  expect_mean_of_visible_values(1);
  expect_mean_of_visible_values(3);
  expect_mean_of_visible_values(100);
}

// Gemma 3's image tokens: the first three new tokens are one image and see each other both ways;
// the window still counts back from each token's own position.
TEST(RefAttention, LookaheadExtendsEachTokensKeys) {
  for (int32_t window : {0, 2, 3, 100}) {
    expect_mean_of_visible_values(window, {2, 1, 0, 0});
    expect_mean_of_visible_values(window, {0, 2, 1, 0});
  }
}

// Images of several lengths in a prefill chunk and after a cached prefix, every cpu implementation
// against the reference, with and without windows.
TEST(PagedAttention, LookaheadCpuMatchesRef) {
  for (int32_t window : {0, 5, 1000}) {
    for (int32_t block_size : {1, 16}) {
      const Scenario sc =
          make_scenario(4, 2, 64, block_size, window, kSeqLen, kNumNew, static_cast<uint32_t>(window + block_size + 7));
      // Sequence 2's 13 new tokens hold an image at its new tokens 2..8, sequence 3's 20 one at 0..3
      // and one at 10..19; the rest look at nothing ahead.
      std::vector<int32_t> lookahead(static_cast<size_t>(sc.num_tokens()), 0);
      const auto image = [&](int32_t first, int32_t count) {
        for (int32_t i = 0; i < count; ++i) lookahead[static_cast<size_t>(first + i)] = count - 1 - i;
      };
      image(sc.query_start[2] + 2, 7);
      image(sc.query_start[3], 4);
      image(sc.query_start[3] + 10, 10);
      PagedBatch batch = sc.batch();
      batch.lookahead = lookahead.data();
      std::vector<float> expected(sc.q.size());
      ref::paged_attention(sc.q.data(), sc.k_cache.data(), sc.v_cache.data(), batch, sc.params, expected.data());
      // The images change what their tokens see: without lookahead the result differs.
      EXPECT_NE(expected, run_ref(sc));
      for (cpu::Isa isa : attention_isas()) {
        std::vector<float> actual(sc.q.size());
        cpu::paged_attention_with(isa, sc.q.data(), sc.k_cache.data(), sc.v_cache.data(), batch, sc.params,
                                  actual.data());
        testing::expect_within(actual, expected, attention_tolerance(sc),
                               std::string(cpu::isa_name(isa)) + " lookahead window " + std::to_string(window) +
                                   " block " + std::to_string(block_size));
      }
    }
  }
}

TEST(RefAttention, DominantKeyWins) {
  // Query aligned with key 2 and scaled so its score exceeds the others by > 100: the softmax
  // puts all but e^-100 of the weight on key 2, so the output is V[2].
  Scenario sc = make_scenario(1, 1, 16, 16, 0, {5}, {1}, 9);
  for (int32_t k = 0; k < 5; ++k) {
    for (int32_t d = 0; d < 16; ++d)
      sc.k_cache[static_cast<size_t>(sc.slot(0, k) * 16 + d)] =
          k == 2 ? (d == 0 ? 1.0f : 0.0f) : (d == 1 ? 1.0f : 0.0f);
  }
  std::fill(sc.q.begin(), sc.q.end(), 0.0f);
  sc.q[0] = 500.0f;
  const std::vector<float> out = run_ref(sc);
  for (int32_t d = 0; d < 16; ++d)
    EXPECT_EQ(out[static_cast<size_t>(d)], sc.v_cache[static_cast<size_t>(sc.slot(0, 2) * 16 + d)]);
}

// Sinks of both signs and sizes (one far above every score, so the keys keep almost no weight),
// with and without a window, every cpu implementation against the reference.
TEST(PagedAttention, SinksCpuMatchesRef) {
  for (int32_t ratio : {1, 4}) {
    for (int32_t window : {0, 5}) {
      Scenario sc = make_scenario(2 * ratio, 2, 64, 16, window, kSeqLen, kNumNew, static_cast<uint32_t>(ratio + window));
      std::vector<float> sinks = testing::random_floats(static_cast<size_t>(sc.params.num_heads), 41, -3.0f, 3.0f);
      sinks.back() = 40.0f;
      sc.params.sinks = sinks.data();
      const std::vector<float> expected = run_ref(sc);
      for (cpu::Isa isa : attention_isas()) {
        std::vector<float> actual(sc.q.size());
        cpu::paged_attention_with(isa, sc.q.data(), sc.k_cache.data(), sc.v_cache.data(), sc.batch(), sc.params,
                                  actual.data());
        testing::expect_within(actual, expected, attention_tolerance(sc),
                               std::string(cpu::isa_name(isa)) + " sinks gqa " + std::to_string(ratio) + " window " +
                                   std::to_string(window));
      }
    }
  }
}

// One key with score s and a sink z: the output is V * e^s / (e^s + e^z), a closed form.
TEST(RefAttention, SinkJoinsTheDenominatorOnly) {
  Scenario sc = make_scenario(2, 1, 16, 16, 0, {1}, {1}, 13);
  std::fill(sc.q.begin(), sc.q.end(), 0.0f);  // score 0 for both heads
  const float sinks[2] = {0.0f, std::log(3.0f)};
  sc.params.sinks = sinks;
  const std::vector<float> out = run_ref(sc);
  for (int32_t d = 0; d < 16; ++d) {
    const float v = sc.v_cache[static_cast<size_t>(sc.slot(0, 0) * sc.kv_dim() + d)];
    EXPECT_NEAR(out[static_cast<size_t>(d)], v / 2.0f, 2 * testing::kEpsF32);
    EXPECT_NEAR(out[static_cast<size_t>(16 + d)], v / 4.0f, 2 * testing::kEpsF32);
  }
}

TEST(WriteKv, CpuWritesTheSameSlotsAsRef) {
  const int64_t kv_dim = 40;
  const std::vector<int32_t> slots = {7, 0, 19, 3, 12};
  const auto k = testing::random_floats(slots.size() * kv_dim, 1);
  const auto v = testing::random_floats(slots.size() * kv_dim, 2);
  std::vector<float> k_ref(20 * kv_dim, 0.5f), v_ref(20 * kv_dim, 0.5f);
  std::vector<float> k_cpu = k_ref, v_cpu = v_ref;
  ref::write_kv(k.data(), v.data(), slots.data(), 5, kv_dim, DType::kF32, {}, k_ref.data(), v_ref.data());
  cpu::write_kv(k.data(), v.data(), slots.data(), 5, kv_dim, DType::kF32, {}, k_cpu.data(), v_cpu.data());
  EXPECT_EQ(k_cpu, k_ref);
  EXPECT_EQ(v_cpu, v_ref);
  for (int64_t i = 0; i < kv_dim; ++i)
    EXPECT_EQ(k_ref[static_cast<size_t>(19 * kv_dim + i)], k[static_cast<size_t>(2 * kv_dim + i)]);
}

// A scenario's float32 caches rewritten as dtype (every row, unwritten NaN rows included, so they
// still poison a read outside a sequence's blocks), with per-column scales for fp8.
struct CodedCaches {
  std::vector<uint8_t> k, v;
  std::vector<float> k_scales, v_scales;
  KvScales scales() const {
    return {k_scales.empty() ? nullptr : k_scales.data(), v_scales.empty() ? nullptr : v_scales.data()};
  }
};

CodedCaches code_caches(const Scenario& sc, DType dtype, bool with_scales) {
  CodedCaches coded;
  if (with_scales) {
    coded.k_scales = testing::random_floats(static_cast<size_t>(sc.kv_dim()), 51, 0.01f, 0.05f);
    coded.v_scales = testing::random_floats(static_cast<size_t>(sc.kv_dim()), 52, 0.01f, 0.05f);
  }
  const int64_t rows = static_cast<int64_t>(sc.k_cache.size()) / sc.kv_dim();
  std::vector<int32_t> all(static_cast<size_t>(rows));
  std::iota(all.begin(), all.end(), 0);
  coded.k.resize(static_cast<size_t>(rows * sc.kv_dim()) * dtype_size_bytes(dtype));
  coded.v.resize(coded.k.size());
  ref::write_kv(sc.k_cache.data(), sc.v_cache.data(), all.data(), rows, sc.kv_dim(), dtype, coded.scales(),
                coded.k.data(), coded.v.data());
  return coded;
}

// write_kv rounds as core/dtype's conversions do (bf16 nearest even; fp8: value / scale to the
// nearest e4m3, saturated), cpu and ref alike, and skips negative slots.
TEST(WriteKv, CodedCachesHoldTheNearestCodes) {
  const int64_t kv_dim = 48;
  const std::vector<int32_t> slots = {7, -1, 19, 3, 12};
  std::vector<float> k = testing::random_floats(slots.size() * kv_dim, 3, -500.0f, 500.0f);
  std::vector<float> v = testing::random_floats(slots.size() * kv_dim, 4, -0.02f, 0.02f);
  const auto k_scales = testing::random_floats(static_cast<size_t>(kv_dim), 5, 0.5f, 2.0f);
  const auto v_scales = testing::random_floats(static_cast<size_t>(kv_dim), 6, 0.001f, 0.004f);
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    const KvScales scales = dtype == DType::kF8E4M3 ? KvScales{k_scales.data(), v_scales.data()} : KvScales{};
    const size_t bytes = 20 * static_cast<size_t>(kv_dim) * dtype_size_bytes(dtype);
    std::vector<uint8_t> k_ref(bytes, 0x11), v_ref(bytes, 0x11);
    std::vector<uint8_t> k_cpu = k_ref, v_cpu = v_ref;
    std::vector<int32_t> ref_slots = slots;
    ref_slots[1] = 0;  // ref does not take negative slots; row 0 is then checked by cpu's equality alone
    ref::write_kv(k.data(), v.data(), ref_slots.data(), 5, kv_dim, dtype, scales, k_ref.data(), v_ref.data());
    std::fill(k_ref.begin(), k_ref.begin() + kv_dim * static_cast<int64_t>(dtype_size_bytes(dtype)), 0x11);
    std::fill(v_ref.begin(), v_ref.begin() + kv_dim * static_cast<int64_t>(dtype_size_bytes(dtype)), 0x11);
    cpu::write_kv(k.data(), v.data(), slots.data(), 5, kv_dim, dtype, scales, k_cpu.data(), v_cpu.data());
    EXPECT_EQ(k_cpu, k_ref) << dtype_name(dtype);
    EXPECT_EQ(v_cpu, v_ref) << dtype_name(dtype);
    for (size_t t : {0u, 2u, 3u, 4u}) {
      const auto slot = static_cast<size_t>(slots[t]);
      for (size_t c = 0; c < static_cast<size_t>(kv_dim); ++c) {
        const float kx = k[t * kv_dim + c];
        const float vx = v[t * kv_dim + c];
        if (dtype == DType::kBF16) {
          uint16_t k_bits = 0, v_bits = 0;
          std::memcpy(&k_bits, k_cpu.data() + (slot * kv_dim + c) * 2, 2);
          std::memcpy(&v_bits, v_cpu.data() + (slot * kv_dim + c) * 2, 2);
          ASSERT_EQ(k_bits, f32_to_bf16(kx));
          ASSERT_EQ(v_bits, f32_to_bf16(vx));
        } else {
          ASSERT_EQ(k_cpu[slot * kv_dim + c], f32_to_f8e4m3(kx / k_scales[c])) << "k " << kx;
          ASSERT_EQ(v_cpu[slot * kv_dim + c], f32_to_f8e4m3(vx / v_scales[c])) << "v " << vx;
        }
      }
    }
  }
  // Saturation: |value / scale| > 448 is coded as 448 with the value's sign, K and V alike.
  std::vector<uint8_t> k_sat(static_cast<size_t>(kv_dim)), v_sat(static_cast<size_t>(kv_dim));
  const int32_t slot = 0;
  const std::vector<float> huge(static_cast<size_t>(kv_dim), -1.0e6f);
  cpu::write_kv(huge.data(), huge.data(), &slot, 1, kv_dim, DType::kF8E4M3, {k_scales.data(), v_scales.data()},
                k_sat.data(), v_sat.data());
  for (int64_t c = 0; c < kv_dim; ++c) {
    EXPECT_EQ(f8e4m3_to_f32(k_sat[static_cast<size_t>(c)]), -448.0f) << c;
    EXPECT_EQ(f8e4m3_to_f32(v_sat[static_cast<size_t>(c)]), -448.0f) << c;
  }
}

// A bf16 or fp8 cache reads back as its decoded values: the reference over the coded cache equals
// the reference over those values written as float32, and every cpu implementation matches it
// (prefill, chunks, decode steps; with and without scales; windows and sinks).
TEST(PagedAttention, CodedCachesReadAsTheirValues) {
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    for (bool with_scales : {false, true}) {
      if (with_scales && dtype != DType::kF8E4M3) continue;
      for (int32_t window : {0, 5}) {
        Scenario sc = make_scenario(8, 2, 64, 16, window, kSeqLen, kNumNew, 17 + static_cast<uint32_t>(window));
        const std::vector<float> sinks =
            testing::random_floats(static_cast<size_t>(sc.params.num_heads), 43, -2.0f, 2.0f);
        if (window != 0) sc.params.sinks = sinks.data();
        const CodedCaches coded = code_caches(sc, dtype, with_scales);
        // The coded values as float32: core/dtype's decoding times the column's scale.
        Scenario decoded = sc;
        const auto width = static_cast<size_t>(sc.kv_dim());
        for (size_t i = 0; i < decoded.k_cache.size(); ++i) {
          const size_t c = i % width;
          if (dtype == DType::kBF16) {
            uint16_t k_bits = 0, v_bits = 0;
            std::memcpy(&k_bits, coded.k.data() + 2 * i, 2);
            std::memcpy(&v_bits, coded.v.data() + 2 * i, 2);
            decoded.k_cache[i] = bf16_to_f32(k_bits);
            decoded.v_cache[i] = bf16_to_f32(v_bits);
          } else {
            decoded.k_cache[i] = f8e4m3_to_f32(coded.k[i]) * (with_scales ? coded.k_scales[c] : 1.0f);
            decoded.v_cache[i] = f8e4m3_to_f32(coded.v[i]) * (with_scales ? coded.v_scales[c] : 1.0f);
          }
        }
        const std::vector<float> expected = run_ref(decoded);
        AttentionParams params = sc.params;
        params.cache_dtype = dtype;
        params.cache_scales = coded.scales();
        std::vector<float> ref_coded(sc.q.size());
        ref::paged_attention(sc.q.data(), coded.k.data(), coded.v.data(), sc.batch(), params, ref_coded.data());
        const std::string label =
            std::string(dtype_name(dtype)) + (with_scales ? " scaled" : "") + " window " + std::to_string(window);
        EXPECT_EQ(ref_coded, expected) << label;
        for (cpu::Isa isa : attention_isas()) {
          std::vector<float> actual(sc.q.size());
          cpu::paged_attention_with(isa, sc.q.data(), coded.k.data(), coded.v.data(), sc.batch(), params,
                                    actual.data());
          testing::expect_within(actual, expected, attention_tolerance(sc),
                                 std::string(cpu::isa_name(isa)) + " " + label);
        }
        // A decode step alone gives the bits it gets inside the batch.
        std::vector<float> batched(sc.q.size());
        cpu::paged_attention(sc.q.data(), coded.k.data(), coded.v.data(), sc.batch(), params, batched.data());
        const int64_t token_floats = static_cast<int64_t>(sc.params.num_heads) * sc.params.head_dim;
        const int32_t query_start[2] = {0, 1};
        const PagedBatch alone{
            1, query_start, &sc.seq_len[1], sc.block_table.data() + sc.max_blocks, sc.max_blocks, sc.block_size};
        std::vector<float> out(static_cast<size_t>(token_floats));
        cpu::paged_attention(sc.q.data() + sc.query_start[1] * token_floats, coded.k.data(), coded.v.data(), alone,
                             params, out.data());
        EXPECT_EQ(
            0, std::memcmp(out.data(), batched.data() + sc.query_start[1] * token_floats, out.size() * sizeof(float)))
            << label;
      }
    }
  }
}

// MLA's form: one cache whose rows are keys and values (one scale vector for both), read once per
// block by the cpu kernel, equals the reference over two separate copies; with the same cache
// but other value scales the two are read apart.
TEST(PagedAttention, KeysThatAreTheirValuesReadOnce) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    Scenario sc = make_scenario(8, 1, 64, 16, 0, kSeqLen, kNumNew, 71);
    sc.v_cache = sc.k_cache;
    const CodedCaches coded = code_caches(sc, dtype, dtype == DType::kF8E4M3);
    const std::vector<uint8_t> values_copy = coded.k;
    for (const bool same_scales : {true, false}) {
      if (!same_scales && dtype != DType::kF8E4M3) continue;
      AttentionParams params = sc.params;
      params.cache_dtype = dtype;
      params.cache_scales = coded.scales();
      if (same_scales) params.cache_scales.v = params.cache_scales.k;
      std::vector<float> expected(sc.q.size()), actual(sc.q.size());
      ref::paged_attention(sc.q.data(), coded.k.data(), values_copy.data(), sc.batch(), params, expected.data());
      cpu::paged_attention(sc.q.data(), coded.k.data(), coded.k.data(), sc.batch(), params, actual.data());
      testing::expect_within(actual, expected, attention_tolerance(sc),
                             std::string(dtype_name(dtype)) + (same_scales ? " one scale" : " two scales"));
    }
  }
}

// A needle in a long context: one of 32768 cached keys points along q (a score ~20-30 against the
// others' ~N(0, 0.3)), so attention returns its value; an fp8 cache's coding noise over the other
// keys must not drown it. Needles at the start, middle and end, cpu and ref, every cache type.
TEST(PagedAttention, CodedCachesFindANeedleIn32kKeys) {
  constexpr int32_t kKeys = 32768;
  constexpr int32_t kHeadDim = 128;
  constexpr int32_t kBlock = 128;
  AttentionParams params{4, 1, kHeadDim, 1.0f / std::sqrt(static_cast<float>(kHeadDim)), 0};
  const std::vector<float> q = testing::random_floats(4 * kHeadDim, 61);
  std::vector<int32_t> block_table(kKeys / kBlock);
  std::iota(block_table.begin(), block_table.end(), 0);
  std::vector<int32_t> slots(kKeys);
  std::iota(slots.begin(), slots.end(), 0);
  const int32_t query_start[2] = {0, 1};
  const PagedBatch batch{1, query_start, &kKeys, block_table.data(), kKeys / kBlock, kBlock};
  for (int32_t needle : {3, kKeys / 2 + 77, kKeys - 2}) {
    std::vector<float> k = testing::random_floats(static_cast<size_t>(kKeys) * kHeadDim, 62);
    std::vector<float> v = testing::random_floats(static_cast<size_t>(kKeys) * kHeadDim, 63, -0.5f, 0.5f);
    // Every query head sees the needle: its key is 32 x the heads' mean q, its value all ones.
    for (int32_t d = 0; d < kHeadDim; ++d) {
      float mean_q = 0.0f;
      for (int32_t h = 0; h < 4; ++h) mean_q += q[static_cast<size_t>(h * kHeadDim + d)] / 4.0f;
      k[static_cast<size_t>(needle) * kHeadDim + static_cast<size_t>(d)] = 32.0f * mean_q;
      v[static_cast<size_t>(needle) * kHeadDim + static_cast<size_t>(d)] = 1.0f;
    }
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
      std::vector<uint8_t> k_cache(k.size() * dtype_size_bytes(dtype)), v_cache(k_cache.size());
      cpu::write_kv(k.data(), v.data(), slots.data(), kKeys, kHeadDim, dtype, {}, k_cache.data(), v_cache.data());
      params.cache_dtype = dtype;
      std::vector<float> out(q.size()), ref_out(q.size());
      cpu::paged_attention(q.data(), k_cache.data(), v_cache.data(), batch, params, out.data());
      ref::paged_attention(q.data(), k_cache.data(), v_cache.data(), batch, params, ref_out.data());
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], 1.0f, 0.05f) << dtype_name(dtype) << " needle " << needle << " element " << i;
        ASSERT_NEAR(ref_out[i], out[i], 1e-4f) << dtype_name(dtype) << " needle " << needle << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::kernels
