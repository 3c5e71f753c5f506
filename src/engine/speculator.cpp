// Speculator: draft, plan, profile.
#include "engine/speculator.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/clock.h"
#include "core/logging.h"
#include "model/decode_graphs.h"

namespace deepinfer {
namespace {

// The rows of one forward_draft call as a ForwardBatch, built sequence by sequence. Split
// (CausalLM::rows_may_share_sequences): each row is a one-token sequence and every row's draft is
// taken, so the call is decode-shaped.
struct DraftBatch {
  explicit DraftBatch(bool split_rows) : split(split_rows) {}
  bool split;
  ForwardBatch batch;
  std::vector<int32_t> hidden_rows;
  std::vector<Request*> drafting;     // the sequences that draft, in order
  std::vector<int32_t> output_of;     // per drafting sequence: its draft's index in the outputs
  std::vector<int32_t> token_row_of;  // and its last token row (its module output's row)
  std::vector<int32_t> widths;        // each sequence's table width, to pad at the end

  // Rows for positions [first, end) of r with the tokens after them, row p reading hidden row
  // hidden_first + (p - first); drafts: r's draft is the last row's.
  void add(Request& r, const std::vector<int32_t>& table, int32_t block_size, int32_t first, int32_t end,
           int32_t hidden_first, const std::vector<int32_t>& tokens, bool drafts) {
    if (batch.query_start.empty()) batch.query_start.push_back(0);
    for (int32_t p = first; p < end; ++p) {
      batch.token_ids.push_back(tokens[static_cast<size_t>(p - first)]);
      batch.positions.push_back(p);
      batch.slot_mapping.push_back(table[static_cast<size_t>(p / block_size)] * block_size + p % block_size);
      hidden_rows.push_back(hidden_first + (p - first));
      if (split) {
        batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
        end_sequence(table, p + 1);
      }
    }
    if (!split) end_sequence(table, end);
    if (split && end - first > 1) batch.rows_share_sequences = true;
    if (!drafts) return;
    drafting.push_back(&r);
    token_row_of.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
    if (!split) batch.logit_rows.push_back(token_row_of.back());
    output_of.push_back(split ? token_row_of.back() : static_cast<int32_t>(batch.logit_rows.size()) - 1);
  }
  void end_sequence(const std::vector<int32_t>& table, int32_t seq_len) {
    batch.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
    batch.seq_len.push_back(seq_len);
    const auto width = static_cast<int32_t>(table.size());
    batch.max_blocks_per_seq = std::max(batch.max_blocks_per_seq, width);
    batch.block_table.insert(batch.block_table.end(), table.begin(), table.end());
    widths.push_back(width);
  }
  // Pads every table row to the widest.
  void finish() {
    const int32_t width = batch.max_blocks_per_seq;
    std::vector<int32_t> padded;
    padded.reserve(widths.size() * static_cast<size_t>(width));
    size_t at = 0;
    for (int32_t w : widths) {
      for (int32_t b = 0; b < width; ++b) padded.push_back(b < w ? std::max(batch.block_table[at + b], 0) : 0);
      at += static_cast<size_t>(w);
    }
    batch.block_table = std::move(padded);
  }
};

// R rows in sequences of q tokens, each sequence's rows the last q of a context of `context`
// tokens over blocks 0, 1, ... (shared by every sequence: at start-up no block holds anything):
// a profile step's shape, every row a logit row (a verify step draws at every row). The context
// puts attention's share of a step in the curve (a chat's decode reads a few hundred keys).
ForwardBatch profile_batch(int64_t rows, int32_t q, int32_t context, int32_t block_size) {
  ForwardBatch batch;
  batch.query_start.push_back(0);
  const int32_t num_blocks = (context + block_size - 1) / block_size;
  batch.max_blocks_per_seq = num_blocks;
  for (int64_t done = 0; done < rows;) {
    const auto n = static_cast<int32_t>(std::min<int64_t>(q, rows - done));
    for (int32_t p = context - n; p < context; ++p) {
      batch.token_ids.push_back(1);
      batch.positions.push_back(p);
      batch.slot_mapping.push_back(p);  // block b is block id b
      batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
    }
    done += n;
    batch.query_start.push_back(static_cast<int32_t>(done));
    batch.seq_len.push_back(context);
    for (int32_t b = 0; b < num_blocks; ++b) batch.block_table.push_back(b);
  }
  return batch;
}

std::vector<int64_t> profile_points(int64_t max_rows) {
  std::vector<int64_t> points;
  for (int64_t r = 1; r < max_rows; r *= 2) points.push_back(r);
  points.push_back(max_rows);
  return points;
}

// The median of three timed runs after a warm-up.
template <typename Run>
double median_seconds(const Run& run) {
  run();
  std::vector<double> times;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(seconds_since(start));
  }
  std::sort(times.begin(), times.end());
  return times[1];
}

struct Curves {
  std::vector<StepTimePoint> decode, verify, draft;
  MeasuredStepTimes measured;  // by the last engine on these curves
};

// Profiles are kept per model shape, backend and engine limits for the process's life.
std::mutex& curves_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, Curves>& curves_cache() {
  static std::map<std::string, Curves> cache;
  return cache;
}

}  // namespace

