#include "kernels/cpu/quantized_linear.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "core/aligned.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "io/gguf_quants.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/q8_0_gemm.h"
#include "kernels/kernels.h"

namespace xdit::kernels::cpu {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

// Rows of a block-quantized weight decoded per product: 512 rows of
// FLUX.1's 3072 inputs are 3 MB of bf16, about one core's L2 and L3 share,
// and the activations are read once per band (6 times for its widest layer).
constexpr int64_t kBandRows = 512;

// Rows whose largest magnitude is below this quantize to zeros (scale 1).
constexpr float kTinyRow = 448.0f * std::numeric_limits<float>::min();

// y[r, j] (+)= act(acc[r, j] · row_scale[r] + bias[j]) for rows [0, m) and
// columns [0, n): the end of every quantized product. acc has `ld_acc`
// floats between rows, y `ld_y` elements (f32, or bf16 when bf16_out).
void finish_rows(const float* acc, int64_t ld_acc, int64_t m, int64_t n, const float* row_scale,
                 const float* bias, Activation act, bool accumulate, void* y, int64_t ld_y,
                 bool bf16_out) {
  XDIT_CHECK(!(accumulate && bf16_out), "a quantized linear accumulates into f32 outputs only");
#pragma omp parallel
  {
    thread_local AlignedVector<float> row;
    grow_discarding(row, static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m; ++r) {
      const float* a = acc + r * ld_acc;
      const float s = row_scale != nullptr ? row_scale[r] : 1.0f;
      float* v = row.data();
      for (int64_t j = 0; j < n; ++j) v[j] = a[j] * s + (bias != nullptr ? bias[j] : 0.0f);
      if (act == Activation::kGeluTanh) gelu_tanh(v, v, n);
      if (bf16_out) {
        convert_from_f32(v, static_cast<uint16_t*>(y) + r * ld_y, DType::kBF16,
                         static_cast<size_t>(n));
      } else {
        float* out = static_cast<float*>(y) + r * ld_y;
        if (accumulate)
          for (int64_t j = 0; j < n; ++j) out[j] += v[j];
        else
          std::memcpy(out, v, static_cast<size_t>(n) * sizeof(float));
      }
    }
  }
}

// The largest |v[j]| of a row, or NaN when the row holds a NaN or ±Inf
// (the scale every row quantization starts from).
float largest_magnitude(const float* v, int64_t n) {
  float amax = 0, probe = 0;  // probe: NaN once a value is NaN or ±Inf
  for (int64_t j = 0; j < n; ++j) {
    amax = std::max(amax, std::fabs(v[j]));
    probe += v[j] * 0.0f;
  }
  return std::isnan(probe) ? probe : amax;
}

// One part of a block-quantized weight: its own copy of the bytes.
struct Segment {
  AlignedVector<uint8_t> bytes;
  int64_t rows = 0;
  size_t row_bytes = 0;
  std::function<void(const uint8_t*, float*)> decode_row;
  std::string format;
};

// A weight decoded a band of rows at a time into the compute type, then
// oneDNN's matmul against the plain band (kernels/cpu/dnnl_util.h gemm).
class BlockGemm : public QuantizedGemm {
 public:
  BlockGemm(std::vector<Segment> segments, int64_t in, ComputeType ct)
      : segments_(std::move(segments)), in_(in), ct_(ct) {
    for (const Segment& s : segments_) out_ += s.rows;
  }

