#include <vector>

#include "core/error.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/conv.h"
#include "kernels/cuda/cudnn_plans.h"
#include "kernels/cuda/ops.h"

namespace xdit::kernels::cuda {

namespace {

enum Uid : int64_t { kX = 1, kW, kBias, kY };

// NCHW names with NHWC strides (activations), KCRS names with KRSC strides
// (the weight); `sm` > 0: validation without a device.
std::shared_ptr<fe::graph::Graph> make_graph(const ConvShape& s, int sm = 0) {
  if (s.batch < 1 || s.in < 1 || s.out < 1 || s.kernel < 1 || s.pad < 0 || s.out_height() < 1 ||
      s.out_width() < 1)
    throw Error("cuDNN convolution " + s.str() + ": no output (sizes too small for the kernel)");
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm > 0) g->set_sm_version(sm);
  const auto io = s.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::FLOAT;
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t n = s.batch, c = s.in, h = s.height, w = s.width, k = s.out, r = s.kernel;
  auto x = g->tensor(fe::graph::Tensor_attributes()
                         .set_name("x")
                         .set_uid(kX)
                         .set_dim({n, c, h, w})
                         .set_stride({h * w * c, 1, w * c, c}));
  auto wt = g->tensor(fe::graph::Tensor_attributes()
                          .set_name("w")
                          .set_uid(kW)
                          .set_dim({k, c, r, r})
                          .set_stride({r * r * c, 1, r * c, c}));
  auto conv = g->conv_fprop(x, wt,
                            fe::graph::Conv_fprop_attributes()
                                .set_name("conv")
                                .set_pre_padding({s.halo ? 0 : s.pad, s.pad})
                                .set_post_padding({s.halo ? 0 : s.pad, s.pad})
                                .set_stride({1, 1})
                                .set_dilation({1, 1}));
  auto bias = g->tensor(fe::graph::Tensor_attributes()
                            .set_name("bias")
                            .set_uid(kBias)
                            .set_dim({1, k, 1, 1})
                            .set_stride({k, 1, k, k})
                            .set_data_type(fe::DataType_t::FLOAT));
  auto y = g->pointwise(
      conv, bias,
      fe::graph::Pointwise_attributes().set_name("bias").set_mode(fe::PointwiseMode_t::ADD));
  const int64_t ho = s.out_height(), wo = s.out_width();
  y->set_output(true)
      .set_uid(kY)
      .set_dim({n, k, ho, wo})
      .set_stride({ho * wo * k, 1, wo * k, k})
      .set_data_type(fe::DataType_t::FLOAT);
  return g;
}

}  // namespace

std::string ConvShape::str() const {
  return std::string("conv ") + (bf16 ? "bf16" : "f32") + " [" + std::to_string(batch) + " x " +
         std::to_string(height) + " x " + std::to_string(width) + " x " + std::to_string(in) +
         "] k" + std::to_string(kernel) + " p" + std::to_string(pad) + (halo ? " (halo)" : "") +
         " -> " + std::to_string(out);
}

void check_conv_graph(const ConvShape& s, int sm) {
  auto g = make_graph(s, sm);
  check_cudnn(g->validate(), "graph validation", s.str());
}

struct Conv::Impl {
  CudnnPlans<ConvShape> plans;
};

Conv::Conv() : impl_(std::make_unique<Impl>()) {}

Conv::~Conv() = default;

size_t Conv::plans() const {
  return impl_->plans.size();
}

void Conv::run(const ConvShape& s, const void* x, const void* w, const float* bias, float* y,
               Stream st) {
  std::unordered_map<int64_t, void*> pack = {{kX, const_cast<void*>(x)},
                                             {kW, const_cast<void*>(w)},
                                             {kBias, const_cast<float*>(bias)},
                                             {kY, y}};
  impl_->plans.execute(
      s, [](const ConvShape& c) { return make_graph(c); }, pack, st);
}

DeviceConv::DeviceConv(const float* w_f32, const float* bias, int64_t in, int64_t out,
                       int64_t kernel, int64_t pad, bool bf16)
    : in_(in), out_(out), kernel_(kernel), pad_(pad), bf16_(bf16) {
  // [out, in, k, k] → [out, k, k, in] (KRSC), rounded once when bf16.
  const size_t n = static_cast<size_t>(out * in * kernel * kernel);
  std::vector<float> krsc(n);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t c = 0; c < in; ++c)
      for (int64_t r = 0; r < kernel * kernel; ++r)
        krsc[static_cast<size_t>((o * kernel * kernel + r) * in + c)] =
            w_f32[(o * in + c) * kernel * kernel + r];
  w_ = upload_values(krsc.data(), n, bf16_);
  bias_ = upload_values(bias, static_cast<size_t>(out), false);
}

void DeviceConv::forward(const void* x, bool x_bf16, int64_t batch, int64_t height, int64_t width,
                         float* y, bool halo, Stream st) const {
  ConvShape s;
  s.batch = batch;
  s.height = height;
  s.width = width;
  s.in = in_;
  s.out = out_;
  s.kernel = kernel_;
  s.pad = pad_;
  s.bf16 = bf16_;
  s.halo = halo;
  const void* src = x;
  if (bf16_ && !x_bf16) {
    src = bf16_rows_in(ScratchSlot::kLinearIn, static_cast<const float*>(x), in_,
                       batch * height * width, in_, st);
  } else if (!bf16_ && x_bf16) {
    throw Error("CUDA conv: bf16 input to an f32 layer (" + s.str() + ")");
  }
  device_conv().run(s, src, w_.data(), bias_.as<float>(), y, st);
}

}  // namespace xdit::kernels::cuda
