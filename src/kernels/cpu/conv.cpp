#include "kernels/conv.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/winograd.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#ifdef XDIT_HAVE_CUDNN_FE
#include "kernels/cuda/conv.h"
#endif

namespace xdit::kernels {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {
// set_conv_winograd's choice: -1 none, then XDIT_CONV (winograd or
// direct) decides, and without it the CPU: Winograd where the bf16 GEMMs are
// AVX-512 dot products (measured there: 1.65x faster on the VAE decoder);
// on AMX, oneDNN's direct kernel until Winograd is measured there too (its
// GEMMs are ~4x faster, so its transforms weigh more).
std::atomic<int> winograd_choice{-1};
bool winograd_enabled() {
  const char* e = std::getenv("XDIT_CONV");
  const std::string v = e != nullptr ? e : "";
  XDIT_CHECK(v.empty() || v == "winograd" || v == "direct", "XDIT_CONV='", v,
             "': use winograd, direct, or leave it unset");
  const int c = winograd_choice.load();
  if (c >= 0) return c == 1;
  return v.empty() ? !cpu_has_amx() : v == "winograd";
}
}  // namespace

void set_conv_winograd(std::optional<bool> enabled) {
  winograd_choice.store(enabled ? (*enabled ? 1 : 0) : -1);
}

struct Conv2d::Impl {
  int64_t in = 0, out = 0, kh = 0, kw = 0, pad = 0;
  ComputeType ct = ComputeType::kF32;
  dnnl::memory::desc packed_md;
  dnnl::memory packed;
  std::vector<float> bias;
  // bf16 3×3 layers with padding 1 on AVX-512-bf16: Winograd F(2×2, 3×3)
  // instead of oneDNN's direct convolution (XDIT_CONV=direct keeps the latter).
  std::unique_ptr<cpu::Winograd3x3> wino;
#ifdef XDIT_HAVE_CUDNN_FE
  // Made instead of the oneDNN weights under a CUDA DeviceScope.
  std::unique_ptr<cuda::DeviceConv> device;
#endif
  struct Prim {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    dnnl::memory weights;  // this size's own weight layout; empty: the shared `packed`
  };
  mutable std::mutex mu;
  mutable std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Prim> prims;

  // `halo`: the input's rows already include the vertical padding (rows
  // from the neighbouring bands, or zeros), so none is added above or below.
  dnnl::convolution_forward::primitive_desc make_pd(int64_t b, int64_t h, int64_t w,
                                                    const dnnl::memory::desc& wmd,
                                                    bool halo = false) const {
    const dt sdt = ct == ComputeType::kBF16 ? dt::bf16 : dt::f32;
    const int64_t ph = halo ? 0 : pad;
    dnnl::memory::desc src({b, in, h, w}, sdt, tag::nhwc);
    dnnl::memory::desc dst({b, out, h + 2 * ph - kh + 1, w + 2 * pad - kw + 1}, dt::f32, tag::nhwc);
    dnnl::memory::desc bmd({out}, dt::f32, tag::a);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return {cpu::engine(),
            dnnl::prop_kind::forward_inference,
            dnnl::algorithm::convolution_direct,
            src,
            wmd,
            bmd,
            dst,
            {1, 1},
            {ph, pad},
            {ph, pad},
            attr};
  }