  void run(const void* x, bool x_f32, int64_t m, void* y, bool accumulate, bool bf16_out,
           Activation act, const float* bias) const override {
    const bool bf16 = ct_ == ComputeType::kBF16;
    if (x_f32 && bf16)
      x = thread_bf16_copy(static_cast<const float*>(x), static_cast<size_t>(m * in_));
    const int64_t band = std::min(out_, kBandRows);
    thread_local AlignedVector<uint16_t> w16;
    thread_local AlignedVector<float> w32, acc;
    grow_discarding(acc, static_cast<size_t>(m * band));
    if (bf16)
      grow_discarding(w16, static_cast<size_t>(band * in_));
    else
      grow_discarding(w32, static_cast<size_t>(band * in_));
    for (int64_t r0 = 0; r0 < out_; r0 += band) {
      const int64_t nb = std::min(band, out_ - r0);
      decode_rows(r0, nb, bf16 ? static_cast<void*>(w16.data()) : w32.data());
      const GemmShape s{
          m, nb, in_, in_, in_, nb, /*b_trans=*/true, false, bf16 ? dt::bf16 : dt::f32};
      gemm(s, x, bf16 ? static_cast<const void*>(w16.data()) : w32.data(), acc.data());
      const size_t es = bf16_out ? 2 : 4;
      finish_rows(acc.data(), nb, m, nb, nullptr, bias != nullptr ? bias + r0 : nullptr, act,
                  accumulate, static_cast<char*>(y) + static_cast<size_t>(r0) * es, out_, bf16_out);
    }
  }

  std::string implementation(int64_t m) const override {
    const int64_t band = std::min(out_, kBandRows);
    const GemmShape s{
        m, band, in_, in_, in_, band, true, false, ct_ == ComputeType::kBF16 ? dt::bf16 : dt::f32};
    return "xdit:decode(" + segments_[0].format + ")+" + gemm_implementation(s);
  }

  size_t weight_bytes() const override {
    size_t n = 0;
    for (const Segment& s : segments_) n += s.bytes.size();
    return n;
  }

 private:
  // Rows [r0, r0 + n) into dst (bf16 or f32, [n, in]).
  void decode_rows(int64_t r0, int64_t n, void* dst) const {
    const bool bf16 = ct_ == ComputeType::kBF16;
#pragma omp parallel
    {
      thread_local AlignedVector<float> row;
      grow_discarding(row, static_cast<size_t>(in_));
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        int64_t r = r0 + i;
        size_t k = 0;
        while (r >= segments_[k].rows) r -= segments_[k++].rows;
        const Segment& s = segments_[k];
        const uint8_t* src = s.bytes.data() + static_cast<size_t>(r) * s.row_bytes;
        if (bf16) {
          s.decode_row(src, row.data());
          convert_from_f32(row.data(), static_cast<uint16_t*>(dst) + i * in_, DType::kBF16,
                           static_cast<size_t>(in_));
        } else {
          s.decode_row(src, static_cast<float*>(dst) + i * in_);
        }
      }
    }
  }

  std::vector<Segment> segments_;
  int64_t in_, out_ = 0;
  ComputeType ct_;
};

// The weight as f32 rows (any float dtype in).
const float* f32_rows(const Tensor& w, Tensor& keep) {
  if (w.dtype() == DType::kF32) return w.data<float>();
  keep = w.to(DType::kF32);
  return keep.data<float>();
}

// Each row → [f32 scale | `in` one-byte codes]: per output channel
// symmetric, the row's largest magnitude at `top` (127 for int8, 448 for
// e4m3).
Segment quantize_rows(const Tensor& weight, WeightFormat format) {
  Tensor keep;
  const float* w = f32_rows(weight, keep);
  const int64_t out = weight.dim(0), in = weight.dim(1);
  const bool fp8 = format == WeightFormat::kFp8;
  const float top = fp8 ? 448.0f : 127.0f;
  Segment s;
  s.rows = out;
  s.row_bytes = sizeof(float) + static_cast<size_t>(in);
  s.bytes.resize(static_cast<size_t>(out) * s.row_bytes);
  s.format = fp8 ? "fp8-e4m3" : "int8";
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite)
  for (int64_t r = 0; r < out; ++r) {
    const float* v = w + r * in;
    const float amax = largest_magnitude(v, in);
    if (std::isnan(amax)) {
      finite = false;
      continue;
    }
    // (A row below 448 · FLT_MIN would make its scale, or 1 / scale, not
    // finite: it is all zeros at this precision.)
    const float scale = amax > kTinyRow ? amax / top : 1.0f;
    uint8_t* dst = s.bytes.data() + static_cast<size_t>(r) * s.row_bytes;
    std::memcpy(dst, &scale, sizeof(float));
    for (int64_t j = 0; j < in; ++j) {
      const float q = v[j] / scale;
      dst[4 + j] = fp8 ? f32_to_e4m3(q)
                       : static_cast<uint8_t>(
                             static_cast<int8_t>(std::clamp(std::nearbyint(q), -127.0f, 127.0f)));
    }
  }
  XDIT_CHECK(finite, "a ", out, " x ", in, " weight holds NaN or Inf: it cannot be quantized to ",
             s.format);
  s.decode_row = [in, fp8](const uint8_t* row, float* dst) {
    float scale;
    std::memcpy(&scale, row, sizeof(float));
    for (int64_t j = 0; j < in; ++j)
      dst[j] = scale * (fp8 ? e4m3_to_f32(row[4 + j]) : static_cast<int8_t>(row[4 + j]));
  };
  return s;
}

