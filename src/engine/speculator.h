// Speculator: the engine's speculative decoding (issue 22, the seeds' DSpark). After each step the
// model's draft module (CausalLM::forward_draft, DeepSeek's MTP) catches its own KV up on the
// positions the step computed, in one batched call, and drafts a chain of up to K tokens for every
// decoding sequence (K - 1 more calls, one row per sequence), each draft with its confidence (the
// checkpoint's confidence head; without one, the acceptance measured so far at that depth). Before
// the next step, plan() chooses how many of each sequence's drafts it verifies: with varlen on,
// the drafts of highest cumulative confidence across all sequences, as many as maximise expected
// tokens per unit of step time on the verify step-time curve profiled at start-up
// (engine/draft_allocator.h); and chains are only as deep as the measured acceptance pays for
// the draft module's time (the decode and draft curves), not at all when none does or when the
// tokens per second measured with drafting at this many sequences fall below those without. With varlen
// off every sequence verifies all of its K drafts. The engine verifies (engine_core.cpp): each row
// draws what plain decoding draws at that position, keyed by (seed, position), and a draft is kept
// while it equals that draw, so outputs are plain decoding's, token for token.
// The draft module's KV shares the main cache's block tables: a rejected draft's KV is overwritten
// later, and only verified tokens are ever committed to the prefix cache. KV the module never
// computed (pages from the persistent store, a COMPLETION engine's prompt, a prefix cached while
// speculation was off, a forked n > 1 sample's copied page) only lowers the acceptance.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "engine/batch_builder.h"
#include "engine/draft_allocator.h"
#include "kvcache/kv_cache_manager.h"
#include "model/model.h"

namespace deepinfer {

struct SpeculativeConfig {
  int32_t num_tokens = 0;  // K, the longest draft chain; 0: off
  // DSpark's confidence-scheduled verification; false: every sequence verifies K drafts.
  bool varlen = true;
  // The step-time curves; empty: profiled at start-up (varlen only; then kept per model, backend
  // and shape for the process's life).
  std::vector<StepTimePoint> decode_curve;  // a decode step of R sequences
  std::vector<StepTimePoint> verify_curve;  // a verify step of R rows, 1 + K per sequence
  std::vector<StepTimePoint> draft_curve;   // one draft-module call of R rows
  // Acceptance measured before (an earlier engine's SpeculativeStats on the same model and
  // traffic): per draft position, drafts verified and accepted, counted with this engine's own
  // when deciding how deep to draft. Without enough of either, the engine drafts at full depth
  // until it has measured kExploreVerifications first drafts.
  std::vector<int64_t> prior_proposed;
  std::vector<int64_t> prior_accepted;
  // Drafts from elsewhere instead of the draft module (replayed drafts, to measure verification on
  // models whose draft module is missing or means nothing): up to max_drafts drafts for the
  // request's next positions and a confidence for each. Drafting then costs nothing.
  std::function<void(const Request& request, int32_t max_drafts, std::vector<int32_t>& drafts,
                     std::vector<float>& confidences)>
      draft_source;
};

struct SpeculativeStats {
  int64_t verify_steps = 0;        // steps that verified at least one draft
  int64_t verify_rows = 0;         // their decode rows: golden rows plus drafts
  int64_t skipped_draft_steps = 0; // steps after which drafting did not pay (varlen)
  int64_t draft_calls = 0;         // forward_draft calls
  double draft_seconds = 0.0;      // wall time in draft() (the calls return with their results)
  // Per draft position k (index k - 1): drafts verified there, and of them accepted.
  std::vector<int64_t> proposed_per_position;
  std::vector<int64_t> accepted_per_position;
  // accepted_length[a]: verifications of a sequence that kept a drafts (0 .. K).
  std::vector<int64_t> accepted_length;
  // The decode, verify and draft step-time curves, profiled and corrected by measured times
  // (varlen; empty otherwise).
  std::vector<StepTimePoint> decode_curve, verify_curve, draft_curve;
};

// The median of the last five values added: a step that allocated or captured a graph does not
// move it, and five steps of a new regime do.
class RecentMedian {
 public:
  void add(double value);
  int64_t count() const { return count_; }
  double median() const;  // of at least one value

