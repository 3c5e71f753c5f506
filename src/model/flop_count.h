// What one token's forward multiplies, from a model's config alone: the FLOP counts benchmarks
// divide by (deepinfer bench's prefill rate) and, with the output head, a model's active parameters.
#pragma once

#include "weights/hf_config.h"

namespace deepinfer {

// Matmul parameters one token multiplies in the decoder layers, embeddings and the output head
// left out: the attention projections (MLA's latent ones, kv_b expanded per token as prompt chunks
// run it), a dense layer's MLP, a MoE layer's router, top-k routed experts and shared experts.
// Norms, biases and attention sinks (under 0.1 % of them) are left out too.
double decoder_matmul_params(const ModelConfig& c);

// Attention FLOPs of one causal prompt of n tokens over all layers: q.k over the query-key width and
// p.v over the value width for every (query, visible key, head), sliding-window layers seeing only
// their window.
double prompt_attention_flops(const ModelConfig& c, double n);

}  // namespace deepinfer
