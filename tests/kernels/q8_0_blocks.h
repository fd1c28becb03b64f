// Random Q8_0 and K-quant rows for the quantized-linear tests: ggml's block layout
// (f16 scale, 32 int8 codes), the QuantizedRows a GGUF gives, and their values.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "io/weights.h"
#include "kernels/cpu/q8_0_gemm.h"
#include "kernels/linear.h"
#include "nn/block_weights.h"
#include "test_util.h"

namespace xdit::kernels {

// `rows` rows of `cols` / 32 random Q8_0 blocks (f16 scale, 32 int8).
inline std::vector<uint8_t> random_q8_0(int64_t rows, int64_t cols, uint64_t seed) {
  const int64_t blocks = rows * cols / 32;
  std::vector<uint8_t> b(static_cast<size_t>(blocks * 34));
  const auto scales = test::randn(blocks, seed, 0.004f);
  const auto values = test::randn(blocks * 32, seed + 1, 50.0f);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint16_t d = f32_to_f16(std::fabs(scales[i]) + 1e-3f);
    std::memcpy(&b[i * 34], &d, 2);
    for (int j = 0; j < 32; ++j)
      b[i * 34 + 2 + j] = static_cast<uint8_t>(
          static_cast<int8_t>(std::clamp(std::nearbyint(values[i * 32 + j]), -127.0f, 127.0f)));
  }
  return b;
}

// `rows` rows of `cols` / 256 random Q4_K (or Q5_K) blocks: d and dmin
// finite and small, random 6-bit scales and mins, nibbles and fifth bits.
inline std::vector<uint8_t> random_k_quant(int64_t rows, int64_t cols, uint64_t seed,
                                           io::GgmlType type = io::GgmlType::kQ4_K) {
  const int64_t blocks = rows * cols / 256, bytes = io::ggml_block_bytes(type);
  std::vector<uint8_t> b(static_cast<size_t>(blocks * bytes));
  std::mt19937_64 rng(seed);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  const auto scales = test::randn(2 * blocks, seed + 1, 0.002f);
  for (int64_t i = 0; i < blocks; ++i)
    for (int h = 0; h < 2; ++h) {
      const uint16_t d = f32_to_f16(std::fabs(scales[2 * i + h]) + 1e-4f);
      std::memcpy(&b[i * bytes + 2 * h], &d, 2);
    }
  return b;
}

inline io::QuantizedRows k_quant_rows(const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols,
                                      io::GgmlType type = io::GgmlType::kQ4_K) {
  return {
      type, rows, cols, bytes.data(), static_cast<size_t>(cols / 256 * io::ggml_block_bytes(type)),
      {}};
}

inline io::QuantizedRows q8_rows(const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  return {io::GgmlType::kQ8_0, rows, cols, bytes.data(), static_cast<size_t>(cols / 32 * 34), {}};
}

inline Tensor decoded(const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols,
                      io::GgmlType type = io::GgmlType::kQ8_0) {
  Tensor t = Tensor::empty({rows, cols});
  io::dequantize_blocks(type, bytes.data(), rows * cols / io::ggml_block_values(type),
                        t.data<float>());
  return t;
}

// Skips a test of the integer route where the CPU cannot run it.
#define SKIP_WITHOUT_VNNI()                                                          \
  if (!cpu::cpu_runs_block_int8_dot())                                               \
  GTEST_SKIP()                                                                       \
      << "this CPU (or ONEDNN_MAX_CPU_ISA) has no AVX-512-VNNI + bf16 without AMX: " \
         "Q8_0 and K-quant layers decode their blocks (tested in test_quantized_linear.cpp)"

// max |got − want| / max |want|, against a reference in double.
inline double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return worst / scale;
}

// What tensor parallelism's row-parallel layers give for `q`: a bf16 layer
// over each share's columns (runs of whole blocks, nn::column_shares) run
// on its part of x [m, q.cols], the outputs summed.
inline std::vector<float> summed_shares(
    const io::QuantizedRows& q, const std::vector<std::vector<std::pair<int64_t, int64_t>>>& shares,
    const std::vector<float>& x, int64_t m) {
  std::vector<float> sum(static_cast<size_t>(m * q.rows), 0.0f);
  for (const auto& share : shares) {
    std::vector<uint8_t> bytes;
    const Linear part({nn::column_shares(q, share, "w", 2, bytes)}, Tensor(), ComputeType::kBF16,
                      Activation::kNone);
    std::vector<float> xs;
    for (int64_t r = 0; r < m; ++r)
      for (const auto& [begin, count] : share)
        xs.insert(xs.end(), x.begin() + r * q.cols + begin, x.begin() + r * q.cols + begin + count);
    part.forward(xs.data(), m, sum.data(), /*accumulate=*/true);
  }
  return sum;
}

// While one lives, new bf16 Q8_0 / Q4_K / Q5_K layers decode their blocks (or,
// `integers`, run as integers where the CPU can); the switch as it was after.
struct DecodedQ8_0 {
  explicit DecodedQ8_0(bool integers = false) : previous_(cpu::block_int8_dot_on()) {
    cpu::set_block_int8_dot(integers);
  }
  ~DecodedQ8_0() { cpu::set_block_int8_dot(previous_); }
  DecodedQ8_0(const DecodedQ8_0&) = delete;
  DecodedQ8_0& operator=(const DecodedQ8_0&) = delete;

 private:
  bool previous_;
};

}  // namespace xdit::kernels
