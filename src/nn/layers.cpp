#include "nn/layers.h"

#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>

#include "core/aligned.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "nn/block_weights.h"
#include "nn/lora_side.h"

namespace xdit::nn {

void Scratch::grow(size_t n) {
  try {
    grow_discarding(buf_, n);
  } catch (const std::bad_alloc&) {
    XDIT_FAIL("out of memory: cannot allocate ", human_size(static_cast<double>(n) * 4),
              " of activations (use a smaller size or fewer prompts)");
  } catch (const std::length_error&) {
    XDIT_FAIL("cannot allocate ", n, " floats of activations: too large");
  }
}

float* Scratch::get_device(size_t n) {
  const Device d = current_device();
  if (!device_buf_.defined() || device_buf_.device() != d ||
      device_buf_.numel() < static_cast<int64_t>(n)) {
    device_buf_ = Tensor();  // freed before the larger one is made
    device_buf_ = Tensor::empty({static_cast<int64_t>(std::max<size_t>(n, 1))}, DType::kF32, d);
  }
  return device_buf_.data<float>();
}

namespace {

thread_local AlignedVector<float>* t_staging = nullptr;  // while a LoadStaging lives

// A [rows, cols] matrix (f32 or bf16) to assemble a weight in before a
// Linear packs it.
Tensor assembly_matrix(int64_t rows, int64_t cols, DType dt = DType::kF32) {
  if (t_staging == nullptr) return Tensor::empty({rows, cols}, dt);
  grow_discarding(*t_staging, (static_cast<size_t>(rows * cols) * dtype_size(dt) + 3) / 4);
  // A keeper that frees nothing: the staging buffer outlives the view, and
  // a view with no keeper would count as undefined (numel() 0, as the CUDA
  // path's stacked().to(...) and the quantized layers read it).
  const std::shared_ptr<const void> keeper(t_staging->data(), [](const void*) {});
  return Tensor::view(keeper, t_staging->data(), {rows, cols}, dt);
}

// A layer holds its own packed copy of "<prefix>.weight" (and ".bias"): the
// pages the load touched in the file can go (WeightSource::drop_pages).
void drop_pages(const io::WeightSource& w, const std::string& prefix, bool bias) {
  w.drop_pages(prefix + ".weight");
  if (bias) w.drop_pages(prefix + ".bias");
}

}  // namespace

LoadStaging::LoadStaging() : outermost_(t_staging == nullptr) {
  if (outermost_) t_staging = new AlignedVector<float>();
}

LoadStaging::~LoadStaging() {
  if (!outermost_) return;
  delete t_staging;
  t_staging = nullptr;
}

kernels::Linear load_linear(const io::WeightSource& w, const std::string& prefix, int64_t in,
                            int64_t out, bool bias, ComputeType ct, kernels::Activation act) {
  const Tensor b = bias ? w.get(prefix + ".bias", {out}) : Tensor();
  const auto q = w.quantized(prefix + ".weight", {out, in});
  kernels::Linear l = q ? kernels::Linear({block_rows(*q, 0, out)}, b, ct, act)
                        : kernels::Linear(w.get(prefix + ".weight", {out, in}), b, ct, act);
  drop_pages(w, prefix, bias);
  LinearRegistry::note(l, {{prefix + ".weight"}, {{0, out}}, {{0, in}}, nullptr});
  return l;
}

kernels::Linear load_fused_linear(const io::WeightSource& w,
                                  const std::vector<std::string>& prefixes, int64_t in,
                                  const std::vector<int64_t>& outs, bool bias, ComputeType ct,
                                  const TensorParallel& tp, kernels::Activation act) {
  if (prefixes.size() == 1 && !tp.split())  // the stored tensor as it is
    return load_linear(w, prefixes[0], in, outs[0], bias, ct, act);
  int64_t total = 0;
  for (size_t i = 0; i < prefixes.size(); ++i)
    total += tp.part(outs[i], "output features of " + prefixes[i]);
  // This rank's rows [begin, begin + n) of a part (all of them under T = 1),
  // as stored (unsplit: a view of the file).
  const auto part = [&](const std::string& name, const Shape& whole) {
    const int64_t n = tp.part(whole[0], name);
    return tp.split() ? w.get_slice(name, whole, 0, tp.begin(whole[0]), n) : w.get(name, whole);
  };
  // Parts stored block-quantized stay so: then every part is handed over
  // as rows of blocks (float parts beside them as rows of floats).
  std::vector<std::optional<io::QuantizedRows>> quantized;
  bool any_quantized = false;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    const Shape share = tp.split() ? Shape{outs[i] / tp.size, in} : Shape{};
    quantized.push_back(w.quantized(prefixes[i] + ".weight", {outs[i], in}, share));
    any_quantized = any_quantized || quantized.back().has_value();
  }
  std::vector<Tensor> parts;
  std::vector<kernels::BlockRows> blocks;
  Tensor b = bias ? Tensor::empty({total}) : Tensor();
  int64_t row = 0;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    if (const auto& q = quantized[i]) {
      const int64_t n = tp.part(outs[i], prefixes[i] + ".weight");
      blocks.push_back(block_rows(*q, tp.split() ? tp.begin(outs[i]) : 0, n));
      parts.emplace_back();
    } else {
      parts.push_back(part(prefixes[i] + ".weight", {outs[i], in}));
      if (any_quantized) blocks.push_back(float_rows(parts.back()));
    }
    if (bias) {
      const Tensor tb = part(prefixes[i] + ".bias", {outs[i]});
      convert_to_f32(tb.raw(), tb.dtype(), b.data<float>() + row, static_cast<size_t>(tb.numel()));
    }
    row += blocks.empty() ? parts.back().dim(0) : blocks.back().rows;
  }
  // Where the layer cannot pack each part from the file (kernels::Linear),
  // it packs them stacked in the staging matrix: in bf16 when the first part
  // is stored so (no round trip through f32), else in f32.
  const auto stacked = [&] {
    const DType dt = parts[0].dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32;
    Tensor weight = assembly_matrix(total, in, dt);
    char* dst = static_cast<char*>(weight.raw());
    for (const Tensor& t : parts) {
      const size_t n = static_cast<size_t>(t.numel());
      if (dt == DType::kF32)
        convert_to_f32(t.raw(), t.dtype(), reinterpret_cast<float*>(dst), n);
      else if (t.dtype() == DType::kBF16)
        std::memcpy(dst, t.raw(), n * 2);
      else  // a part stored otherwise than the first
        convert_from_f32(t.to(DType::kF32).data<float>(), dst, DType::kBF16, n);
      dst += n * dtype_size(dt);
    }
    return weight;
  };
  kernels::Linear l = any_quantized ? kernels::Linear(blocks, b, ct, act)
                                    : kernels::Linear(parts, b, ct, act, stacked);
  for (const std::string& prefix : prefixes) drop_pages(w, prefix, bias);
  LinearOrigin origin;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    origin.weights.push_back(prefixes[i] + ".weight");
    origin.rows.emplace_back(tp.split() ? tp.begin(outs[i]) : 0,
                             any_quantized ? blocks[i].rows : parts[i].dim(0));
  }
  origin.cols = {{0, in}};
  LinearRegistry::note(l, std::move(origin));
  return l;
}