void RecentMedian::add(double value) { values_[static_cast<size_t>(count_++) % values_.size()] = value; }

double RecentMedian::median() const {
  std::vector<double> last(values_.begin(), values_.begin() + std::min<int64_t>(count_, std::ssize(values_)));
  std::sort(last.begin(), last.end());
  return last[last.size() / 2];
}

void MeasuredTimes::skip_next_first_times() {
  for (auto& [bucket, b] : buckets_) b.seen = 0;
}

void MeasuredStepTimes::skip_next_first_times() {
  for (MeasuredTimes* times : {&decode, &verify, &draft, &pipelined}) times->skip_next_first_times();
}

bool MeasuredTimes::empty() const {
  return std::none_of(buckets_.begin(), buckets_.end(), [](const auto& b) { return b.second.seconds.count() > 0; });
}

void MeasuredTimes::observe(int64_t rows, double seconds) {
  const auto bucket = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(rows, 1))));
  Bucket& b = buckets_[bucket];
  if (++b.seen > 1) b.seconds.add(seconds);
}

std::vector<StepTimePoint> MeasuredTimes::correct(const std::vector<StepTimePoint>& profile) const {
  if (profile.empty()) return profile;
  double ratio = 0.0;
  int64_t measured = 0;
  for (const auto& [bucket, b] : buckets_) {
    if (b.seconds.count() == 0) continue;
    ratio += b.seconds.median() / step_seconds(profile, bucket);
    ++measured;
  }
  if (measured == 0) return profile;
  ratio /= static_cast<double>(measured);
  std::vector<StepTimePoint> corrected = profile;
  for (StepTimePoint& point : corrected) {
    const auto bucket = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(point.rows)));
    const auto found = buckets_.find(bucket);
    point.seconds = found != buckets_.end() && found->second.seconds.count() > 0 ? found->second.seconds.median()
                                                                                 : point.seconds * ratio;
  }
  return corrected;
}

Speculator::Speculator(CausalLM& model, KvCacheManager& kv, const SpeculativeConfig& config, int32_t max_num_seqs,
                       int32_t max_num_batched_tokens, int64_t max_model_len, bool pipelined)
    : model_(model),
      kv_(kv),
      config_(config),
      rows_split_(model.rows_may_share_sequences()),
      pipelined_(pipelined),
      max_model_len_(max_model_len) {
  DI_CHECK(config.num_tokens > 0 && (model.num_draft_modules() > 0 || config.draft_source));
  const auto k = static_cast<size_t>(config.num_tokens);
  stats_.proposed_per_position.assign(k, 0);
  stats_.accepted_per_position.assign(k, 0);
  stats_.accepted_length.assign(k + 1, 0);
  if (config_.varlen &&
      (config_.decode_curve.empty() || config_.verify_curve.empty() || config_.draft_curve.empty())) {
    profile(max_num_seqs, max_num_batched_tokens);
  }
}

Speculator::~Speculator() {
  if (profile_key_.empty()) return;
  std::lock_guard<std::mutex> lock(curves_mutex());
  curves_cache()[profile_key_].measured = measured_;
}

