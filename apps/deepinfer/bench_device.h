// `deepinfer bench` on a device backend (--device cuda): decode tokens/s at several batch sizes and
// context lengths, prefill tokens/s at several prompt lengths, and the decode attention kernel's
// effective bandwidth, each beside the device ceilings measured in the same run.
#pragma once

#include <string>
#include <vector>

#include "args.h"
#include "tokenizer/tokenizer.h"
#include "session.h"

namespace deepinfer::cli {

// How a prompt's tokens spread over the experts (deepinfer-make-random-model --router-skew skews
// it on purpose; docs/benchmarks.md, "MoE routing skew"), as JSON fields
// (",\"busiest_tenth_expert_share\":...,\"busiest_expert_over_mean\":..."); "" for a dense model.
std::string expert_spread_fields(const ExpertTokenCounts& counts);

// Flags (besides the model flags): --batches LIST (default 1,8,64,256), --contexts LIST
// (1024,8192), --prefill LIST (4096), --steps N (decode steps timed per point, default 8).
// Prints one JSON line per measurement. Returns the exit code.
int run_device_bench(const Args& args, LoadedModel& loaded);

// Each linear-layer shape of c alone (bf16 weights) at 1, 2, 4 and 8 rows: one decode_product
// line each (bench_device_products.cpp). Keeps its weights on the backend until it is destroyed.
void bench_decode_products(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks);

// An FP8 checkpoint's projections (and an 8192^3 product) at prompt-sized row counts, FP8 and bf16
// side by side on random values: one fp8_product line each, TFLOP/s beside the measured bf16 GEMM
// rate and the FP8 datasheet peak. Nothing for other models or backends that dequantise FP8.
void bench_fp8_products(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks);

// A MoE model's routed experts alone (bf16, or MXFP4 / FP8 as the checkpoint's where the backend
// reads them packed; SiLU-gated, zero weights: the bytes set the time):
// Backend::moe_experts over expert ids already on the device at 1, 8, 64 and 256 tokens, each
// token on its own top_k experts in turn, as a captured graph where the backend captures; one
// expert_products line each, the TB/s of the expert weights read. Nothing for a dense model.
void bench_expert_products(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks);

// Backend::sample_rows alone on batch random rows of c's vocabulary, for a few filter sets: one
// sampling line each (bench_device_sampling.cpp).
void bench_sampling(Backend& backend, const ModelConfig& c, int32_t batch);

// batch requests of 32 random prompt tokens, each sampling max_tokens tokens (temperature 0.8,
// top_k 50, top_p 0.95, a seed each), through EngineCore in each of loops (false: synchronous,
// true: pipelined), alternating, median tokens/s of 3 runs after a warm-up: one engine_loop line
// (bench_device_engine.cpp). With a tokenizer, the first request is constrained by a regex that
// never forces an end (masks on the host every step it samples). Reallocates the KV cache.
void bench_engine_loops(CausalLM& model, const Tokenizer* tokenizer, int32_t batch, int32_t max_tokens,
                        const std::vector<bool>& loops);

}  // namespace deepinfer::cli