// int8 weights with a scale per output channel against activations
// quantized per row (token) to int8 at every product, on oneDNN's s8
// matmul: y = act(row_scale · (x_q · W_qᵀ) · channel_scale + bias).
class Int8Gemm : public QuantizedGemm {
 public:
  explicit Int8Gemm(const Tensor& weight) : in_(weight.dim(1)), out_(weight.dim(0)) {
    Segment q = quantize_rows(weight, WeightFormat::kInt8);
    scales_.resize(static_cast<size_t>(out_));
    AlignedVector<int8_t> plain(static_cast<size_t>(out_ * in_));
    for (int64_t r = 0; r < out_; ++r) {
      const uint8_t* row = q.bytes.data() + static_cast<size_t>(r) * q.row_bytes;
      std::memcpy(&scales_[static_cast<size_t>(r)], row, sizeof(float));
      std::memcpy(plain.data() + r * in_, row + 4, static_cast<size_t>(in_));
    }
    try {
      const dnnl::memory::desc any({in_, out_}, dt::s8, tag::any);
      const auto pd = make_pd(256, any);
      packed_md_ = pd.weights_desc();
      packed_.resize(packed_md_.get_size());
      packed_mem_ = dnnl::memory(packed_md_, engine(), packed_.data());
      dnnl::memory user(dnnl::memory::desc({in_, out_}, dt::s8, tag::ba), engine(), plain.data());
      dnnl::reorder(user, packed_mem_).execute(thread_stream(), user, packed_mem_);
      thread_stream().wait();
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "packing an int8 linear weight");
    }
  }

  void run(const void* x, bool x_f32, int64_t m, void* y, bool accumulate, bool bf16_out,
           Activation act, const float* bias) const override {
    thread_local AlignedVector<int8_t> xq;
    thread_local AlignedVector<float> xs, acc;
    grow_discarding(xq, static_cast<size_t>(m * in_));
    grow_discarding(xs, static_cast<size_t>(m));
    grow_discarding(acc, static_cast<size_t>(m * out_));
    quantize_activations(x, x_f32, m, xq.data(), xs.data());
    const Prim& p = prim_for(m);
    auto& e = engine();
    dnnl::memory ms(p.pd.src_desc(), e, xq.data());
    dnnl::memory md(p.pd.dst_desc(), e, acc.data());
    dnnl::memory sc(dnnl::memory::desc({out_}, dt::f32, tag::a), e,
                    const_cast<float*>(scales_.data()));
    p.prim.execute(thread_stream(), {{DNNL_ARG_SRC, ms},
                                     {DNNL_ARG_WEIGHTS, packed_mem_},
                                     {DNNL_ARG_DST, md},
                                     {DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, sc},
                                     {DNNL_ARG_SCRATCHPAD, thread_scratchpad(p.pd)}});
    finish_rows(acc.data(), out_, m, out_, xs.data(), bias, act, accumulate, y, out_, bf16_out);
  }

  std::string implementation(int64_t m) const override {
    return std::string("int8:") + prim_for(m).pd.impl_info_str();
  }
  size_t weight_bytes() const override { return packed_.size() + scales_.size() * sizeof(float); }

 private:
  struct Prim {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
  };

  dnnl::matmul::primitive_desc make_pd(int64_t m, const dnnl::memory::desc& wmd) const {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_scales_mask(DNNL_ARG_WEIGHTS, 1 << 1);  // one per output column
    return {engine(), dnnl::memory::desc({m, in_}, dt::s8, tag::ab), wmd,
            dnnl::memory::desc({m, out_}, dt::f32, tag::ab), attr};
  }

  const Prim& prim_for(int64_t m) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = prims_.find(m); it != prims_.end()) return it->second;
    try {
      Prim p;
      p.pd = make_pd(m, packed_md_);
      warn_if_reference(p.pd.impl_info_str(), "int8 matmul",
                        detail::concat(m, "x", in_, " -> ", out_));
      p.prim = dnnl::matmul(p.pd);
      return prims_.emplace(m, std::move(p)).first->second;
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "creating an int8 linear primitive");
    }
  }

  // Each row of x at its own scale (largest magnitude → 127); a row with a
  // NaN or Inf gets a NaN scale, so its outputs are NaN as a float
  // product's would be.
  void quantize_activations(const void* x, bool x_f32, int64_t m, int8_t* q, float* scales) const {
#pragma omp parallel
    {
      thread_local AlignedVector<float> row;
      grow_discarding(row, static_cast<size_t>(in_));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < m; ++r) {
        const float* v = row.data();
        if (x_f32)
          v = static_cast<const float*>(x) + r * in_;
        else
          convert_to_f32(static_cast<const uint16_t*>(x) + r * in_, DType::kBF16, row.data(),
                         static_cast<size_t>(in_));
        const float amax = largest_magnitude(v, in_);
        int8_t* dst = q + r * in_;
        if (std::isnan(amax)) {
          scales[r] = std::nanf("");
          std::memset(dst, 0, static_cast<size_t>(in_));
          continue;
        }
        const float scale = amax > kTinyRow ? amax / 127.0f : 1.0f, inv = 1.0f / scale;
        scales[r] = scale;
        for (int64_t j = 0; j < in_; ++j)
          dst[j] = static_cast<int8_t>(std::clamp(std::nearbyint(v[j] * inv), -127.0f, 127.0f));
      }
    }
  }

  int64_t in_, out_;
  std::vector<float> scales_;
  dnnl::memory::desc packed_md_;
  AlignedVector<uint8_t> packed_;
  dnnl::memory packed_mem_;
  mutable std::mutex mu_;
  mutable std::map<int64_t, Prim> prims_;
};

