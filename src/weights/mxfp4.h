// MXFP4 weights (GPT-OSS checkpoints, the OCP Microscaling format): e2m1 values two to a byte in
// `<name>_blocks` uint8 [..., rows, cols / 32, 16] with one e8m0 power-of-two scale per 32 values
// in `<name>_scales` uint8 [..., rows, cols / 32]; their checks, and dequantisation at load for
// backends that do not read them packed.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "weights/safetensors.h"

namespace deepinfer {

// Checks that blocks is U8 [n, rows, groups, 16] and scales U8 [n, rows, groups]; errors name the
// tensors and the shapes expected.
Result<void> check_mxfp4(const TensorView& blocks, const TensorView& scales);

// Matrix `index` of the leading dimension of blocks [n, rows, groups, 16] and scales [n, rows,
// groups] (both U8), as float32 [rows, groups * 32]: element 2j of a group is the low nibble of
// byte j, element 2j + 1 the high nibble, times 2^(scale - 127). Errors name the tensors and the
// shapes expected.
Result<std::vector<float>> dequantize_mxfp4(const TensorView& blocks, const TensorView& scales, int64_t index);

}  // namespace deepinfer
