// kernels::Linear on oneDNN matmul with weights prepacked at construction.
#include "kernels/linear.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/aligned.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/quantized_linear.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#ifdef XDIT_HAVE_CUDA
#include "kernels/cuda/gemm.h"
#endif

namespace xdit::kernels {

using cpu::engine;
using cpu::rethrow_dnnl;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

ComputeType resolve_compute_type(DType requested) {
  if (requested == DType::kF32) return ComputeType::kF32;
  if (cpu_has_bf16()) return ComputeType::kBF16;
  static bool warned = false;
  if (!warned) {
    if (cpu_hardware_isa() >= CpuIsa::kAvx512Bf16)
      XDIT_WARN("ONEDNN_MAX_CPU_ISA leaves no native bf16 (AVX-512-bf16 / AMX): computing in f32");
    else
      XDIT_WARN("this CPU has no native bf16 (AVX-512-bf16 / AMX): computing in f32");
    warned = true;
  }
  return ComputeType::kF32;
}

namespace {
thread_local WeightFormat t_weight_format = WeightFormat::kCompute;
}  // namespace

WeightFormat parse_weight_format(const std::string& name) {
  if (name.empty() || name == "bf16" || name == "f32") return WeightFormat::kCompute;
  if (name == "int8") return WeightFormat::kInt8;
  if (name == "fp8") return WeightFormat::kFp8;
  if (name == "q8_0") return WeightFormat::kQ8_0;
  XDIT_FAIL("unknown weights dtype '", name, "' (int8, fp8, q8_0, or as computed: bf16 / f32)");
}

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kFp8:
      return "fp8";
    case WeightFormat::kQ8_0:
      return "q8_0";
    default:
      return "as computed";
  }
}

WeightFormatScope::WeightFormatScope(WeightFormat format) : previous_(t_weight_format) {
  t_weight_format = format;
}
WeightFormatScope::~WeightFormatScope() {
  t_weight_format = previous_;
}
WeightFormat WeightFormatScope::current() {
  return t_weight_format;
}

namespace {
// Row count the weight layout is chosen for; other row counts reuse the layout.
constexpr int64_t kPackHintRows = 256;

// Whether a bf16 layer of `in` → `out` runs on the AMX tile GEMM
// (kernels/cpu/amx_gemm.h): the tiles are there, the sizes fit its 32
// granule, and there are at least two 32-column panels per thread (the panels
// are what the threads split). It then runs every call of the layer: with few
// rows (T5's 120 tokens, PixArt's 240 text rows) it streams the weight at up
// to 1.6× oneDNN 3.2's rate, and with many (PixArt's 2048 and 8192 image
// rows) it ran 1.2–1.9× oneDNN's rate on the same packed weight
// (docs/PERFORMANCE.md, fourth and sixth rounds).
// XDIT_GEMM=onednn keeps every layer on oneDNN, to compare the two.
bool use_amx_gemm(int64_t in, int64_t out) {
  static const bool off = [] {
    const char* v = std::getenv("XDIT_GEMM");
    return v != nullptr && std::string(v) == "onednn";
  }();
  return !off && cpu::amx_gemm_takes(in, out) && out / 32 >= 2 * omp_get_max_threads();
}
}  // namespace

struct Linear::Impl {
  int64_t in = 0, out = 0;
  ComputeType ct = ComputeType::kF32;
  Activation act = Activation::kNone;
  dt src_dt = dt::f32;
  dnnl::memory::desc packed_md;
  dnnl::memory packed;  // over packed_buf
  // The packed weight's bytes: an uninitialised Tensor, so from
  // core/buffer_pool like every large buffer — a layer built after one of
  // the same size was freed (T5's blocks built one at a time) takes its pages
  // instead of faulting in and zeroing new ones.
  Tensor packed_buf;
  AlignedVector<uint16_t> amx_packed;  // the weight when cpu::amx_gemm runs the layer
  // The weight when it is kept block-quantized, int8 or fp8 instead.
  std::unique_ptr<cpu::QuantizedGemm> quant;