void Speculator::profile(int32_t max_num_seqs, int32_t max_num_batched_tokens) {
  const int32_t block_size = kv_.block_size();
  // A verify step's rows per sequence: 1 + K, or one-token sequences when the model splits them.
  const int32_t chain = std::min(config_.num_tokens + 1, block_size);
  const bool split = model_.rows_may_share_sequences();
  const int32_t q = split ? 1 : chain;
  const bool graphable = split && model_.backend().can_capture();
  const auto context = static_cast<int32_t>(
      std::min<int64_t>({kProfileContext, int64_t{kv_.num_blocks()} * block_size, max_model_len_}));
  const std::string key = std::to_string(context) + "|" + model_.config().raw.dump() + "|" + std::string(model_.backend().name()) +
                          (config_.draft_source ? "|replayed" : "") + "|" +
                          std::to_string(config_.num_tokens) + "|" + std::to_string(max_num_seqs) + "|" +
                          std::to_string(max_num_batched_tokens) + "|" + std::to_string(block_size);
  if (config_.decode_curve.empty() && config_.verify_curve.empty() && config_.draft_curve.empty()) profile_key_ = key;
  std::lock_guard<std::mutex> lock(curves_mutex());
  auto cached = curves_cache().find(key);
  if (cached == curves_cache().end()) {
    const auto start = std::chrono::steady_clock::now();
    Curves curves;
    // Every block is free at start-up: the profile's KV writes land where nothing is kept.
    const auto time_main = [&](int64_t rows, int32_t per_seq) {
      const ForwardBatch batch = profile_batch(rows, per_seq, std::max(context, per_seq), block_size);
      std::vector<kernels::SampleParams> draws(batch.logit_rows.size());
      for (size_t i = 0; i < draws.size(); ++i) {
        draws[i].row = static_cast<int32_t>(i);
        draws[i].temperature = 0.0;
      }
      std::vector<int32_t> tokens(draws.size());
      return median_seconds([&] { model_.forward_sampled(batch, draws, tokens.data(), {}, nullptr); });
    };
    for (int64_t rows : profile_points(max_num_seqs)) curves.decode.push_back({rows, time_main(rows, 1)});
    const int64_t max_verify = std::min<int64_t>(int64_t{max_num_seqs} * chain, max_num_batched_tokens);
    for (int64_t rows : profile_points(max_verify)) {
      curves.verify.push_back({rows, time_main(rows, q)});
      if (config_.draft_source) {  // drafts cost nothing
        curves.draft.push_back({rows, 0.0});
        continue;
      }
      // The draft module over the same rows, reading the hidden states that step left.
      ForwardBatch batch = profile_batch(rows, q, std::max(context, q), block_size);
      std::vector<int32_t> hidden_rows(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) hidden_rows[static_cast<size_t>(r)] = static_cast<int32_t>(r);
      if (!graphable || rows > DecodeGraphs::kMaxBatch) {  // the sequences' last rows; else every row's
        batch.logit_rows.clear();
        for (size_t s = 1; s < batch.query_start.size(); ++s) batch.logit_rows.push_back(batch.query_start[s] - 1);
      }
      std::vector<int32_t> tokens(batch.logit_rows.size());
      std::vector<float> confidence(batch.logit_rows.size());
      const double seconds = median_seconds([&] {
        model_.forward_draft(batch, hidden_rows, CausalLM::DraftInput::kMainHidden,
                             {nullptr, tokens.data(), confidence.data()});
      });
      curves.draft.push_back({rows, seconds});
    }
    DI_LOG(kInfo, "speculative decoding: profiled the decode, verify and draft step times at "
                      << curves.verify.size() << " sizes in " << seconds_since(start) << " s");
    cached = curves_cache().emplace(key, std::move(curves)).first;
  }
  if (!profile_key_.empty()) {
    measured_ = cached->second.measured;
    measured_.skip_next_first_times();  // a new KV cache drops the old graphs
  }
  if (config_.decode_curve.empty()) config_.decode_curve = cached->second.decode;
  if (config_.verify_curve.empty()) config_.verify_curve = cached->second.verify;
  if (config_.draft_curve.empty()) config_.draft_curve = cached->second.draft;
}

void Speculator::plan(const std::vector<Request*>& running) {
  std::vector<Request*> decoding;
  std::vector<std::vector<float>> confidences;
  for (Request* r : running) {
    r->num_verify_drafts = 0;
    if (r->num_computed_tokens != r->num_tokens() - 1 || r->awaiting_grammar || r->sits_out_step_ahead) continue;
    decoding.push_back(r);
    confidences.push_back(r->draft_confidences);
  }
  if (decoding.empty()) return;
  std::vector<int32_t> counts;
  if (config_.varlen) {
    const int64_t rows = choose_verify_rows(confidences, verify_times().correct(config_.verify_curve));
    counts = allocate_drafts(confidences, rows - static_cast<int64_t>(decoding.size()));
  }
  for (size_t i = 0; i < decoding.size(); ++i) {
    decoding[i]->num_verify_drafts =
        config_.varlen ? counts[i] : static_cast<int32_t>(decoding[i]->drafts.size());
  }
}

