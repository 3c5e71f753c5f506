// CUDA graphs for decode (model/decode_graphs.h): a replayed step gives the bits an eager step of
// the same padded shape gives, as the caches grow between replays; in batch-invariant mode the
// bits of the unpadded eager step; padding rows never write another sequence's KV; decode steps
// whose MoE layers take the grouped GEMMs run eagerly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "cuda_test_util.h"
#include "fixtures.h"
#include "model/decode_graphs.h"
#include "model/model.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kBlockSize = 4;
constexpr int32_t kBlocksPerSeq = 12;  // tables padded to 16 in the graphs

// Sequence i owns blocks 1 + i * kBlocksPerSeq onwards; block 0 belongs to no one (dummy rows read it).
struct Seq {
  std::vector<int32_t> tokens;
  int32_t num_cached = 0;
  int32_t first_block = 0;
};

std::vector<Seq> make_seqs(const CausalLM& model, int32_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> length(2, 20);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.config().vocab_size) - 1);
  std::vector<Seq> seqs(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    Seq& s = seqs[static_cast<size_t>(i)];
    s.first_block = 1 + i * kBlocksPerSeq;
    s.tokens.resize(static_cast<size_t>(length(rng)));
    for (int32_t& t : s.tokens) t = token(rng);
  }
  return seqs;
}

// The step of seqs' uncached tokens; pad_to > seqs.size() appends the dummy rows a graph of that
// many sequences adds (what DecodeGraphs does), and width the table width.
ForwardBatch make_batch(const std::vector<Seq>& seqs, size_t pad_to, int32_t width) {
  ForwardBatch batch;
  batch.max_blocks_per_seq = width;
  batch.query_start.push_back(0);
  for (const Seq& s : seqs) {
    for (auto t = s.num_cached; t < static_cast<int32_t>(s.tokens.size()); ++t) {
      batch.token_ids.push_back(s.tokens[static_cast<size_t>(t)]);
      batch.positions.push_back(t);
      batch.slot_mapping.push_back((s.first_block + t / kBlockSize) * kBlockSize + t % kBlockSize);
    }
    batch.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
    batch.seq_len.push_back(static_cast<int32_t>(s.tokens.size()));
    for (int32_t b = 0; b < width; ++b) batch.block_table.push_back(b < kBlocksPerSeq ? s.first_block + b : 0);
    batch.logit_rows.push_back(batch.query_start.back() - 1);
  }
  for (size_t d = seqs.size(); d < pad_to; ++d) {
    batch.token_ids.push_back(0);
    batch.positions.push_back(0);
    batch.slot_mapping.push_back(-1);
    batch.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
    batch.seq_len.push_back(1);
    batch.block_table.insert(batch.block_table.end(), static_cast<size_t>(width), 0);
    batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
  }
  return batch;
}

void advance(std::vector<Seq>& seqs, const std::vector<float>& logits, int64_t vocab) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    const float* row = logits.data() + i * static_cast<size_t>(vocab);
    seqs[i].num_cached = static_cast<int32_t>(seqs[i].tokens.size());
    seqs[i].tokens.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
  }
}

// Prefills num_seqs sequences eagerly on both models, then decodes `steps` steps: graphed runs the
// real batch (graphs), eager the batch padded as the graph pads it (or unpadded when pad is false).
// Every step's logits must match bit for bit.
void expect_replays_match_eager(const std::string& name, bool batch_invariant, bool pad, int32_t num_seqs) {
  CudaModel graphed = load_on_cuda(fixture_dir(name), batch_invariant, /*graphs=*/true);
  CudaModel eager = load_on_cuda(fixture_dir(name), batch_invariant, /*graphs=*/false);
  const int32_t num_blocks = 1 + num_seqs * kBlocksPerSeq;
  graphed.model->allocate_kv_cache(KvCacheShape{num_blocks, kBlockSize});
  eager.model->allocate_kv_cache(KvCacheShape{num_blocks, kBlockSize});
  const int64_t vocab = graphed.model->config().vocab_size;
  std::vector<Seq> seqs = make_seqs(*graphed.model, num_seqs, 5 + static_cast<uint32_t>(num_seqs));
  constexpr int32_t kSteps = 6;
  const int64_t replays_before = graphed.model->num_graph_replays();
  for (int32_t step = 0; step <= kSteps; ++step) {
    const ForwardBatch real = make_batch(seqs, seqs.size(), kBlocksPerSeq);
    std::vector<float> got(real.logit_rows.size() * static_cast<size_t>(vocab));
    graphed.model->forward(real, got.data());
    // Step 0 is the prefill (eager on both); decode steps pad as DecodeGraphs would.
    const bool decode = step > 0;
    const PaddedShape shape = DecodeGraphs::shape_for(real);
    const ForwardBatch reference =
        decode && pad ? make_batch(seqs, static_cast<size_t>(shape.num_seqs), shape.width) : real;
    std::vector<float> want(reference.logit_rows.size() * static_cast<size_t>(vocab));
    eager.model->forward(reference, want.data());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << name << ": " << num_seqs << " sequences, step " << step << " differs from the eager step";
    advance(seqs, got, vocab);
  }
  // Decode step 1 of the bucket captures; the rest replay.
  EXPECT_EQ(graphed.model->num_graph_replays() - replays_before, kSteps - 1) << name;
  EXPECT_EQ(eager.model->num_graph_replays(), 0) << name;
}

