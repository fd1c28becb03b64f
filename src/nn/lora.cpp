#include "nn/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>

#include <sys/stat.h>

#include "core/device.h"
#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "kernels/linear.h"
#include "nn/lora_formats.h"

namespace xdit::nn {

namespace {

// alpha_pattern / lora_alpha of the file's lora_adapter_metadata for a
// component's module; none where the file has neither.
std::optional<double> metadata_alpha(const io::Json& meta, const std::string& component,
                                     const std::string& module) {
  if (meta.is_null()) return std::nullopt;
  const auto pattern = meta.find(component + ".alpha_pattern");
  if (pattern != meta.end() && pattern->is_object())
    for (const auto& [key, value] : pattern->items())
      if (module == key || module.ends_with("." + key)) return value.get<double>();
  const auto alpha = meta.find(component + ".lora_alpha");
  if (alpha != meta.end() && alpha->is_number()) return alpha->get<double>();
  return std::nullopt;
}

}  // namespace

namespace {

io::SafeTensorsFile open_lora(const std::string& path, size_t max_bytes) {
  io::check_side_file(path, max_bytes, "LoRA (--max_lora_bytes)");
  return io::SafeTensorsFile(path);
}

}  // namespace

LoraFile::LoraFile(const std::string& path, size_t max_bytes)
    : LoraFile(open_lora(path, max_bytes)) {}

LoraFile::LoraFile(io::SafeTensorsFile file) : file_(std::move(file)) {
  const std::string& path = file_.path();
  const auto fail_in = [&](const auto&... parts) {
    std::ostringstream o;
    (o << ... << parts);
    XDIT_FAIL("LoRA ", path, ": ", o.str());
  };
  io::Json meta;
  if (auto m = file_.metadata().find("lora_adapter_metadata"); m != file_.metadata().end())
    meta = io::parse_json_text(m->second, path + "'s lora_adapter_metadata");
  const LoraLayout layout = lora_layout(file_.entries(), path);
  format_ = layout.format;
  // Each tensor scanned once (a fused B serves several modules): NaN / Inf
  // refused; whether it is all zeros.
  std::map<std::string, bool> zero;
  const auto scan = [&](const std::string& t) {
    if (const auto it = zero.find(t); it != zero.end()) return it->second;
    bool all_zero = true;
    for (const float x : file_.get(t).to_vector()) {
      if (!std::isfinite(x)) fail_in(t, " holds NaN or Inf");
      all_zero = all_zero && x == 0;
    }
    return zero[t] = all_zero;
  };
  for (const LoraKey& k : layout.keys) {
    const auto up = file_.entries().find(k.up);
    if (up == file_.entries().end()) fail_in("'", k.down, "' has no ", k.up);
    const Shape &a = file_.entries().at(k.down).shape, &b = up->second.shape;
    if (a.size() != 2 || b.size() != 2)
      fail_in(k.down, ": A ", shape_str(a), " and B ", shape_str(b), " must be matrices");
    if (a[0] != b[1])
      fail_in(k.down, ": rank mismatch, A ", shape_str(a), " against B ", shape_str(b));
    LoraModule m;
    m.down = k.down;
    m.up = k.up;
    m.swap_halves = k.swap_halves;
    m.rank = a[0];
    m.in = a[1];
    m.out = b[0];
    if (!k.parts.empty()) {  // a fused projection: this part's rows of B
      int64_t total = 0, before = 0;
      for (size_t i = 0; i < k.parts.size(); ++i) {
        total += k.parts[i];
        if (static_cast<int>(i) < k.part) before += k.parts[i];
      }
      if (b[0] % total != 0)
        fail_in(k.up, " has ", b[0], " rows, not a multiple of the ", total,
                " parts of the fused projection it adapts");
      m.up_begin = b[0] / total * before;
      m.out = b[0] / total * k.parts[k.part];
    }
    if (m.swap_halves && m.out % 2 != 0) fail_in(k.up, " has an odd row count ", m.out);
    // alpha / rank scales B·A: the file's alpha, else the metadata's (PEFT),
    // else rank (a factor of 1). An alpha of 0 is kept: the adapter then
    // changes nothing, as in diffusers and sd-scripts.
    m.alpha = static_cast<double>(m.rank);
    if (!k.alpha.empty() && k.alpha_rule != LoraAlpha::kRank) {
      const std::vector<float> v = file_.get(k.alpha).to_vector();
      if (v.size() != 1) fail_in(k.alpha, " must hold one value");
      m.alpha = v[0];
    } else if (k.alpha_rule == LoraAlpha::kKeyMetadataOrRank) {
      m.alpha = metadata_alpha(meta, k.component, k.module).value_or(m.alpha);
    }
    if (!std::isfinite(m.alpha) || m.rank < 1)
      fail_in(k.down, ": alpha ", m.alpha, ", rank ", m.rank);
    const bool zero_a = scan(m.down), zero_b = scan(m.up);
    // All-zero A or B, or alpha 0: changes nothing (matched, then left out).
    m.zero = zero_a || zero_b || m.alpha == 0;
    components_[k.component][k.module] = m;
  }
  // Listed, not read: refused or skipped by name whatever their values (a
  // header may declare gigabytes of them).
  unread_ = layout.unread;
}

const std::map<std::string, LoraModule>& LoraFile::modules(const std::string& component) const {
  static const std::map<std::string, LoraModule> none;
  const auto it = components_.find(component);
  return it == components_.end() ? none : it->second;
}

std::vector<std::string> LoraFile::components() const {
  std::vector<std::string> out;
  for (const auto& [name, modules] : components_) out.push_back(name);
  return out;
}

Tensor LoraFile::down(const LoraModule& m) const {
  return file_.get(m.down).as(DType::kF32, Device{});
}

Tensor LoraFile::up(const LoraModule& m) const {
  const Tensor b = file_.get(m.up).as(DType::kF32, Device{});
  if (m.up_begin == 0 && m.out == b.dim(0) && !m.swap_halves) return b;
  Tensor rows = Tensor::empty({m.out, m.rank});
  const int64_t half = m.out / 2;
  for (int64_t i = 0; i < m.out; ++i) {
    const int64_t from = m.up_begin + (m.swap_halves ? (i + half) % m.out : i);
    std::memcpy(rows.data<float>() + i * m.rank, b.data<float>() + from * m.rank,
                sizeof(float) * m.rank);
  }
  return rows;
}

namespace {

// A file's identity: device, inode, size and modification time ("" when
// it cannot be stat'ed: the read then says why).
std::string file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return detail::concat(st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".",
                        st.st_mtim.tv_nsec);
}

}  // namespace