int32_t Speculator::paying_depth(int64_t sequences) const {
  // Until enough first drafts were verified to measure acceptance, draft at full depth.
  if (proposed_at(0) < kExploreVerifications) return config_.num_tokens;
  const auto s = static_cast<double>(sequences);
  // Plain steps as the loop runs them (plain_step_times); drafting steps are synchronous.
  const std::vector<StepTimePoint> decode = plain_step_times().correct(config_.decode_curve);
  const std::vector<StepTimePoint> verify = verify_times().correct(config_.verify_curve);
  const std::vector<StepTimePoint> draft = measured_.draft.correct(config_.draft_curve);
  double best_rate = s / step_seconds(decode, sequences);
  int32_t best_depth = 0;
  double expected = 1.0;  // tokens per sequence with d drafts verified
  double cumulative = 1.0;
  for (int32_t d = 1; d <= config_.num_tokens; ++d) {
    const auto k = static_cast<size_t>(d - 1);
    cumulative *= acceptance_at(k);
    expected += cumulative;
    // The verify step, the catch-up over the kept rows and d - 1 chained calls.
    const double seconds = step_seconds(verify, sequences * (d + 1)) +
                           step_seconds(draft, static_cast<int64_t>(s * expected)) +
                           (d - 1) * step_seconds(draft, sequences);
    if (s * expected / seconds > best_rate) {
      best_rate = s * expected / seconds;
      best_depth = d;
    }
  }
  return best_depth;
}

SpeculativeStats Speculator::stats() const {
  SpeculativeStats stats = stats_;
  if (config_.varlen) {
    stats.decode_curve = plain_step_times().correct(config_.decode_curve);
    stats.verify_curve = verify_times().correct(config_.verify_curve);
    stats.draft_curve = measured_.draft.correct(config_.draft_curve);
  }
  return stats;
}