  bool amx() const { return !amx_packed.empty(); }
  // Inputs, compute type, activation and bias (of `out` values, set before).
  void set_up(int64_t inputs, ComputeType type, Activation a, const Tensor& b) {
    in = inputs;
    ct = type;
    act = a;
    src_dt = type == ComputeType::kBF16 ? dt::bf16 : dt::f32;
    if (!b.defined()) return;
    XDIT_CHECK(b.numel() == out, "linear bias has ", b.numel(), " values, expected ", out);
    bias = b.to_vector();
    has_bias = true;
  }
  std::vector<float> bias;
  bool has_bias = false;
#ifdef XDIT_HAVE_CUDA
  // Made instead of the oneDNN weights when the layer is built under a CUDA
  // DeviceScope: the weights then live on that device only.
  std::unique_ptr<cuda::DeviceLinear> device;
#endif

  struct Prim {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
  };
  mutable std::mutex mu;
  mutable std::map<std::tuple<int64_t, bool, bool, Activation>, Prim> prims;
  mutable std::shared_ptr<LowRankSlot> side;  // Linear::low_rank()

  dnnl::matmul::primitive_desc make_pd(int64_t m, const dnnl::memory::desc& wmd, bool accumulate,
                                       bool bf16_out = false) const {
    return make_pd(m, wmd, accumulate, bf16_out, act);
  }
  dnnl::matmul::primitive_desc make_pd(int64_t m, const dnnl::memory::desc& wmd, bool accumulate,
                                       bool bf16_out, Activation act) const {
    dnnl::memory::desc src({m, in}, src_dt, tag::ab);
    dnnl::memory::desc dst({m, out}, bf16_out ? dt::bf16 : dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::post_ops po;
    if (accumulate) po.append_sum(1.0f);
    if (act == Activation::kGeluTanh)
      po.append_eltwise(dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
    attr.set_post_ops(po);
    if (has_bias) {
      dnnl::memory::desc b({1, out}, dt::f32, tag::ab);
      return {engine(), src, wmd, b, dst, attr};
    }
    return {engine(), src, wmd, dst, attr};
  }

  const Prim& prim_for(int64_t m, bool accumulate, bool bf16_out = false) const {
    return prim_for(m, accumulate, bf16_out, act);
  }
  const Prim& prim_for(int64_t m, bool accumulate, bool bf16_out, Activation a) const {
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(m, accumulate, bf16_out, a);
    auto it = prims.find(key);
    if (it != prims.end()) return it->second;
    try {
      Prim p;
      p.pd = make_pd(m, packed_md, accumulate, bf16_out, a);
      cpu::warn_if_reference(p.pd.impl_info_str(), "matmul",
                             detail::concat(m, "x", in, " -> ", out));
      p.prim = dnnl::matmul(p.pd);
      XDIT_DEBUG("linear ", m, "x", in, " -> ", out, " ",
                 (ct == ComputeType::kBF16 ? "bf16" : "f32"), (bf16_out ? " (bf16 out)" : ""), ": ",
                 p.pd.impl_info_str());
      return prims.emplace(key, std::move(p)).first->second;
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "creating a linear layer primitive");
    }
  }
};

Linear::Linear() = default;
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;
Linear::~Linear() = default;

Linear::Linear(const Tensor& weight, const Tensor& bias, ComputeType ct, Activation act)
    : Linear(std::vector<Tensor>{weight}, bias, ct, act, [&] { return weight; }) {}

Linear::Linear(const std::vector<Tensor>& parts, const Tensor& bias, ComputeType ct, Activation act,
               const std::function<Tensor()>& stacked)
    : impl_(std::make_unique<Impl>()) {
  XDIT_CHECK(!parts.empty(), "linear: no weight");
  Impl& im = *impl_;
  for (const Tensor& p : parts) {
    XDIT_CHECK(p.ndim() == 2, "linear weight must be 2-D, got ", shape_str(p.shape()));
    XDIT_CHECK(p.dim(1) == parts[0].dim(1), "fused linear weight parts must have the same ",
               parts[0].dim(1), " inputs, got ", shape_str(p.shape()));
    im.out += p.dim(0);
  }
  im.set_up(parts[0].dim(1), ct, act, bias);
#ifdef XDIT_HAVE_CUDA
  if (on_cuda()) {
    const Tensor w = stacked().to(DType::kF32);
    im.device = std::make_unique<cuda::DeviceLinear>(
        w.data<float>(), im.has_bias ? im.bias.data() : nullptr, im.in, im.out,
        ct == ComputeType::kBF16, act == Activation::kGeluTanh);
    im.bias.clear();
    return;
  }
#endif
  if (const WeightFormat f = WeightFormatScope::current();
      f != WeightFormat::kCompute && !(f == WeightFormat::kQ8_0 && im.in % 32 != 0)) {
    im.quant = cpu::make_quantized_gemm(stacked(), f, ct);
    XDIT_DEBUG("linear ", im.in, " -> ", im.out, ": ", weight_format_name(f), " weights");
    return;
  }
  // Packs into one of the layouts blocked by `block` outputs
  // (cpu::pack_bf16_ba16a_b2a): each part straight from where it lies when
  // every part but the last fills whole blocks (a fused layer's parts need
  // not be stacked first), else the stacked weight.
  const auto pack_blocked = [&](int64_t block, uint16_t* dst) {
    bool apart = true;
    for (size_t i = 0; i + 1 < parts.size(); ++i) apart = apart && parts[i].dim(0) % block == 0;
    const auto pack = [&](const Tensor& t, int64_t row) {
      const Tensor w = t.dtype() == DType::kF16 ? t.to(DType::kF32) : t;
      cpu::pack_bf16_ba16a_b2a(w.raw(), w.dtype() == DType::kBF16, w.dim(0), im.in, block,
                               dst + cpu::ba16a_b2a_offset(row, im.in, block));
    };
    if (!apart) return pack(stacked(), 0);
    int64_t row = 0;
    for (const Tensor& p : parts) {
      pack(p, row);
      row += p.dim(0);
    }
  };
  if (ct == ComputeType::kBF16 && use_amx_gemm(im.in, im.out)) {
    im.amx_packed.resize(static_cast<size_t>(im.in * im.out));
    pack_blocked(32, im.amx_packed.data());  // amx_gemm's panels (BA16a32b2a)
    XDIT_DEBUG("linear ", im.in, " -> ", im.out, " bf16: xdit:amx_tiles");
    return;
  }
  try {
    dnnl::memory::desc any_md({im.in, im.out}, im.src_dt, tag::any);
    auto pd = im.make_pd(kPackHintRows, any_md, false);
    im.packed_md = pd.weights_desc();
    im.packed_buf =
        Tensor::empty({static_cast<int64_t>((im.packed_md.get_size() + 3) / 4)}, DType::kF32);
    im.packed = dnnl::memory(im.packed_md, engine(), im.packed_buf.raw());
    if (im.packed_md == dnnl::memory::desc({im.in, im.out}, dt::bf16, tag::BA16a64b2a)) {
      // The avx512_core_bf16 layout, packed here (oneDNN's reorder to it is
      // slow: cpu/convert.h).
      pack_blocked(64, static_cast<uint16_t*>(im.packed.get_data_handle()));
    } else {
      const Tensor whole = stacked();
      const Tensor w = whole.dtype() == DType::kF16 ? whole.to(DType::kF32) : whole;
      // Wᵀ viewed as [in, out] is the torch [out, in] buffer in "ba" order.
      const dt wdt = w.dtype() == DType::kBF16 ? dt::bf16 : dt::f32;
      dnnl::memory::desc user_md({im.in, im.out}, wdt, tag::ba);
      dnnl::memory user(user_md, engine(), const_cast<void*>(w.raw()));
      dnnl::reorder(user, im.packed).execute(cpu::thread_stream(), user, im.packed);
      cpu::thread_stream().wait();
    }
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, "packing a linear weight");
  }
}