std::shared_ptr<const LoraFile> LoraFileCache::get(const std::string& path) {
  const std::string stamp = file_stamp(path);
  auto it = entries_.find(path);
  if (it == entries_.end() || stamp.empty() || it->second.stamp != stamp) {
    if (it != entries_.end()) entries_.erase(it);  // changed: read again
    // Whole into memory: a LoRA is small beside the model it adapts, and
    // its size is bounded before anything is read.
    io::check_side_file(path, max_bytes_, "LoRA (--max_lora_bytes)");
    auto bytes = std::make_shared<std::string>(io::read_small_file(path, max_bytes_, "LoRA"));
    const size_t size = bytes->size();
    const std::shared_ptr<const void> data(bytes, bytes->data());
    auto file = std::make_shared<const LoraFile>(io::SafeTensorsFile(data, size, path));
    it = entries_.emplace(path, Entry{stamp, std::move(file), 0}).first;
  }
  it->second.used = ++clock_;
  std::shared_ptr<const LoraFile> file = it->second.file;
  while (entries_.size() > capacity_) {  // the least recently used goes
    auto oldest = entries_.begin();
    for (auto e = entries_.begin(); e != entries_.end(); ++e)
      if (e->second.used < oldest->second.used) oldest = e;
    entries_.erase(oldest);
  }
  return file;
}

std::string lora_weight_name(const std::string& module,
                             const std::function<bool(const std::string&)>& has) {
  const std::string weight = module + ".weight", tm = "text_model.";
  if (has(weight)) return weight;
  if (has(tm + weight)) return tm + weight;
  if (weight.rfind(tm, 0) == 0 && has(weight.substr(tm.size()))) return weight.substr(tm.size());
  return weight;
}

std::vector<LoraAdapter> match_lora_adapters(const std::vector<LoraUse>& loras,
                                             const std::string& component,
                                             const WeightShapes& shape_of, bool skip_missing,
                                             int64_t* skipped) {
  std::vector<LoraAdapter> out;
  std::vector<std::string> unmatched;
  for (const LoraUse& use : loras) {
    XDIT_CHECK(std::isfinite(use.scale), "LoRA ", use.file->path(), ": the scale ", use.scale,
               " is not a finite number");
    for (const auto& [module, m] : use.file->modules(component)) {
      const std::string weight =
          lora_weight_name(module, [&](const std::string& n) { return shape_of(n).has_value(); });
      const std::optional<Shape> w = shape_of(weight);
      if (!w) {
        if (use.ignore_unmatched && skipped != nullptr) ++*skipped;
        if (!use.ignore_unmatched) unmatched.push_back(module);
        continue;
      }
      if (m.zero) continue;  // matched; changes nothing
      XDIT_CHECK(*w == Shape({m.out, m.in}), "LoRA ", use.file->path(), ": ", module, " is [",
                 m.out, ", ", m.in, "] but the model's ", weight, " is ", shape_str(*w),
                 " (a LoRA for another model?)");
      out.push_back({use.file.get(), &m, weight, use.scale * m.alpha / m.rank});
    }
  }
  if (skipped != nullptr && skip_missing) *skipped += static_cast<int64_t>(unmatched.size());
  if (!unmatched.empty() && !skip_missing) {
    std::ostringstream o;
    for (size_t i = 0; i < unmatched.size() && i < 4; ++i) o << (i ? ", " : "") << unmatched[i];
    if (unmatched.size() > 4) o << " and " << unmatched.size() - 4 << " more";
    XDIT_FAIL("LoRA: ", unmatched.size(), " adapted modules match nothing in the model's ",
              component, ": ", o.str(), " (--lora_ignore_unmatched skips them)");
  }
  return out;
}