void Speculator::draft(const BuiltBatch& built, int64_t population, const std::function<int32_t(const Request&)>& max_drafts,
                       const std::function<int32_t(const Request&, std::span<const int32_t>)>& valid_prefix) {
  const auto start = std::chrono::steady_clock::now();
  struct AddTime {
    const std::chrono::steady_clock::time_point& start;
    double& total;
    double& pending;
    ~AddTime() {
      const double seconds = seconds_since(start);
      total += seconds;
      pending += seconds;
    }
  } add_time{start, stats_.draft_seconds, pending_draft_seconds_};
  const int32_t block_size = kv_.block_size();
  int64_t num_drafting = 0;
  for (const ScheduledRows& rows : built.rows) {
    Request& r = *rows.request;
    r.drafts.clear();
    r.draft_confidences.clear();
    if (r.status == RequestStatus::kRunning && r.num_computed_tokens == r.num_tokens() - 1 && max_drafts(r) > 0) {
      ++num_drafting;
    }
  }
  // With varlen: chains as deep as pays at the measured acceptance on the step-time curves, and
  // not at all when the throughput measured with drafting at this many sequences is below that
  // without.
  int32_t depth_limit = config_.num_tokens;
  if (config_.varlen && pipelined_run_ > 0 && run_steps_ > 0 && run_decode_only_) {
    const double seconds = seconds_since(run_start_);
    measured_.pipelined.observe(run_tokens_ / run_steps_, seconds / static_cast<double>(run_steps_));
    if (run_bucket_ != 0) arms_[run_bucket_][0].add(static_cast<double>(run_tokens_) / seconds);
  }
  // A new run starts only from a decision; without one (no sequence may draft) the next step is
  // synchronous and judged again.
  run_start_ = std::chrono::steady_clock::now();
  run_steps_ = 0;
  run_tokens_ = 0;
  run_decode_only_ = true;
  run_bucket_ = 0;
  pipelined_run_ = 0;
  drafting_paused_ = false;
  pending_bucket_ = 0;
  if (config_.varlen && num_drafting > 0) {
    const int64_t sequences = std::max(num_drafting, population);
    depth_limit = paying_depth(sequences);
    bool trying = false;
    if (depth_limit > 0 && !drafting_measured_better(sequences, trying)) depth_limit = 0;
    pending_drafted_ = depth_limit > 0;
    pending_draft_seconds_ = 0.0;
    drafting_paused_ = depth_limit == 0;
    run_limit_ = trying ? kTryRun : kPipelinedRun;
    run_bucket_ = drafting_paused_ ? pending_bucket_ : 0;
  }
  if (num_drafting == 0 || depth_limit == 0) {
    if (num_drafting > 0) ++stats_.skipped_draft_steps;
    return;
  }
  if (config_.draft_source) {
    for (const ScheduledRows& rows : built.rows) {
      Request& r = *rows.request;
      const int32_t room = std::min(max_drafts(r), depth_limit);
      if (r.status != RequestStatus::kRunning || r.num_computed_tokens != r.num_tokens() - 1 || room <= 0) continue;
      config_.draft_source(r, room, r.drafts, r.draft_confidences);
      r.drafts.resize(std::min(r.drafts.size(), static_cast<size_t>(room)));
      r.draft_confidences.resize(r.drafts.size(), 1.0f);
      const auto keep = static_cast<size_t>(valid_prefix(r, r.drafts));
      r.drafts.resize(std::min(keep, r.drafts.size()));
      r.draft_confidences.resize(r.drafts.size());
    }
    return;
  }
  // The catch-up: each sequence's rows whose KV the step computed, each with the token after it.
  // (built.batch went to the model runner; its token rows are the rows' tokens in order.) Rows go
  // in as one-token sequences, every row's draft computed, when that lets a graph replay the call.
  int64_t catch_up_rows = 0;
  for (const ScheduledRows& rows : built.rows) {
    const Request& r = *rows.request;
    if (r.status == RequestStatus::kRunning && r.num_computed_tokens > rows.first_position) {
      catch_up_rows += std::min(r.num_computed_tokens, rows.first_position + rows.num_new_tokens) - rows.first_position;
    }
  }
  const bool graphable = model_.rows_may_share_sequences() && model_.backend().can_capture();
  const bool split = graphable && catch_up_rows <= DecodeGraphs::kMaxBatch;
  DraftBatch catch_up(split);
  int32_t first_row = 0;
  for (const ScheduledRows& rows : built.rows) {
    Request& r = *rows.request;
    const int32_t hidden_first = first_row;
    first_row += rows.num_new_tokens;
    if (r.status != RequestStatus::kRunning || r.num_computed_tokens <= rows.first_position) continue;
    const int32_t end = std::min(r.num_computed_tokens, rows.first_position + rows.num_new_tokens);
    std::vector<int32_t> next(r.all_tokens().begin() + rows.first_position + 1, r.all_tokens().begin() + end + 1);
    const bool drafts = end == r.num_tokens() - 1 && max_drafts(r) > 0;
    catch_up.add(r, kv_.block_table(r.seq_id), block_size, rows.first_position, end, hidden_first, next, drafts);
  }
  if (catch_up.batch.token_ids.empty()) return;
  DraftBatch* last = &catch_up;
  const auto call = [&](DraftBatch& draft, CausalLM::DraftInput input, size_t depth) {
    draft.finish();
    const size_t outputs = draft.batch.logit_rows.size();
    std::vector<int32_t> tokens(outputs);
    std::vector<float> confidence(outputs, -1.0f);
    const auto called = std::chrono::steady_clock::now();
    model_.forward_draft(draft.batch, draft.hidden_rows, input, {nullptr, tokens.data(), confidence.data()});
    measured_.draft.observe(draft.batch.num_tokens(), seconds_since(called));
    ++stats_.draft_calls;
    for (size_t j = 0; j < draft.drafting.size(); ++j) {
      Request& r = *draft.drafting[j];
      const auto at = static_cast<size_t>(draft.output_of[j]);
      r.drafts.push_back(tokens[at]);
      // Without a confidence head: the acceptance measured at that depth.
      r.draft_confidences.push_back(confidence[at] >= 0.0f ? confidence[at]
                                                           : static_cast<float>(acceptance_at(depth)));
    }
  };
  call(catch_up, CausalLM::DraftInput::kMainHidden, 0);
  // Deeper drafts: the module again on its own output and the draft before it, one position on.
  std::vector<DraftBatch> chains;
  chains.reserve(static_cast<size_t>(depth_limit));
  for (int32_t depth = 2; depth <= depth_limit; ++depth) {
    DraftBatch& chain = chains.emplace_back(graphable);
    for (size_t j = 0; j < last->drafting.size(); ++j) {
      Request& r = *last->drafting[j];
      if (max_drafts(r) < depth) continue;
      const int32_t position = r.num_tokens() - 1 + (depth - 2);
      int32_t ignored = 0;
      if (!kv_.allocate(r.seq_id, r.cache_tokens(), position + 1, r.cache_salt, &ignored)) continue;
      chain.add(r, kv_.block_table(r.seq_id), block_size, position, position + 1, last->token_row_of[j],
                {r.drafts.back()}, true);
    }
    if (chain.batch.token_ids.empty()) break;
    call(chain, CausalLM::DraftInput::kDraftOutput, static_cast<size_t>(depth - 1));
    last = &chain;
  }
  for (Request* r : catch_up.drafting) {
    const auto keep = static_cast<size_t>(valid_prefix(*r, r->drafts));
    r->drafts.resize(std::min(keep, r->drafts.size()));
    r->draft_confidences.resize(r->drafts.size());
  }
}