Linear::Linear(const std::vector<BlockRows>& parts, const Tensor& bias, ComputeType ct,
               Activation act)
    : impl_(std::make_unique<Impl>()) {
  XDIT_CHECK(!parts.empty(), "linear: no weight");
  Impl& im = *impl_;
  for (const BlockRows& p : parts) im.out += p.rows;
  im.set_up(parts[0].cols, ct, act, bias);
#ifdef XDIT_HAVE_CUDA
  if (on_cuda()) {  // decoded whole: the device keeps the expanded weight
    std::vector<float> w(static_cast<size_t>(im.in * im.out));
    int64_t row = 0;
    for (const BlockRows& p : parts)
      for (int64_t r = 0; r < p.rows; ++r, ++row)
        p.decode_row(p.data + static_cast<size_t>(r) * p.row_bytes, w.data() + row * im.in);
    im.device = std::make_unique<cuda::DeviceLinear>(
        w.data(), im.has_bias ? im.bias.data() : nullptr, im.in, im.out, ct == ComputeType::kBF16,
        act == Activation::kGeluTanh);
    im.bias.clear();
    return;
  }
#endif
  im.quant = cpu::make_block_gemm(parts, im.in, ct);
}

void Linear::forward(const float* x, int64_t m, float* y, bool accumulate) const {
  XDIT_CHECK(!(accumulate && impl_->act != Activation::kNone),
             "linear: accumulate with a fused activation");
  run(x, true, m, y, accumulate, false);
}

