// Linear layers on oneDNN matmul. The weight is converted and prepacked once,
// at load, into the layout the chosen implementation wants (blocked bf16 when
// the CPU has native bf16 and bf16 was asked for, f32 otherwise). On AMX, a
// bf16 layer whose sizes fit runs on xdit's tile GEMM (cpu/amx_gemm.h)
// instead, every row count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace xdit::kernels {

enum class ComputeType { kF32, kBF16 };

// An activation fused into the matmul's output (a oneDNN post-op).
enum class Activation { kNone, kGeluTanh };

// bf16 only when asked for and the CPU has it; otherwise f32 (logged).
ComputeType resolve_compute_type(DType requested);

// A weight kept block-quantized (GGUF's Q8_0, Q4_K, ...): `rows` rows of
// `row_bytes` bytes each, which `decode_row` turns into `cols` f32 values.
struct BlockRows {
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  std::function<void(const uint8_t* row, float* dst)> decode_row;
  std::string format;  // "Q8_0" (implementation(), logs)
  // The ggml blocks a bf16 layer may multiply as integers
  // (kernels/cpu/q8_0_gemm.h): Q8_0 (f16 scale, 32 int8 codes), Q4_K
  // (256-value blocks of 8 × 32 nibbles with 6-bit scales and mins) and
  // Q5_K (Q4_K with a fifth bit a value).
  enum class Code { kOther, kQ8_0, kQ4_K, kQ5_K };
  Code code = Code::kOther;
};

// How a layer built from float weights keeps them (--weights_dtype):
//   kCompute: in its compute type (bf16 or f32), packed for oneDNN or AMX;
//   kInt8:    per output channel symmetric int8, run against activations
//             quantized per row (token) to int8 on the CPU's integer dot
//             products (oneDNN s8 matmul: AMX-int8, AVX-512-VNNI,
//             AVX2-VNNI); where the CPU has none, decoded into the compute
//             type a band of rows at a time (said once);
//   kFp8:     e4m3 with a scale per output channel, decoded into the
//             compute type a band of rows at a time;
//   kQ8_0:    ggml's Q8_0 blocks (a f16 scale per 32 inputs, ggml's
//             quantizer), as a GGUF Q8_0 file's matrices run (the BlockRows
//             constructor below); a layer whose inputs are not whole blocks
//             keeps its weight in the compute type, as the GGUF files do.
enum class WeightFormat { kCompute, kInt8, kFp8, kQ8_0 };
WeightFormat parse_weight_format(const std::string& name);  // "", "int8", "fp8", "q8_0"
const char* weight_format_name(WeightFormat f);

// While one lives, the layers built from float weights on this thread keep
// them in `format` (scopes nest; the innermost wins).
class WeightFormatScope {
 public:
  explicit WeightFormatScope(WeightFormat format);
  ~WeightFormatScope();
  WeightFormatScope(const WeightFormatScope&) = delete;
  WeightFormatScope& operator=(const WeightFormatScope&) = delete;
  static WeightFormat current();

 private:
  WeightFormat previous_;
};

class LowRankSlot;

class Linear {
 public:
  Linear();
  // weight: [out, in] as torch stores it (any float dtype); bias: [out] or undefined.
  Linear(const Tensor& weight, const Tensor& bias, ComputeType ct,
         Activation act = Activation::kNone);
  // A fused layer whose weight is the rows of `parts` stacked ([out_i, in]
  // each, any float dtypes, mixed). Where the layer packs into a layout
  // blocked by outputs (bf16 on AVX-512-bf16, the AMX tile GEMM) and every
  // part but the last fills whole blocks, each part is packed from where it
  // lies (a file's mapping) and `stacked` is never called; otherwise it is,
  // once, for the stacked [Σ out_i, in] weight (the caller chooses its memory).
  Linear(const std::vector<Tensor>& parts, const Tensor& bias, ComputeType ct, Activation act,
         const std::function<Tensor()>& stacked);
  // A layer whose weight stays block-quantized: the rows of `parts`
  // stacked, each part's bytes copied (the file's pages may go), decoded
  // into the compute type a band of rows at a time inside every product —
  // the layer's memory is the blocks' size, not the expanded weight's. A
  // bf16 layer of Q8_0 parts alone runs as integers instead where the CPU
  // has AVX-512-VNNI without AMX (kernels/cpu/q8_0_gemm.h).
  Linear(const std::vector<BlockRows>& parts, const Tensor& bias, ComputeType ct, Activation act);
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;
  ~Linear();