LoraWeights::LoraWeights(const io::WeightStore& base, std::vector<LoraUse> loras,
                         const std::string& component, bool ignore_unmatched, DType merged)
    : LoraWeights(
          base,
          [&base](const std::string& n) -> std::optional<Shape> {
            if (!base.has(n)) return std::nullopt;
            return base.shape(n);
          },
          std::move(loras), component, ignore_unmatched, merged) {}

LoraWeights::LoraWeights(const io::WeightSource& base, const WeightShapes& shape_of,
                         std::vector<LoraUse> loras, const std::string& component,
                         bool ignore_unmatched, DType merged)
    : base_(base), merged_(merged), loras_(std::move(loras)) {
  for (LoraAdapter& a :
       match_lora_adapters(loras_, component, shape_of, ignore_unmatched, &skipped_))
    adapters_[a.weight].push_back(std::move(a));
}

Tensor LoraWeights::merged(const std::string& name, const Tensor& w, int64_t r0, int64_t c0) const {
  const DeviceScope host(Device{});
  const Tensor base = w.to_device(Device{});
  const int64_t rows = base.dim(0), cols = base.dim(1);
  // Per adapter: factor · B[r0 …, :] as the rows of x, A[:, c0 …]ᵀ as the
  // weight [cols, r] of a thin f32 layer: x · (Aᵀ)ᵀ is added to the rows.
  struct Delta {
    Tensor x;
    kernels::Linear at;
    int64_t r;
  };
  std::vector<Delta> deltas;
  // The deltas' products in f32, whatever the layers being loaded keep
  // (--weights_dtype: the merged weight is quantized by its layer, once).
  const kernels::WeightFormatScope exact(kernels::WeightFormat::kCompute);
  for (const LoraAdapter& a : adapters_.at(name)) {
    const int64_t r = a.module->rank;
    const Tensor B = a.file->up(*a.module), A = a.file->down(*a.module);
    Tensor x = Tensor::empty({rows, r});
    for (int64_t i = 0; i < rows * r; ++i)
      x.data<float>()[i] = static_cast<float>(a.factor * B.data<float>()[r0 * r + i]);
    Tensor at = Tensor::empty({cols, r});
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t k = 0; k < r; ++k)
        at.data<float>()[j * r + k] = A.data<float>()[k * a.module->in + c0 + j];
    deltas.push_back({x, kernels::Linear(at, Tensor(), kernels::ComputeType::kF32), r});
  }
  // A band of rows in f32 (the output's own rows when it is f32), rounded
  // once into the output.
  Tensor out = Tensor::empty({rows, cols}, merged_);
  const bool f32 = merged_ == DType::kF32;
  constexpr int64_t kBand = 64;
  Tensor band = f32 ? Tensor() : Tensor::empty({std::min(kBand, rows), cols});
  const size_t in_size = dtype_size(base.dtype()), out_size = dtype_size(merged_);
  for (int64_t b0 = 0; b0 < rows; b0 += kBand) {
    const int64_t nb = std::min(kBand, rows - b0);
    const auto n = static_cast<size_t>(nb * cols);
    float* f = f32 ? out.data<float>() + b0 * cols : band.data<float>();
    convert_to_f32(static_cast<const char*>(base.raw()) + b0 * cols * in_size, base.dtype(), f, n);
    for (const Delta& d : deltas)
      d.at.forward(d.x.data<float>() + b0 * d.r, nb, f, /*accumulate=*/true);
    if (!f32) convert_from_f32(f, static_cast<char*>(out.raw()) + b0 * cols * out_size, merged_, n);
  }
  return out;
}

Tensor LoraWeights::read(const std::string& name, const Shape& expected) const {
  if (adapters_.count(name) == 0) return base_.get(name, expected);
  return merged(name, base_.get(name, expected), 0, 0);
}

Tensor LoraWeights::read_slice(const std::string& name, const Shape& expected, int dim,
                               int64_t begin, int64_t count) const {
  if (adapters_.count(name) == 0) return base_.get_slice(name, expected, dim, begin, count);
  return merged(name, base_.get_slice(name, expected, dim, begin, count), dim == 0 ? begin : 0,
                dim == 1 ? begin : 0);
}

std::optional<io::QuantizedRows> LoraWeights::read_quantized(const std::string& name,
                                                             const Shape& expected,
                                                             const Shape& share) const {
  if (adapters_.count(name) != 0) return std::nullopt;
  return base_.quantized(name, expected, share);
}

}  // namespace xdit::nn