void Linear::forward_bf16(const uint16_t* x, int64_t m, float* y) const {
  XDIT_CHECK(is_bf16(), "linear: bf16 input to an f32 layer");
  run(x, false, m, y, false, false);
}

void Linear::forward_bf16(const uint16_t* x, int64_t m, uint16_t* y) const {
  XDIT_CHECK(is_bf16(), "linear: bf16 input to an f32 layer");
  run(x, false, m, y, false, true);
}

void Linear::forward_to_bf16(const float* x, int64_t m, uint16_t* y) const {
  XDIT_CHECK(is_bf16(), "linear: bf16 output from an f32 layer");
  run(x, true, m, y, false, true);
}

void Linear::run(const void* src, bool src_f32, int64_t m, void* y, bool accumulate,
                 bool bf16_out) const {
  if (m == 0) return;
  if (impl_->side && impl_->side->on())
    return run_low_rank(src, src_f32, m, y, accumulate, bf16_out);
  run_packed(src, src_f32, m, y, accumulate, bf16_out, impl_->act);
}

void Linear::run_packed(const void* src, bool src_f32, int64_t m, void* y, bool accumulate,
                        bool bf16_out, Activation act) const {
#ifdef XDIT_HAVE_CUDA
  if (impl_->device) {
    // The device layer applies its own activation; the side path that would
    // ask for none is refused on a device (LowRankSlot::set).
    XDIT_CHECK(act == impl_->act, "a CUDA linear runs with its own activation only");
    return impl_->device->forward(src, !src_f32, m, y, bf16_out, accumulate);
  }
#endif
  const Impl& im = *impl_;
  if (im.quant)
    return im.quant->run(src, src_f32, m, y, accumulate, bf16_out, act,
                         im.has_bias ? im.bias.data() : nullptr);
  if (im.amx()) {
    cpu::AmxGemmOut o;
    o.y = y;
    o.bf16 = bf16_out;
    o.bias = im.has_bias ? im.bias.data() : nullptr;
    o.gelu_tanh = act == Activation::kGeluTanh;
    o.accumulate = accumulate;
    cpu::amx_gemm(src, src_f32, m, im.in, im.amx_packed.data(), im.out, o);
    return;
  }
  if (src_f32 && im.ct == ComputeType::kBF16)
    src = cpu::thread_bf16_copy(static_cast<const float*>(src), static_cast<size_t>(m * im.in));
  const Impl::Prim& p = im.prim_for(m, accumulate, bf16_out, act);
  auto& e = engine();
  dnnl::memory ms(p.pd.src_desc(), e, const_cast<void*>(src));
  dnnl::memory md(p.pd.dst_desc(), e, y);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, ms},
                                             {DNNL_ARG_WEIGHTS, im.packed},
                                             {DNNL_ARG_DST, md},
                                             {DNNL_ARG_SCRATCHPAD, cpu::thread_scratchpad(p.pd)}};
  if (im.has_bias)
    args.emplace(DNNL_ARG_BIAS,
                 dnnl::memory(p.pd.bias_desc(), e, const_cast<float*>(im.bias.data())));
  p.prim.execute(cpu::thread_stream(), args);
}

