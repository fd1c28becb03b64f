#include "io/weights.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"

namespace xdit::io {

namespace fs = std::filesystem;

WeightStore::WeightStore(const std::string& folder) : folder_(folder) {
  XDIT_CHECK(fs::is_directory(folder), "model folder ", folder, " does not exist");
  // Prefer the standard single file, then a sharded index, then any single file.
  std::vector<fs::path> singles, indexes;
  for (const auto& e : fs::directory_iterator(folder)) {
    const std::string n = e.path().filename().string();
    if (n.ends_with(".safetensors.index.json"))
      indexes.push_back(e.path());
    else if (n.ends_with(".safetensors"))
      singles.push_back(e.path());
  }
  std::sort(singles.begin(), singles.end());
  std::sort(indexes.begin(), indexes.end());
  auto pick = [&](const std::vector<fs::path>& list, const char* a, const char* b) -> fs::path {
    for (const auto& p : list)
      if (p.filename() == a || p.filename() == b) return p;
    return {};
  };
  fs::path single = pick(singles, "diffusion_pytorch_model.safetensors", "model.safetensors");
  fs::path index = pick(indexes, "diffusion_pytorch_model.safetensors.index.json",
                        "model.safetensors.index.json");
  if (single.empty() && index.empty()) {
    if (!indexes.empty())
      index = indexes.front();
    else if (singles.size() == 1)
      single = singles.front();
  }
  XDIT_CHECK(!single.empty() || !index.empty(), "no safetensors weights in ", folder,
             " (expected diffusion_pytorch_model.safetensors, model.safetensors or a "
             "*.safetensors.index.json; .bin checkpoints must be converted to safetensors)");
  if (!single.empty()) {
    files_.push_back(std::make_unique<SafeTensorsFile>(single.string()));
  } else {
    // Read only when a regular file of a sane size: a FIFO would block.
    const std::string text = read_small_file(index.string(), kMaxJsonFileBytes, "sharded index");
    XDIT_CHECK(text.find('\0') == std::string::npos, "sharded index ", index.string(),
               " is not valid JSON (it holds a NUL byte)");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      XDIT_FAIL("sharded index ", index.string(), " is not valid JSON (", e.what(), ")");
    }
    XDIT_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
               "sharded index ", index.string(), " has no weight_map object");
    std::map<std::string, const SafeTensorsFile*> by_file;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      XDIT_CHECK(it.value().is_string(), "sharded index ", index.string(), ": entry '", it.key(),
                 "' does not name a file");
      const std::string shard = it.value().get<std::string>();
      XDIT_CHECK(shard.find('/') == std::string::npos, "sharded index ", index.string(),
                 " names a shard outside its folder: ", shard);
      auto f = by_file.find(shard);
      if (f == by_file.end()) {
        const fs::path sp = fs::path(folder) / shard;
        XDIT_CHECK(fs::exists(sp), "shard ", sp.string(), " named by ", index.string(),
                   " is missing");
        files_.push_back(std::make_unique<SafeTensorsFile>(sp.string()));
        f = by_file.emplace(shard, files_.back().get()).first;
      }
      XDIT_CHECK(f->second->contains(it.key()), "sharded index ", index.string(), " places '",
                 it.key(), "' in ", shard, " but that shard does not contain it");
      index_[it.key()] = f->second;
    }
    return;
  }
  for (const auto& [name, e] : files_.front()->entries()) index_[name] = files_.front().get();
}

bool WeightStore::has(const std::string& name) const {
  return index_.count(name) != 0;
}

namespace {

// Elements [begin, begin + count) along `dim` (0 or 1) of a 1-D or 2-D
// tensor in its dtype: whole rows (dim 0) as a view of its storage (a file
// mapping stays mapped while the view lives), columns copied.
Tensor slice_of(const Tensor& t, int dim, int64_t begin, int64_t count) {
  if (dim == 0) return t.rows(begin, count);
  const int64_t rows = t.dim(0), cols = t.dim(1);
  Tensor out = Tensor::empty({rows, count}, t.dtype());
  const size_t es = dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw());
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t r = 0; r < rows; ++r)  // one strided read per row
    std::memcpy(dst + static_cast<size_t>(r * count) * es,
                src + static_cast<size_t>(r * cols + begin) * es, static_cast<size_t>(count) * es);
  return out;
}

}  // namespace

Tensor WeightSource::get(const std::string& name, const Shape& expected) const {
  Tensor t = read(name, expected);
  loaded_.total += t.nbytes();
  return t;
}

std::optional<QuantizedRows> WeightSource::quantized(const std::string& name, const Shape& expected,
                                                     const Shape& share) const {
  std::optional<QuantizedRows> q = read_quantized(name, expected, share);
  if (!q) return q;
  XDIT_CHECK(expected == Shape({q->rows, q->cols}), "weight '", name, "' is stored as [", q->rows,
             ", ", q->cols, "], expected ", shape_str(expected));
  const Shape kept = share.empty() ? expected : share;
  const auto bytes = static_cast<size_t>(kept[0]) * q->row_bytes * static_cast<size_t>(kept[1]) /
                     static_cast<size_t>(q->cols);
  loaded_.total += bytes;
  if (!share.empty()) loaded_.sliced += bytes;
  return q;
}