 private:
  int64_t count_ = 0;
  std::array<double, 5> values_{};  // round robin
};

// Step times measured while serving, per power-of-two bucket of rows (RecentMedian), which
// correct a start-up profile: it ran at short contexts, so it misses what attention over long
// ones adds, and the engine's own time per step.
class MeasuredTimes {
 public:
  // The first time of each bucket is not kept: it may include a graph's capture.
  void observe(int64_t rows, double seconds);
  // Times carried to a new engine: its first time of each bucket is not kept either.
  void skip_next_first_times();
  bool empty() const;  // no time kept yet
  // profile's points, each replaced by the measured time of its bucket (the median of its last
  // five), or scaled by the mean ratio of measured to profiled time over the buckets measured
  // (unchanged before any).
  std::vector<StepTimePoint> correct(const std::vector<StepTimePoint>& profile) const;

 private:
  struct Bucket {
    int64_t seen = 0;
    RecentMedian seconds;
  };
  std::map<int64_t, Bucket> buckets_;
};

// The step times an engine measured, kept beside the profile for the process's next engine of the
// same shape.
struct MeasuredStepTimes {
  MeasuredTimes decode, verify, draft;
  MeasuredTimes pipelined;  // decode steps in pipelined runs: a run's time over its steps
  // Carried to a new engine, whose graphs are captured anew: each table's next first time of each
  // bucket is not kept.
  void skip_next_first_times();
};

class Speculator {
 public:
  // First drafts verified (prior included) before the varlen budget trusts the measured acceptance.
  static constexpr int64_t kExploreVerifications = 64;
  // The context of the start-up profile's sequences, in tokens (at most the cache and the model's).
  static constexpr int64_t kProfileContext = 256;

  // limits: the engine's; profiles the curves the config leaves empty (varlen only). pipelined: the
  // engine runs steps that draft nothing pipelined (EngineConfig::async_scheduling, below). With
  // every curve profiled, the step times the process's last engine of the same model, backend and
  // limits measured correct them from the start, and this engine's are kept for the next: what a
  // step costs is mostly the model's and the loop's (the contexts served move it too, and the next
  // engine's own steps replace what it carried within five of each size); acceptance is measured
  // afresh, from SpeculativeConfig::prior_* if given.
  Speculator(CausalLM& model, KvCacheManager& kv, const SpeculativeConfig& config, int32_t max_num_seqs,
             int32_t max_num_batched_tokens, int64_t max_model_len, bool pipelined);
  ~Speculator();
  Speculator(const Speculator&) = delete;
  Speculator& operator=(const Speculator&) = delete;

  // Before scheduling: sets num_verify_drafts of each running sequence (0 without drafts).
  void plan(const std::vector<Request*>& running);
  // After a step's results were applied: catches the draft module up on each sequence's computed
  // rows of built (its hidden states are the last forward's; built.rows is read, not built.batch,
  // which the model runner took), then drafts for every sequence that decodes next. population:
  // the requests running or waiting, the decode batch drafting is judged at (with varlen) while
  // prompts still run; max_drafts(r): the most drafts r may use (0: none); valid_prefix(r,
  // drafts): how many leading drafts its grammar allows.
  void draft(const BuiltBatch& built, int64_t population, const std::function<int32_t(const Request&)>& max_drafts,
             const std::function<int32_t(const Request&, std::span<const int32_t>)>& valid_prefix);
  // A verification's outcome: num_drafts verified, num_accepted of them kept.
  void record(int32_t num_drafts, int32_t num_accepted);
  // A step's decode rows (golden rows and draft rows; its verifications were recorded), and the
  // time it took, scheduling and results included (drafting not); decode_only: it had no prompt
  // rows; launched_ahead: it was launched while another step ran. A decode-only step launched
  // alone is a decode step (no draft verified) or a verify step, and its time goes into the
  // curves and, unless it is a pipelined run's first, the arms; a run's steps count together
  // (below).
  void record_step(int64_t decode_rows, int64_t draft_rows, bool decode_only, bool launched_ahead, double seconds);
  // Pipelined steps (EngineConfig::async_scheduling): with varlen, after a decision not to draft,
  // the engine may launch up to kPipelinedRun steps (kTryRun when the decision is one of the
  // veto's tries of not drafting) each before the results of the one ahead of it (no drafts, no
  // catch-up of the draft module); the last of them is collected with nothing launched behind it,
  // and draft() judges again after it. pipelined_step: one such step was launched (counted as a
  // skipped draft step). A run's tokens over its wall time are what not drafting gives in this
  // loop: the veto's arm without drafts takes that rate and the budget that step time, not a
  // synchronous step's (at 64 sequences on an H100 the default model's synchronous decode step
  // costs about 1.4x a pipelined one). Runs are long because each judging step is synchronous.
  static constexpr int64_t kPipelinedRun = 32;
  static constexpr int64_t kTryRun = 4;
  bool may_pipeline() const { return drafting_paused_ && pipelined_run_ < run_limit_; }
  void pipelined_step();

