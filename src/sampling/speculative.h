// Verification of a sampled draft token (speculative sampling, Leviathan et al. 2023 and Chen et
// al. 2023): a draft d drawn from the draft model's distribution q is kept with probability
// min(1, p(d) / q(d)) under the target distribution p; otherwise the token is drawn from the
// residual max(0, p - q), normalised. The token that results is distributed exactly as p, whatever
// q is. An argmax draft (q a point mass) needs none of this: sampling p and keeping the draft when
// they agree is the same rule (engine/draft_verifier.h).
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

struct DraftVerdict {
  bool accepted = false;
  int32_t token = -1;  // the draft when accepted, else the residual's draw
};

// p and q: probabilities over the same vocabulary, each summing to 1 (up to rounding); q[draft] > 0.
// u_accept and u_resample: uniforms in [0, 1) that make the choice repeatable (the engine keys
// them by the request's seed, the position and the purpose). Throws std::invalid_argument when the
// distributions do not match in size or the draft is out of range or impossible under q.
DraftVerdict verify_sampled_draft(const std::vector<double>& p, const std::vector<double>& q, int32_t draft,
                                  double u_accept, double u_resample);

}  // namespace deepinfer