// The weight as ggml's Q8_0 blocks (io::quantize_q8_0, gguf-py's byte for
// byte), then the layer a GGUF Q8_0 matrix makes (make_block_gemm).
std::unique_ptr<QuantizedGemm> make_q8_0_blocks_gemm(const Tensor& weight, ComputeType ct) {
  Tensor keep;
  const float* w = f32_rows(weight, keep);
  const int64_t out = weight.dim(0), in = weight.dim(1), blocks = in / 32;
  XDIT_CHECK(in % 32 == 0, "a ", out, " x ", in, " weight is not whole Q8_0 blocks of 32 inputs");
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite)
  for (int64_t r = 0; r < out; ++r)
    finite = finite && !std::isnan(largest_magnitude(w + r * in, in));
  XDIT_CHECK(finite, "a ", out, " x ", in,
             " weight holds NaN or Inf: it cannot be quantized to q8_0");
  AlignedVector<uint8_t> bytes(static_cast<size_t>(out * blocks * 34));
  io::quantize_q8_0(w, out * blocks, bytes.data());
  BlockRows rows;
  rows.data = bytes.data();
  rows.rows = out;
  rows.cols = in;
  rows.row_bytes = static_cast<size_t>(blocks * 34);
  rows.decode_row = [blocks](const uint8_t* row, float* dst) {
    io::dequantize_blocks(io::GgmlType::kQ8_0, row, blocks, dst);
  };
  rows.format = "Q8_0";
  rows.code = BlockRows::Code::kQ8_0;
  return make_block_gemm({rows}, in, ct);
}

}  // namespace