// deepseek_v2's shared experts run on the side stream: a fork and a join in every MoE layer's graph.
TEST(CudaGraphs, ReplayEqualsEagerStepOfThePaddedShape) {
  for (const std::string name : {"llama", "qwen3", "gemma3", "deepseek_v2"}) {
    for (int32_t num_seqs : {1, 3, 8}) expect_replays_match_eager(name, /*batch_invariant=*/false, /*pad=*/true, num_seqs);
  }
}

// In batch-invariant mode a row's bits depend on nothing else in its batch, so a replay equals
// the plain eager step of the real batch.
TEST(CudaGraphs, InvariantReplayEqualsUnpaddedEagerStep) {
  for (const std::string name : {"llama", "qwen3"}) {
    for (int32_t num_seqs : {2, 5}) expect_replays_match_eager(name, /*batch_invariant=*/true, /*pad=*/false, num_seqs);
  }
}

// Replaying the same step twice rewrites the same KV and gives the same logits as the eager run
// that preceded its capture.
TEST(CudaGraphs, RepeatedStepIsDeterministic) {
  CudaModel loaded = load_on_cuda(fixture_dir("llama"), false, true);
  CausalLM& model = *loaded.model;
  model.allocate_kv_cache(KvCacheShape{1 + 3 * kBlocksPerSeq, kBlockSize});
  const int64_t vocab = model.config().vocab_size;
  std::vector<Seq> seqs = make_seqs(model, 3, 17);
  std::vector<float> prefill(3 * static_cast<size_t>(vocab));
  model.forward(make_batch(seqs, 3, kBlocksPerSeq), prefill.data());
  advance(seqs, prefill, vocab);
  const ForwardBatch step = make_batch(seqs, 3, kBlocksPerSeq);
  std::vector<float> first(3 * static_cast<size_t>(vocab));
  model.forward(step, first.data());  // eager, then captured
  for (int i = 0; i < 3; ++i) {
    std::vector<float> again(first.size());
    model.forward(step, again.data());  // replayed
    EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0) << "replay " << i;
  }
  EXPECT_EQ(model.num_graph_replays(), 3);
}

// A batch of 3 runs in the graph of 4: the dummy row writes no cache slot, so every block the
// three sequences do not own keeps its bits (block 0, which dummy rows read, included).
TEST(CudaGraphs, PaddingRowsLeaveOtherKvUntouched) {
  CudaModel loaded = load_on_cuda(fixture_dir("qwen3"), false, true);
  CausalLM& model = *loaded.model;
  constexpr int32_t kSpareBlocks = 5;
  const int32_t num_blocks = 1 + 3 * kBlocksPerSeq + kSpareBlocks;
  model.allocate_kv_cache(KvCacheShape{num_blocks, kBlockSize});
  std::vector<int32_t> all_blocks(static_cast<size_t>(num_blocks));
  for (int32_t b = 0; b < num_blocks; ++b) all_blocks[static_cast<size_t>(b)] = b;
  const auto floats_per_block = static_cast<size_t>(model.kv_floats_per_block());
  std::mt19937 rng(3);
  const std::vector<float> before = random_floats(rng, floats_per_block * all_blocks.size());
  model.write_kv_blocks(all_blocks, before.data());

  const int64_t vocab = model.config().vocab_size;
  std::vector<Seq> seqs = make_seqs(model, 3, 23);
  for (int32_t step = 0; step < 5; ++step) {
    const ForwardBatch batch = make_batch(seqs, 3, kBlocksPerSeq);
    std::vector<float> logits(3 * static_cast<size_t>(vocab));
    model.forward(batch, logits.data());
    advance(seqs, logits, vocab);
  }
  EXPECT_GE(model.num_graph_replays(), 3);
  std::vector<float> after(before.size());
  model.read_kv_blocks(all_blocks, after.data());
  const auto unchanged = [&](int32_t block) {
    const size_t offset = static_cast<size_t>(block) * floats_per_block;
    return std::memcmp(before.data() + offset, after.data() + offset, floats_per_block * sizeof(float)) == 0;
  };
  EXPECT_TRUE(unchanged(0)) << "block 0 (read by the dummy row) was written";
  for (int32_t b = 1 + 3 * kBlocksPerSeq; b < num_blocks; ++b) EXPECT_TRUE(unchanged(b)) << "spare block " << b;
  // Each sequence's blocks past its last token stay as they were too.
  for (const Seq& s : seqs) {
    const int32_t used = (static_cast<int32_t>(s.tokens.size()) - 1 + kBlockSize - 1) / kBlockSize;
    for (int32_t b = s.first_block + used; b < s.first_block + kBlocksPerSeq; ++b) {
      EXPECT_TRUE(unchanged(b)) << "unused block " << b;
    }
  }
}

