// The products of linear layers whose weight is not packed in their compute
// type (kernels/linear.h): block-quantized weights (GGUF's) and fp8 decoded
// a band of rows at a time into bf16 or f32 for oneDNN's matmul, and int8
// weights run against int8 activations on the CPU's integer dot products.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/linear.h"

namespace xdit::kernels::cpu {

class QuantizedGemm {
 public:
  virtual ~QuantizedGemm() = default;
  // y[m, out] = act(x·Wᵀ + bias) (accumulate: y += x·Wᵀ + bias), x f32 or
  // bf16 rows (bf16 for bf16 layers only), y f32 or (bf16_out) bf16.
  virtual void run(const void* x, bool x_f32, int64_t m, void* y, bool accumulate, bool bf16_out,
                   Activation act, const float* bias) const = 0;
  virtual std::string implementation(int64_t m) const = 0;
  virtual size_t weight_bytes() const = 0;
};

// The stacked rows of `parts` (bytes copied), `in` values each: Q8_0, Q4_K
// or Q5_K parts of a bf16 layer as integers where make_block_int8_gemm takes
// them (kernels/cpu/q8_0_gemm.h), otherwise decoded a band at a time.
std::unique_ptr<QuantizedGemm> make_block_gemm(const std::vector<BlockRows>& parts, int64_t in,
                                               ComputeType ct);

// A float weight [out, in] (any float dtype) quantized per output channel,
// int8 (kInt8) or e4m3 (kFp8), or into Q8_0 blocks (kQ8_0: `in` a multiple
// of 32), run as make_block_gemm runs a GGUF's.
std::unique_ptr<QuantizedGemm> make_quantized_gemm(const Tensor& weight, WeightFormat format,
                                                   ComputeType ct);

// Whether the CPU oneDNN runs on has integer dot products (VNNI, AMX-int8).
bool cpu_has_int8_dot();

// OCP fp8 e4m3 ("e4m3fn": no infinities, ±448 the largest): the nearest
// value, ties to even, beyond ±448 saturated; and back.
uint8_t f32_to_e4m3(float v);
float e4m3_to_f32(uint8_t v);

}  // namespace xdit::kernels::cpu
