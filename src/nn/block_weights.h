// Quantized weights (io::QuantizedRows, a GGUF's blocks) handed to the
// layers that keep them quantized (kernels::BlockRows), whole or in a
// tensor-parallel rank's share.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/weights.h"
#include "kernels/linear.h"

namespace xdit::nn {

// Rows [r0, r0 + n) of `q` (a view of its bytes).
kernels::BlockRows block_rows(const io::QuantizedRows& q, int64_t r0, int64_t n);

// A float matrix (any float dtype, a view of its bytes): a part stored as
// floats beside quantized ones in one fused layer.
kernels::BlockRows float_rows(const Tensor& t);

// Each row's columns of `shares` ([begin, begin + count) each, side by
// side) of `q`, copied into `bytes`. Throws one line when a share cuts one
// of q's blocks (a tensor-parallel degree that does not divide them).
kernels::BlockRows column_shares(const io::QuantizedRows& q,
                                 const std::vector<std::pair<int64_t, int64_t>>& shares,
                                 const std::string& name, int tp_size, std::vector<uint8_t>& bytes);

}  // namespace xdit::nn