kernels::Linear load_row_linear(const io::WeightSource& w, const std::string& prefix,
                                const std::vector<int64_t>& ins, int64_t out, bool bias,
                                ComputeType ct, const TensorParallel& tp, int only) {
  int64_t whole = 0;
  for (int64_t n : ins) whole += n;
  const std::string wn = prefix + ".weight", bn = prefix + ".bias";
  const Shape shape{out, whole};
  if (!tp.split() && only < 0 && ins.size() == 1)
    return load_linear(w, prefix, whole, out, bias, ct);
  // This rank's columns of each part (or of part `only`), side by side.
  const auto mine = [&](size_t i) { return only < 0 || static_cast<int>(i) == only; };
  const bool add_bias = bias && tp.rank == 0;
  int64_t share_cols = 0;
  for (size_t i = 0; i < ins.size(); ++i)
    if (mine(i)) share_cols += ins[i] / tp.size;
  const Shape share = tp.split() || only >= 0 ? Shape{out, share_cols} : Shape{};
  if (const auto q = w.quantized(wn, shape, share)) {  // its blocks' share
    LinearOrigin origin{{wn}, {{0, out}}, {}, nullptr};
    int64_t part_begin = 0;
    for (size_t i = 0; i < ins.size(); ++i) {
      if (mine(i))
        origin.cols.emplace_back(part_begin + tp.begin(ins[i]),
                                 tp.part(ins[i], "input features of " + prefix));
      part_begin += ins[i];
    }
    std::vector<uint8_t> bytes;
    kernels::Linear l({column_shares(*q, origin.cols, wn, tp.size, bytes)},
                      add_bias ? w.get_slice(bn, {out}, 0, 0, out) : Tensor(), ct,
                      kernels::Activation::kNone);
    drop_pages(w, prefix, add_bias);
    LinearRegistry::note(l, std::move(origin));
    return l;
  }
  std::vector<Tensor> slices;
  LinearOrigin origin{{wn}, {{0, out}}, {}, nullptr};
  int64_t cols = 0, part_begin = 0;
  bool all_bf16 = true;
  for (size_t i = 0; i < ins.size(); ++i) {
    const int64_t n = ins[i];
    if (mine(i)) {
      const int64_t share = tp.part(n, "input features of " + prefix);
      slices.push_back(w.get_slice(wn, shape, 1, part_begin + tp.begin(n), share));
      origin.cols.emplace_back(part_begin + tp.begin(n), share);
      all_bf16 = all_bf16 && slices.back().dtype() == DType::kBF16;
      cols += share;
    }
    part_begin += n;
  }
  // One slice is the weight as it is; several are put side by side in the
  // staging matrix, in bf16 when all are stored so (no f32 round trip).
  Tensor weight = slices.size() == 1
                      ? slices[0]
                      : assembly_matrix(out, cols, all_bf16 ? DType::kBF16 : DType::kF32);
  int64_t c = 0;
  for (size_t i = 0; slices.size() > 1 && i < slices.size(); ++i) {
    const Tensor& slice = slices[i];
    const int64_t share = slice.dim(1);
    const size_t es = dtype_size(slice.dtype());
    for (int64_t r = 0; r < out; ++r) {
      const char* src = static_cast<const char*>(slice.raw()) + static_cast<size_t>(r * share) * es;
      if (all_bf16)
        std::memcpy(weight.data<uint16_t>() + r * cols + c, src, static_cast<size_t>(share) * 2);
      else
        convert_to_f32(src, slice.dtype(), weight.data<float>() + r * cols + c,
                       static_cast<size_t>(share));
    }
    c += share;
  }
  // --weights_dtype q8_0 quantizes this share: its blocks are the whole
  // weight's (the serial layer's) only where it is whole blocks of them,
  // as a GGUF's shares must be (column_shares); a weight that is not whole
  // blocks is kept as computed, as the serial layer keeps it.
  std::optional<kernels::WeightFormatScope> as_computed;
  if (kernels::WeightFormatScope::current() == kernels::WeightFormat::kQ8_0) {
    if (whole % 32 != 0) as_computed.emplace(kernels::WeightFormat::kCompute);
    for (const auto& [begin, count] : origin.cols)
      XDIT_CHECK(!tp.split() || whole % 32 != 0 || (begin % 32 == 0 && count % 32 == 0),
                 "tensor parallel degree ", tp.size, " splits ", wn, " at input ", begin,
                 " (a share of ", count,
                 " inputs), which cuts its q8_0 blocks of 32 values; choose a degree whose "
                 "shares are whole blocks, or another --weights_dtype");
  }
  kernels::Linear l(weight, add_bias ? w.get_slice(bn, {out}, 0, 0, out) : Tensor(), ct);
  drop_pages(w, prefix, add_bias);
  LinearRegistry::note(l, std::move(origin));
  return l;
}