int64_t Speculator::proposed_at(size_t k) const {
  return stats_.proposed_per_position[k] + (k < config_.prior_proposed.size() ? config_.prior_proposed[k] : 0);
}

double Speculator::acceptance_at(size_t k) const {
  const int64_t accepted =
      stats_.accepted_per_position[k] + (k < config_.prior_accepted.size() ? config_.prior_accepted[k] : 0);
  return static_cast<double>(accepted + 1) / static_cast<double>(proposed_at(k) + 2);
}

void Speculator::record_step(int64_t decode_rows, int64_t draft_rows, bool decode_only, bool launched_ahead,
                             double seconds) {
  const int64_t tokens = decode_rows + std::exchange(step_accepted_, 0);
  if (draft_rows > 0) {
    ++stats_.verify_steps;
    stats_.verify_rows += decode_rows + draft_rows;
  }
  if (drafting_paused_) {
    ++run_steps_;
    run_tokens_ += tokens;
    run_decode_only_ = run_decode_only_ && decode_only;
  }
  if (!decode_only || launched_ahead) return;
  (draft_rows > 0 ? verify_times() : measured_.decode).observe(decode_rows + draft_rows, seconds);
  // The steps of a pipelined run count for the arm together, when the run ends.
  if (pending_bucket_ == 0 || pipelined_run_ > 0) return;
  arms_[pending_bucket_][pending_drafted_ ? 1 : 0].add(static_cast<double>(tokens) /
                                                       (seconds + pending_draft_seconds_));
  pending_bucket_ = 0;
}

bool Speculator::drafting_measured_better(int64_t sequences, bool& trying) {
  constexpr int64_t kMeasured = 3;  // steps of an arm before its average is trusted
  constexpr int64_t kRetryEvery = 128;  // steps between tries of the losing arm
  const auto bucket = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(sequences, 1))));
  const std::array<RecentMedian, 2>& arms = arms_[bucket];
  pending_bucket_ = bucket;
  trying = arms[0].count() < kMeasured || arms[1].count() < kMeasured;
  if (trying) return arms[1].count() <= arms[0].count();
  const bool better = arms[1].median() > arms[0].median();
  trying = ++steps_since_retry_ >= kRetryEvery;
  if (trying) steps_since_retry_ = 0;
  return trying ? !better : better;
}

void Speculator::pipelined_step() {
  ++pipelined_run_;
  ++steps_since_retry_;
  ++stats_.skipped_draft_steps;
}

void Speculator::record(int32_t num_drafts, int32_t num_accepted) {
  DI_CHECK(num_drafts <= config_.num_tokens && num_accepted <= num_drafts);
  for (int32_t k = 0; k < num_drafts; ++k) ++stats_.proposed_per_position[static_cast<size_t>(k)];
  for (int32_t k = 0; k < num_accepted; ++k) ++stats_.accepted_per_position[static_cast<size_t>(k)];
  ++stats_.accepted_length[static_cast<size_t>(num_accepted)];
  step_accepted_ += num_accepted;
}

}  // namespace deepinfer
