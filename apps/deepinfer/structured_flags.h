// The structured-output flags of `deepinfer generate`: --json-schema FILE|JSON, --json-object,
// --regex R, --grammar FILE (EBNF), --choice a,b,c.
#pragma once

#include <set>
#include <string>

#include "args.h"
#include "core/result.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer::cli {

// Value flags this adds to a command.
std::set<std::string> structured_value_flags(std::set<std::string> flags);
// Sets params.structured_output from the flags (at most one) after compiling the grammar once,
// so a bad schema or grammar is reported before the model loads.
Result<void> read_structured_flags(const Args& args, SamplingParams& params);

}  // namespace deepinfer::cli