RowParallelLinear::RowParallelLinear(const io::WeightSource& w, const std::string& prefix,
                                     int64_t in, int64_t out, bool bias, ComputeType ct,
                                     const TensorParallel& tp)
    : linear_(load_row_linear(w, prefix, {in}, out, bias, ct, tp)), tp_(tp) {}

void RowParallelLinear::forward_add(const float* x, int64_t m, float* y, Scratch& part) const {
  const int64_t n = m * linear_.out_features();
  if (!tp_.split()) {
    linear_.forward(x, m, y, /*accumulate=*/true);
    return;
  }
  float* p = part.get(static_cast<size_t>(n));
  linear_.forward(x, m, p);
  tp_.all_reduce(p, n);
  kernels::gated_residual_add(y, p, 1, 1, n, nullptr, 0);
}

Tensor load_param(const io::WeightSource& w, const std::string& name, const Shape& shape) {
  Tensor p = w.get(name, shape).to(DType::kF32).to_device(current_device());
  w.drop_pages(name);
  return p;
}

MlpSilu::MlpSilu(const io::WeightSource& w, const std::string& prefix, int64_t in, int64_t hidden,
                 int64_t out, ComputeType ct)
    : l1_(load_linear(w, prefix + ".linear_1", in, hidden, true, ct)),
      l2_(load_linear(w, prefix + ".linear_2", hidden, out, true, ct)) {}