  // The counters, and the step-time curves as the budget last saw them (profile and measurements).
  SpeculativeStats stats() const;

 private:
  void profile(int32_t max_num_seqs, int32_t max_num_batched_tokens);
  // The chain depth (0: none) at which drafting for `sequences` decoding sequences is expected to
  // give the most tokens per second, plain decoding included, at the measured acceptance; K until
  // kExploreVerifications first drafts were verified.
  int32_t paying_depth(int64_t sequences) const;
  // Whether to draft for `sequences` decoding sequences, from the tokens per second measured with
  // and without drafting at that many (each arm tried until measured, the loser again now and then;
  // trying: this answer is such a try).
  bool drafting_measured_better(int64_t sequences, bool& trying);
  // What a plain step costs in this loop: pipelined runs' times once measured (when the engine
  // pipelines), else synchronous steps'.
  const MeasuredTimes& plain_step_times() const {
    return pipelined_ && !measured_.pipelined.empty() ? measured_.pipelined : measured_.decode;
  }
  // The table a step's time goes to: verify steps of one-token sequences are decode steps.
  MeasuredTimes& verify_times() { return rows_split_ ? measured_.decode : measured_.verify; }
  const MeasuredTimes& verify_times() const { return rows_split_ ? measured_.decode : measured_.verify; }
  // Drafts verified at position k (0-based), prior included, and the acceptance there given the
  // earlier drafts were accepted (an even prior while few were verified).
  int64_t proposed_at(size_t k) const;
  double acceptance_at(size_t k) const;

  CausalLM& model_;
  KvCacheManager& kv_;
  SpeculativeConfig config_;
  MeasuredStepTimes measured_;
  bool rows_split_;  // CausalLM::rows_may_share_sequences
  bool pipelined_;   // the engine runs steps that draft nothing pipelined
  std::string profile_key_;  // every curve profiled: where the measured tables are kept (profile())
  // Per power-of-two bucket of decoding sequences, the tokens per second of its last steps
  // (drafting included) with [1] drafting, and without [0]: synchronous steps, or pipelined runs
  // when the engine ran them.
  std::map<int64_t, std::array<RecentMedian, 2>> arms_;
  int64_t steps_since_retry_ = 0;  // decisions and pipelined steps since the losing arm's last try
  // The last decision, which the next synchronous step's time counts for (a pipelined run's go
  // to run_bucket_ when it ends): its bucket (0: none), whether it drafted, and how long drafting
  // took.
  int64_t pending_bucket_ = 0;
  int64_t step_accepted_ = 0;  // drafts accepted since the last record_step
  bool pending_drafted_ = false;
  bool drafting_paused_ = false;  // varlen's last decision: no drafts
  int64_t pipelined_run_ = 0;     // steps launched ahead since that decision
  // The run since that decision: the most steps launched ahead, its arm's bucket (0: none), when
  // it began, its steps and their tokens, and whether every step was decode-only.
  int64_t run_limit_ = 0;
  int64_t run_bucket_ = 0;
  std::chrono::steady_clock::time_point run_start_;
  int64_t run_steps_ = 0;
  int64_t run_tokens_ = 0;
  bool run_decode_only_ = true;
  double pending_draft_seconds_ = 0.0;
  int64_t max_model_len_;
  SpeculativeStats stats_;
};

}  // namespace deepinfer
