// `deepinfer generate --input in.jsonl --output out.jsonl`: offline batches through deepinfer::LLM.
#pragma once

#include "args.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer::cli {

// defaults: the sampling flags given on the command line; each input line may override them.
int run_generate_batch(const Args& args, const SamplingParams& defaults);

}  // namespace deepinfer::cli