void MlpSilu::forward(const float* x, int64_t m, float* y) const {
  Tensor h = Tensor::empty({m, l1_.out_features()}, DType::kF32, current_device());
  l1_.forward(x, m, h.data<float>());
  kernels::silu(h.data<float>(), h.data<float>(), h.numel());
  l2_.forward(h.data<float>(), m, y);
}

void HostRows::upload() {
  if (!host_.empty()) kernels::copy_from_host(dst_, host_.data(), n_ * 4);
}

const void* on_current_device(const void* host, size_t bytes, Tensor& keep) {
  if (bytes == 0) return nullptr;
  const Device d = current_device();
  if (!d.cuda()) return host;
  if (!keep.defined() || keep.device() != d || keep.nbytes() < bytes) {
    keep = Tensor();
    keep = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::kF32, d);
  }
  kernels::copy_from_host(keep.raw(), host, bytes);
  return keep.raw();
}

FeedForwardGelu::FeedForwardGelu(const io::WeightSource& w, const std::string& prefix, int64_t dim,
                                 int64_t inner, ComputeType ct, const TensorParallel& tp)
    : fc1_(load_fused_linear(w, {prefix + ".net.0.proj"}, dim, {inner}, true, ct, tp,
                             kernels::Activation::kGeluTanh)),
      fc2_(load_row_linear(w, prefix + ".net.2", {inner}, dim, true, ct, tp)),
      tp_(tp) {}

void FeedForwardGelu::forward(const float* x, int64_t m, float* y, float* hidden) const {
  // GELU(tanh) is fused into fc1. In bf16 the hidden activations stay bf16
  // (the largest activation of a block: no f32 copy written, reread and
  // converted for fc2); `hidden` has room for either.
  if (fc1_.is_bf16() && fc2_.is_bf16()) {
    uint16_t* hb = reinterpret_cast<uint16_t*>(hidden);
    fc1_.forward_to_bf16(x, m, hb);
    fc2_.forward_bf16(hb, m, y);
  } else {
    fc1_.forward(x, m, hidden);
    fc2_.forward(hidden, m, y);
  }
  tp_.all_reduce(y, m * fc2_.out_features());
}

void FeedForwardGelu::forward(const uint16_t* x, int64_t m, float* y, float* hidden) const {
  XDIT_CHECK(bf16_input(), "feed-forward: a bf16 input needs bf16 layers");
  uint16_t* hb = reinterpret_cast<uint16_t*>(hidden);
  fc1_.forward_bf16(x, m, hb);
  fc2_.forward_bf16(hb, m, y);
  tp_.all_reduce(y, m * fc2_.out_features());
}

FeedForwardSwiGlu::FeedForwardSwiGlu(const io::WeightSource& w, const std::string& gate,
                                     const std::string& up, const std::string& down, int64_t dim,
                                     int64_t inner, ComputeType ct, const TensorParallel& tp)
    : gate_up_(load_fused_linear(w, {gate, up}, dim, {inner, inner}, false, ct, tp)),
      down_(load_row_linear(w, down, {inner}, dim, false, ct, tp)),
      tp_(tp) {}

void FeedForwardSwiGlu::forward(const float* x, int64_t m, float* y, float* hidden) const {
  const int64_t n = inner();
  float* fused = hidden + m * n;  // [gate | up] rows after the gated product's room
  gate_up_.forward(x, m, fused);
  kernels::silu_gate(fused, hidden, m, n);
  down_.forward(hidden, m, y);
  tp_.all_reduce(y, m * down_.out_features());
}

AdaLayerNormContinuous::AdaLayerNormContinuous(const io::WeightSource& w, const std::string& prefix,
                                               int64_t dim, ComputeType ct)
    : linear_(load_linear(w, prefix + ".linear", dim, 2 * dim, true, ct)), dim_(dim) {}

void AdaLayerNormContinuous::forward(const float* cond, int64_t batch, const float* x,
                                     int64_t stride, int64_t offset, int64_t tokens, float* y,
                                     float* mod) const {
  constexpr float kEps = 1e-6f;
  const int64_t D = dim_;
  linear_.forward(cond, batch, mod);
  for (int64_t b = 0; b < batch; ++b)  // the projection is [scale | shift]
    kernels::layer_norm_modulate(x + (b * stride + offset) * D, y + b * tokens * D, 1, tokens, D,
                                 kEps, mod + b * 2 * D + D, mod + b * 2 * D, 0);
}

}  // namespace xdit::nn