  // y[M, out] = act(x[M, in] · Wᵀ + b). With accumulate (no activation),
  // y += x·Wᵀ + b instead.
  void forward(const float* x, int64_t m, float* y, bool accumulate = false) const;
  // bf16 layers only: the input already in bf16, or the output written in
  // bf16 (rounded after bias and activation), so that one layer feeds the
  // next without an f32 round trip through memory.
  void forward_bf16(const uint16_t* x, int64_t m, float* y) const;
  void forward_bf16(const uint16_t* x, int64_t m, uint16_t* y) const;  // both
  void forward_to_bf16(const float* x, int64_t m, uint16_t* y) const;
  bool is_bf16() const;
  Tensor forward(const Tensor& x) const;  // x [..., in] → [..., out]

  // The implementation that runs m rows: oneDNN's ("brg:avx512_core_amx", ...),
  // creating its primitive without running it, or "xdit:amx_tiles".
  std::string implementation(int64_t m) const;
  int64_t in_features() const;
  int64_t out_features() const;
  // Bytes the layer keeps for its weight (packed, block-quantized or int8
  // with its scales; the device copy's on a GPU).
  size_t weight_bytes() const;
  // The layer's low-rank side path (made on first use; the layer and its
  // moves share it).
  std::shared_ptr<LowRankSlot> low_rank() const;

 private:
  // Every forward: src f32 (src_f32) or bf16 rows, on the layer's device
  // (cuBLASLt, the AMX tile GEMM or oneDNN); nothing for m = 0.
  void run(const void* src, bool src_f32, int64_t m, void* y, bool accumulate, bool bf16_out) const;
  // The packed weight alone, with `act` (the layer's, or none).
  void run_packed(const void* src, bool src_f32, int64_t m, void* y, bool accumulate, bool bf16_out,
                  Activation act) const;
  // With the side path: in f32 before the activation and any bf16 rounding.
  void run_low_rank(const void* src, bool src_f32, int64_t m, void* y, bool accumulate,
                    bool bf16_out) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A low-rank side path beside a layer's packed weight: LoRA adapters kept
// unmerged and switched per request (xdit serve). While set, the layer
// computes act(x·Wᵀ + b + (x·Aᵀ)·Bᵀ) with A [R, in] and B [out, R] (the
// adapters' scales folded into B): both products in the layer's compute
// type (bf16 layers keep A and B in bf16: about the LoRA file's size),
// accumulated in f32 before the activation and any bf16 rounding. The packed
// weight is never touched, so a cleared layer gives its base output bit for
// bit. CPU layers only so far.
class LowRankSlot {
 public:
  ~LowRankSlot();
  // A, B: f32 host tensors; R = 0 (or undefined tensors) clears it.
  void set(const Tensor& a, const Tensor& b);
  void clear();
  bool on() const { return down_ != nullptr; }
  int64_t rank() const;
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }

 private:
  friend class Linear;
  LowRankSlot(int64_t in, int64_t out, ComputeType ct, bool device)
      : in_(in), out_(out), ct_(ct), device_(device) {}
  int64_t in_, out_;
  ComputeType ct_;
  bool device_;
  std::unique_ptr<Linear> down_, up_;  // A and B, in the layer's compute type
};

}  // namespace xdit::kernels
