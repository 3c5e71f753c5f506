// `deepinfer generate --input in.jsonl --output out.jsonl`: offline batches through deepinfer::LLM.
#pragma once

#include "args.h"
#include "data_parallel_flags.h"
#include "deepinfer/llm.h"

namespace deepinfer::cli {

// defaults: the sampling flags given on the command line; each input line may override them.
// With a data-parallel group, rank r runs lines r, r + N, ... and rank 0 writes every result.
int run_generate_batch(const Args& args, const SamplingParams& defaults, const DataParallelConfig& data_parallel,
                       LocalRanks& ranks);

}  // namespace deepinfer::cli