  const Prim& prim_for(int64_t b, int64_t h, int64_t w, bool halo = false) const {
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(b, h, w, halo);
    auto it = prims.find(key);
    if (it != prims.end()) return it->second;
    try {
      Prim p;
      p.pd = make_pd(b, h, w, packed_md, halo);
      if (cpu::is_reference_impl(p.pd.impl_info_str())) {
        // The layout packed at load has no JIT kernel for this size (oneDNN
        // 3.2: 256 -> 128 channels at 256 x 256 px falls to ref:any, hours
        // for a 1024 px image): let oneDNN choose the layout for this size
        // and keep the weights in it too.
        dnnl::memory::desc any_md(packed_md.get_dims(), packed_md.get_data_type(), tag::any);
        auto alt = make_pd(b, h, w, any_md, halo);
        if (!cpu::is_reference_impl(alt.impl_info_str())) {
          p.weights = dnnl::memory(alt.weights_desc(), cpu::engine());
          dnnl::memory from = packed;  // a handle: execute() takes non-const memories
          dnnl::reorder(from, p.weights).execute(cpu::thread_stream(), from, p.weights);
          cpu::thread_stream().wait();
          p.pd = alt;
        }
      }
      cpu::warn_if_reference(p.pd.impl_info_str(), "convolution",
                             detail::concat(in, "->", out, " channels, ", kh, "x", kw, " kernel, ",
                                            b, "x", h, "x", w, halo ? " with halo rows" : ""));
      p.prim = dnnl::convolution_forward(p.pd);
      XDIT_DEBUG("conv ", in, "->", out, " k", kh, " on ", b, "x", h, "x", w, ": ",
                 p.pd.impl_info_str());
      return prims.emplace(key, std::move(p)).first->second;
    } catch (const dnnl::error& e) {
      cpu::rethrow_dnnl(e, "creating a convolution primitive");
    }
  }
};

Conv2d::Conv2d() = default;
Conv2d::Conv2d(Conv2d&&) noexcept = default;
Conv2d& Conv2d::operator=(Conv2d&&) noexcept = default;
Conv2d::~Conv2d() = default;

Conv2d::Conv2d(const Tensor& weight, const Tensor& bias, int64_t padding, ComputeType ct)
    : impl_(std::make_unique<Impl>()) {
  XDIT_CHECK(weight.ndim() == 4, "conv weight must be [out, in, kh, kw], got ",
             shape_str(weight.shape()));
  Impl& im = *impl_;
  im.out = weight.dim(0);
  im.in = weight.dim(1);
  im.kh = weight.dim(2);
  im.kw = weight.dim(3);
  im.pad = padding;
  im.ct = ct;
  XDIT_CHECK(bias.numel() == im.out, "conv bias has ", bias.numel(), " values, expected ", im.out);
  im.bias = bias.to_vector();
  if (on_cuda()) {
#ifdef XDIT_HAVE_CUDNN_FE
    XDIT_CHECK(im.kh == im.kw, "CUDA conv: square kernels only, got ", im.kh, "x", im.kw);
    const Tensor w = weight.to(DType::kF32);
    im.device = std::make_unique<cuda::DeviceConv>(w.data<float>(), im.bias.data(), im.in, im.out,
                                                   im.kh, im.pad, ct == ComputeType::kBF16);
    return;
#else
    XDIT_FAIL("convolutions on ", current_device().str(),
              " need cuDNN's frontend headers (scripts/install_deps.sh) at build time");
#endif
  }
  if (ct == ComputeType::kBF16 && im.kh == 3 && im.kw == 3 && im.pad == 1 &&
      cpu::Winograd3x3::usable(im.in, im.out) && winograd_enabled()) {
    const Tensor w = weight.to(DType::kF32);
    im.wino = std::make_unique<cpu::Winograd3x3>(w.data<float>(), im.in, im.out);
    XDIT_DEBUG("conv ", im.in, "->", im.out, " k3: ", im.wino->implementation());
    return;
  }
  try {
    Tensor w = weight.dtype() == DType::kF16 ? weight.to(DType::kF32) : weight;
    dnnl::memory::desc user_md({im.out, im.in, im.kh, im.kw},
                               w.dtype() == DType::kBF16 ? dt::bf16 : dt::f32, tag::oihw);
    dnnl::memory::desc any_md({im.out, im.in, im.kh, im.kw},
                              ct == ComputeType::kBF16 ? dt::bf16 : dt::f32, tag::any);
    // The layout is chosen for a representative problem and reused for all sizes.
    auto pd = im.make_pd(1, 64, 64, any_md);
    im.packed_md = pd.weights_desc();
    im.packed = dnnl::memory(im.packed_md, cpu::engine());
    dnnl::memory user(user_md, cpu::engine(), const_cast<void*>(w.raw()));
    dnnl::reorder(user, im.packed).execute(cpu::thread_stream(), user, im.packed);
    cpu::thread_stream().wait();
  } catch (const dnnl::error& e) {
    cpu::rethrow_dnnl(e, "packing a convolution weight");
  }
}

void Conv2d::forward(const float* x, int64_t b, int64_t h, int64_t w, float* y) const {
  const Impl& im = *impl_;
#ifdef XDIT_HAVE_CUDNN_FE
  if (im.device) return im.device->forward(x, false, b, h, w, y, false);
#endif
  const void* src = x;
  if (im.ct == ComputeType::kBF16)
    src = cpu::thread_bf16_copy(x, static_cast<size_t>(b * h * w * im.in));
  run(src, b, h, w, y);
}

void Conv2d::forward_bf16(const uint16_t* x, int64_t b, int64_t h, int64_t w, float* y) const {
  XDIT_CHECK(impl_->ct == ComputeType::kBF16, "conv: bf16 input to an f32 layer");
#ifdef XDIT_HAVE_CUDNN_FE
  if (impl_->device) return impl_->device->forward(x, true, b, h, w, y, false);
#endif
  run(x, b, h, w, y);
}

void Conv2d::forward_halo(const void* x, int64_t b, int64_t rows, int64_t w, float* y) const {
#ifdef XDIT_HAVE_CUDNN_FE
  if (impl_->device)
    return impl_->device->forward(x, impl_->device->bf16(), b, rows + 2 * impl_->pad, w, y, true);
#endif
  run(x, b, rows + 2 * impl_->pad, w, y, true);
}

int64_t Conv2d::halo() const {
  return impl_->pad;
}

bool Conv2d::is_bf16() const {
  return impl_->ct == ComputeType::kBF16;
}

void Conv2d::run(const void* src, int64_t b, int64_t h, int64_t w, float* y, bool halo) const {
  const Impl& im = *impl_;
  if (im.wino) {
    im.wino->forward(static_cast<const uint16_t*>(src), b, h, w, halo ? 0 : im.pad, im.bias.data(),
                     y);
    return;
  }
  const Impl::Prim& p = im.prim_for(b, h, w, halo);
  auto& e = cpu::engine();
  dnnl::memory ms(p.pd.src_desc(), e, const_cast<void*>(src));
  dnnl::memory md(p.pd.dst_desc(), e, y);
  dnnl::memory mb(p.pd.bias_desc(), e, const_cast<float*>(im.bias.data()));
  p.prim.execute(cpu::thread_stream(), {{DNNL_ARG_SRC, ms},
                                        {DNNL_ARG_WEIGHTS, p.weights ? p.weights : im.packed},
                                        {DNNL_ARG_BIAS, mb},
                                        {DNNL_ARG_DST, md},
                                        {DNNL_ARG_SCRATCHPAD, cpu::thread_scratchpad(p.pd)}});
}

std::string Conv2d::implementation(int64_t b, int64_t h, int64_t w, bool halo) const {
#ifdef XDIT_HAVE_CUDNN_FE
  if (impl_->device) return impl_->device->bf16() ? "cudnn:bf16" : "cudnn:f32";
#endif
  if (impl_->wino) return impl_->wino->implementation();
  return impl_->prim_for(b, h, w, halo).pd.impl_info_str();
}

int64_t Conv2d::in_channels() const {
  return impl_->in;
}
int64_t Conv2d::out_channels() const {
  return impl_->out;
}
int64_t Conv2d::out_size(int64_t in) const {
  return in + 2 * impl_->pad - impl_->kh + 1;
}

}  // namespace xdit::kernels