// A one-layer bf16 Qwen3-MoE checkpoint of 8 experts, top-2, in widths the grouped GEMMs take
// (hidden 64, experts 64 wide), random weights; returns dir.
std::string write_few_expert_moe(const std::string& dir) {
  constexpr int64_t kHidden = 64, kExpertWidth = 64, kExperts = 8, kHeads = 2, kHeadDim = 32, kVocab = 128;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 64, "num_experts": 8,
    "num_experts_per_tok": 2, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
    "vocab_size": 128, "rms_norm_eps": 1e-6, "hidden_act": "silu", "max_position_embeddings": 256,
    "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
  std::mt19937 rng(11);
  CheckpointTensors checkpoint;
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean, float spread) {
    checkpoint.add_bf16(rng, name, std::move(shape), mean, spread);
  };
  const auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    add(name, {rows, cols}, 0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  };
  const std::string p = "model.layers.0.";
  add("model.embed_tokens.weight", {kVocab, kHidden}, 0.0f, 1.0f);
  add(p + "input_layernorm.weight", {kHidden}, 1.0f, 0.1f);
  add(p + "post_attention_layernorm.weight", {kHidden}, 1.0f, 0.1f);
  matrix(p + "self_attn.q_proj.weight", kHeads * kHeadDim, kHidden);
  matrix(p + "self_attn.k_proj.weight", kHeadDim, kHidden);
  matrix(p + "self_attn.v_proj.weight", kHeadDim, kHidden);
  matrix(p + "self_attn.o_proj.weight", kHidden, kHeads * kHeadDim);
  add(p + "self_attn.q_norm.weight", {kHeadDim}, 1.0f, 0.1f);
  add(p + "self_attn.k_norm.weight", {kHeadDim}, 1.0f, 0.1f);
  add(p + "mlp.gate.weight", {kExperts, kHidden}, 0.0f, 0.25f);
  for (int64_t e = 0; e < kExperts; ++e) {
    const std::string expert = p + "mlp.experts." + std::to_string(e) + ".";
    matrix(expert + "gate_proj.weight", kExpertWidth, kHidden);
    matrix(expert + "up_proj.weight", kExpertWidth, kHidden);
    matrix(expert + "down_proj.weight", kHidden, kExpertWidth);
  }
  add("model.norm.weight", {kHidden}, 1.0f, 0.1f);
  matrix("lm_head.weight", kVocab, kHidden);
  checkpoint.write(dir);
  return dir;
}

// A decode step whose MoE layer takes the grouped GEMMs (256 sequences, top-2 of 8 experts: 64
// rows an expert) reads the grouping back to the host, which a graph cannot hold: it runs eagerly,
// with the bits of the same model without graphs, while 8 sequences replay their graph.
TEST(CudaGraphs, DecodeStepsOnGroupedExpertGemmsRunEagerly) {
  const std::string dir = write_few_expert_moe(
      (std::filesystem::temp_directory_path() / ("deepinfer_graphs_moe_" + std::to_string(::getpid()))).string());
  CudaModel graphed = load_on_cuda(dir, false, /*graphs=*/true);
  CudaModel eager = load_on_cuda(dir, false, /*graphs=*/false);
  std::filesystem::remove_all(dir);
  constexpr int32_t kMostSeqs = 256;
  graphed.model->allocate_kv_cache(KvCacheShape{1 + kMostSeqs * kBlocksPerSeq, kBlockSize});
  eager.model->allocate_kv_cache(KvCacheShape{1 + kMostSeqs * kBlocksPerSeq, kBlockSize});
  const int64_t vocab = graphed.model->config().vocab_size;
  constexpr int32_t kSteps = 4;
  for (const int32_t num_seqs : {8, kMostSeqs}) {
    std::vector<Seq> seqs = make_seqs(*graphed.model, num_seqs, 31);
    const int64_t replays_before = graphed.model->num_graph_replays();
    for (int32_t step = 0; step <= kSteps; ++step) {
      const ForwardBatch batch = make_batch(seqs, seqs.size(), kBlocksPerSeq);
      std::vector<float> got(batch.logit_rows.size() * static_cast<size_t>(vocab));
      graphed.model->forward(batch, got.data());
      if (num_seqs == kMostSeqs) {
        std::vector<float> want(got.size());
        eager.model->forward(batch, want.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << num_seqs << " sequences, step " << step << " differs from the model without graphs";
      }
      advance(seqs, got, vocab);
    }
    const int64_t replays = graphed.model->num_graph_replays() - replays_before;
    EXPECT_EQ(replays, num_seqs == kMostSeqs ? 0 : kSteps - 1) << num_seqs << " sequences";
  }
}

}  // namespace
}  // namespace deepinfer::testing