Tensor WeightSource::get_slice(const std::string& name, const Shape& expected, int dim,
                               int64_t begin, int64_t count) const {
  XDIT_CHECK(dim >= 0 && dim < static_cast<int>(expected.size()) && expected.size() <= 2 &&
                 begin >= 0 && count >= 0 && begin + count <= expected[static_cast<size_t>(dim)],
             "weight '", name, "': slice [", begin, ", ", begin + count, ") of dimension ", dim,
             " lies outside its shape ", shape_str(expected));
  Tensor t = read_slice(name, expected, dim, begin, count);
  loaded_.total += t.nbytes();
  loaded_.sliced += t.nbytes();
  return t;
}

Tensor WeightSource::read_slice(const std::string& name, const Shape& expected, int dim,
                                int64_t begin, int64_t count) const {
  return slice_of(read(name, expected), dim, begin, count);
}

Tensor WeightStore::read(const std::string& name, const Shape& expected) const {
  auto it = index_.find(name);
  XDIT_CHECK(it != index_.end(), "weight '", name, "' is missing from ", folder_,
             " (is this the right model folder for its config?)");
  Tensor t = it->second->get(name);
  XDIT_CHECK(t.shape() == expected, "weight '", name, "' in ", folder_, " has shape ",
             shape_str(t.shape()), " but the config implies ", shape_str(expected));
  return t;
}

void WeightStore::check_shapes(const WeightSpecs& specs) const {
  for (const auto& [name, shape] : specs) {
    auto it = index_.find(name);
    XDIT_CHECK(it != index_.end(), "weight '", name, "' is missing from ", folder_,
               " (does the config.json there belong to these weights?)");
    const Shape& stored = it->second->entries().at(name).shape;
    XDIT_CHECK(stored == shape, "weight '", name, "' in ", folder_, " has shape ",
               shape_str(stored), " but config.json implies ", shape_str(shape),
               " (the config and the weights disagree)");
  }
}

std::vector<std::pair<std::string, int64_t>> WeightStore::nonfinite_tensors() const {
  std::vector<std::pair<std::string, int64_t>> bad;
  for (const auto& [name, f] : index_) {
    const std::string& dt = f->entries().at(name).dtype;
    if (dt != "F32" && dt != "F16" && dt != "BF16") continue;  // integers are always finite
    const int64_t n = count_nonfinite(f->get(name));
    if (n > 0) bad.emplace_back(name, n);
  }
  return bad;
}

size_t WeightStore::stored_bytes() const {
  size_t n = 0;
  for (const auto& [name, f] : index_) {
    const auto& e = f->entries().at(name);
    n += e.end - e.begin;
  }
  return n;
}

Shape WeightStore::shape(const std::string& name) const {
  auto it = index_.find(name);
  XDIT_CHECK(it != index_.end(), "weight '", name, "' is missing from ", folder_);
  return it->second->entries().at(name).shape;
}

int64_t WeightStore::parameter_count(const std::string& prefix) const {
  int64_t n = 0;
  for (const auto& [name, f] : index_)
    if (name.rfind(prefix, 0) == 0) n += shape_numel(f->entries().at(name).shape);
  return n;
}

std::vector<std::string> WeightStore::dtypes() const {
  std::vector<std::string> d;
  for (const auto& [name, f] : index_) {
    const std::string& t = f->entries().at(name).dtype;
    if (std::find(d.begin(), d.end(), t) == d.end()) d.push_back(t);
  }
  return d;
}

void WeightStore::drop_pages(const std::string& name) const {
  const auto it = index_.find(name);
  if (it != index_.end()) it->second->drop_pages(name);
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> v;
  for (const auto& [name, f] : index_) v.push_back(name);
  return v;
}

Tensor RandomWeights::read(const std::string& name, const Shape& expected) const {
  Tensor t = Tensor::empty(expected);
  fill(name, expected, t, 0, 0);
  return t;
}

Tensor RandomWeights::read_slice(const std::string& name, const Shape& expected, int dim,
                                 int64_t begin, int64_t count) const {
  Shape shape = expected;
  shape[static_cast<size_t>(dim)] = count;
  Tensor t = Tensor::empty(shape);
  fill(name, expected, t, dim, begin);
  return t;
}

void RandomWeights::fill(const std::string& name, const Shape& whole, Tensor& out, int dim,
                         int64_t begin) const {
  // Uniform values with standard deviation 0.02 (0.01 for vectors) from a
  // counter-based hash of the element's index in the whole tensor, so that
  // large models fill quickly and in parallel, and a slice holds the whole
  // tensor's values there. Tensors are [rows, cols] matrices here (1-D: one
  // row; more dimensions: the trailing ones flattened).
  const uint64_t key = seed_ ^ std::hash<std::string>{}(name);
  const float half_width = (whole.size() == 1 ? 0.01f : 0.02f) * 1.7320508f;
  const bool vec = whole.size() == 1;
  const int64_t n = out.numel();
  const int64_t whole_cols = vec ? shape_numel(whole) : shape_numel(whole) / whole[0];
  const int64_t cols = vec ? n : n / std::max<int64_t>(out.dim(0), 1);
  const int64_t r0 = !vec && dim == 0 ? begin : 0, c0 = vec || dim == 1 ? begin : 0;
  float* p = out.data<float>();
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = (r0 + i / cols) * whole_cols + c0 + i % cols;       // index in the whole
    uint64_t z = key + static_cast<uint64_t>(g) * 0x9e3779b97f4a7c15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = (2.0f * u - 1.0f) * half_width;
  }
}

}  // namespace xdit::io