bool cpu_has_int8_dot() {
  // oneDNN's ISA values are bit sets, each level a superset of the ones it
  // extends (dnnl_types.h): AVX2-VNNI's bits, or AVX-512-VNNI's, are in
  // every later level (AVX-512-bf16, AMX, and those of newer releases).
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto has = [isa](dnnl::cpu_isa level) {
    const auto bits = static_cast<unsigned>(level);
    return (isa & bits) == bits;
  };
  return has(dnnl::cpu_isa::avx2_vnni) || has(dnnl::cpu_isa::avx512_core_vnni);
}

float e4m3_to_f32(uint8_t v) {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, f = c & 7;
      float a = e == 0 ? std::ldexp(static_cast<float>(f), -9)  // subnormal: f · 2⁻⁹
                       : std::ldexp(1.0f + static_cast<float>(f) / 8.0f, e - 7);
      if ((c & 0x7f) == 0x7f) a = std::nanf("");
      t[static_cast<size_t>(c)] = (c & 0x80) != 0 ? -a : a;
    }
    return t;
  }();
  return table[v];
}

uint8_t f32_to_e4m3(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return 0x7f;
  const float a = std::fabs(v);
  if (a >= 448.0f) return sign | 0x7e;  // saturated (e4m3fn has no infinity)
  if (a < std::ldexp(1.0f, -6)) {       // subnormal: steps of 2⁻⁹, 8 → the least normal
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int e = 0;
  const float frac = std::frexp(a, &e);  // a = frac · 2^e, frac ∈ [0.5, 1)
  // Mantissa steps of 1/8 on [1, 2), ties to even (nearbyint's default mode).
  int q = static_cast<int>(std::nearbyint((frac * 2.0f - 1.0f) * 8.0f));
  int exp = e - 1 + 7;
  if (q == 8) {
    q = 0;
    ++exp;
  }
  const int code = std::min(exp * 8 + q, 0x7e);
  return sign | static_cast<uint8_t>(code);
}

std::unique_ptr<QuantizedGemm> make_block_gemm(const std::vector<BlockRows>& parts, int64_t in,
                                               ComputeType ct) {
  if (ct == ComputeType::kBF16)
    if (auto integers = make_block_int8_gemm(parts, in)) return integers;
  std::vector<Segment> segments;
  for (const BlockRows& p : parts) {
    XDIT_CHECK(p.cols == in, "block-quantized linear parts must have the same ", in,
               " inputs, got ", p.cols);
    Segment s;
    s.rows = p.rows;
    s.row_bytes = p.row_bytes;
    s.bytes.assign(p.data, p.data + static_cast<size_t>(p.rows) * p.row_bytes);
    s.decode_row = p.decode_row;
    s.format = p.format;
    segments.push_back(std::move(s));
  }
  return std::make_unique<BlockGemm>(std::move(segments), in, ct);
}

std::unique_ptr<QuantizedGemm> make_quantized_gemm(const Tensor& weight, WeightFormat format,
                                                   ComputeType ct) {
  XDIT_CHECK(format != WeightFormat::kCompute, "make_quantized_gemm: no quantized format");
  if (format == WeightFormat::kQ8_0) return make_q8_0_blocks_gemm(weight, ct);
  if (format == WeightFormat::kInt8 && cpu_has_int8_dot())
    return std::make_unique<Int8Gemm>(weight);
  if (format == WeightFormat::kInt8) {
    static std::once_flag said;
    std::call_once(said, [] {
      XDIT_WARN(
          "this CPU has no integer dot products (VNNI / AMX-int8): int8 weights are "
          "decoded into the compute type for every product (memory saved, no speed-up)");
    });
  }
  std::vector<Segment> one;
  one.push_back(quantize_rows(weight, format));
  return std::make_unique<BlockGemm>(std::move(one), weight.dim(1), ct);
}

}  // namespace xdit::kernels::cpu