void Linear::run_low_rank(const void* src, bool src_f32, int64_t m, void* y, bool accumulate,
                          bool bf16_out) const {
  const LowRankSlot& s = *impl_->side;
  const int64_t out = impl_->out;
  Tensor t = Tensor::empty({m, s.rank()});  // x·Aᵀ
  if (src_f32)
    s.down_->forward(static_cast<const float*>(src), m, t.data<float>());
  else
    s.down_->forward_bf16(static_cast<const uint16_t*>(src), m, t.data<float>());
  if (impl_->act == Activation::kNone && !bf16_out) {
    run_packed(src, src_f32, m, y, accumulate, false, Activation::kNone);
    s.up_->forward(t.data<float>(), m, static_cast<float*>(y), /*accumulate=*/true);
    return;
  }
  // act(x·Wᵀ + b + t·Bᵀ), then rounded to bf16 where asked.
  Tensor z = Tensor::empty({m, out});
  float* zf = z.data<float>();
  run_packed(src, src_f32, m, zf, false, false, Activation::kNone);
  s.up_->forward(t.data<float>(), m, zf, /*accumulate=*/true);
  if (impl_->act == Activation::kGeluTanh) gelu_tanh(zf, zf, m * out);
  if (bf16_out)
    convert_from_f32(zf, y, DType::kBF16, static_cast<size_t>(m * out));
  else
    std::memcpy(y, zf, sizeof(float) * static_cast<size_t>(m * out));
}

std::shared_ptr<LowRankSlot> Linear::low_rank() const {
  if (!impl_->side) {
    bool device = false;
#ifdef XDIT_HAVE_CUDA
    device = impl_->device != nullptr;
#endif
    impl_->side.reset(new LowRankSlot(impl_->in, impl_->out, impl_->ct, device));
  }
  return impl_->side;
}

LowRankSlot::~LowRankSlot() = default;

void LowRankSlot::clear() {
  down_.reset();
  up_.reset();
}

int64_t LowRankSlot::rank() const {
  return down_ ? down_->out_features() : 0;
}

void LowRankSlot::set(const Tensor& a, const Tensor& b) {
  if (!a.defined() || a.numel() == 0) return clear();
  XDIT_CHECK(!device_, "LoRAs per request (a low-rank side path) run on the CPU only so far; on a ",
             "GPU give them at start (--lora)");
  XDIT_CHECK(
      a.ndim() == 2 && b.ndim() == 2 && a.dim(1) == in_ && b.dim(0) == out_ && b.dim(1) == a.dim(0),
      "low-rank side path: A ", shape_str(a.shape()), " and B ", shape_str(b.shape()),
      " do not fit a ", in_, " -> ", out_, " layer");
  const DeviceScope host(Device{});
  // Both made before either is replaced: a failure leaves the slot as it was.
  auto down = std::make_unique<Linear>(a, Tensor(), ct_);
  auto up = std::make_unique<Linear>(b, Tensor(), ct_);
  down_ = std::move(down);
  up_ = std::move(up);
}

Tensor Linear::forward(const Tensor& x) const {
  XDIT_CHECK(x.dtype() == DType::kF32 && x.ndim() >= 1 && x.dim(-1) == in_features(),
             "linear expects f32 input [..., ", in_features(), "], got ", shape_str(x.shape()));
  Shape s = x.shape();
  s.back() = out_features();
  Tensor y = Tensor::empty(s, DType::kF32, x.device());
  forward(x.data<float>(), x.numel() / in_features(), y.data<float>());
  return y;
}

std::string Linear::implementation(int64_t m) const {
#ifdef XDIT_HAVE_CUDA
  if (impl_->device) return impl_->device->bf16() ? "cublasLt:bf16" : "cublasLt:f32";
#endif
  if (impl_->quant) return impl_->quant->implementation(m);
  if (impl_->amx()) return "xdit:amx_tiles";
  return impl_->prim_for(m, false).pd.impl_info_str();
}

bool Linear::is_bf16() const {
#ifdef XDIT_HAVE_CUDA
  if (impl_->device) return impl_->device->bf16();
#endif
  return impl_->ct == ComputeType::kBF16;
}

size_t Linear::weight_bytes() const {
  const Impl& im = *impl_;
#ifdef XDIT_HAVE_CUDA
  if (im.device) return static_cast<size_t>(im.in * im.out) * (im.device->bf16() ? 2 : 4);
#endif
  if (im.quant) return im.quant->weight_bytes();
  if (im.amx()) return im.amx_packed.size() * sizeof(uint16_t);
  return im.packed_md.get_size();
}

int64_t Linear::in_features() const {
  return impl_->in;
}
int64_t Linear::out_features() const {
  return impl_->out;
}
}  // namespace xdit::kernels
