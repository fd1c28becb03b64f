#include "io/gguf.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "io/gguf_quants.h"
#include "io/safetensors.h"

namespace xdit::io {

namespace {

struct TypeInfo {
  const char* name;
  int64_t values, bytes;  // per block
};

const TypeInfo* type_info(uint32_t t) {
  static const std::map<uint32_t, TypeInfo> kTypes = {
      {0, {"F32", 1, 4}},       {1, {"F16", 1, 2}},       {2, {"Q4_0", 32, 18}},
      {3, {"Q4_1", 32, 20}},    {6, {"Q5_0", 32, 22}},    {7, {"Q5_1", 32, 24}},
      {8, {"Q8_0", 32, 34}},    {12, {"Q4_K", 256, 144}}, {13, {"Q5_K", 256, 176}},
      {14, {"Q6_K", 256, 210}}, {30, {"BF16", 1, 2}}};
  const auto it = kTypes.find(t);
  return it == kTypes.end() ? nullptr : &it->second;
}

// Reads the file front to back; every read checked against its end.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const auto n = get<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + at_), static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return s;
  }
  // A count of items of at least `least` bytes each that the rest can hold.
  uint64_t count(const char* what, size_t least) {
    const auto n = get<uint64_t>(what);
    XDIT_CHECK(n <= (size_ - at_) / least, "GGUF file ", path_, " is malformed: ", what, " ", n,
               " is more than its ", size_, " bytes can hold");
    return n;
  }
  size_t at() const { return at_; }

 private:
  void need(uint64_t n, const char* what) const {
    XDIT_CHECK(n <= size_ - at_, "GGUF file ", path_, " is truncated: its ", what, " at byte ", at_,
               " runs past the end (", size_, " bytes)");
  }
  const uint8_t* data_;
  size_t size_, at_ = 0;
  const std::string& path_;
};

enum ValueType : uint32_t {
  kU8 = 0,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kF32,
  kBool,
  kString,
  kArray,
  kU64,
  kI64,
  kF64
};

// One scalar of `type` as a number (an integer, or a float as double).
std::variant<int64_t, uint64_t, double, bool> scalar(Cursor& c, uint32_t type, const char* what,
                                                     const std::string& path) {
  switch (type) {
    case kU8:
      return static_cast<int64_t>(c.get<uint8_t>(what));
    case kI8:
      return static_cast<int64_t>(c.get<int8_t>(what));
    case kU16:
      return static_cast<int64_t>(c.get<uint16_t>(what));
    case kI16:
      return static_cast<int64_t>(c.get<int16_t>(what));
    case kU32:
      return static_cast<int64_t>(c.get<uint32_t>(what));
    case kI32:
      return static_cast<int64_t>(c.get<int32_t>(what));
    case kF32:
      return static_cast<double>(c.get<float>(what));
    case kBool:
      return c.get<uint8_t>(what) != 0;
    case kU64:
      return c.get<uint64_t>(what);
    case kI64:
      return c.get<int64_t>(what);
    case kF64:
      return c.get<double>(what);
    default:
      break;
  }
  XDIT_FAIL("GGUF file ", path, " is malformed: ", what, " has the unknown value type ", type);
}

size_t scalar_bytes(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    default:
      return 8;
  }
}

GgufValue value(Cursor& c, uint32_t type, const char* what, const std::string& path) {
  if (type == kString) return c.string(what);
  if (type != kArray) {
    const auto v = scalar(c, type, what, path);
    return std::visit([](auto x) -> GgufValue { return x; }, v);
  }
  const auto of = c.get<uint32_t>(what);
  if (of == kString) {
    std::vector<std::string> out(static_cast<size_t>(c.count(what, 8)));
    for (std::string& s : out) s = c.string(what);
    return out;
  }
  XDIT_CHECK(of != kArray, "GGUF file ", path, " is malformed: ", what, " is an array of arrays");
  const uint64_t n = c.count(what, scalar_bytes(of));
  std::vector<int64_t> ints;
  std::vector<double> reals;
  for (uint64_t i = 0; i < n; ++i) {
    const auto v = scalar(c, of, what, path);
    if (const double* d = std::get_if<double>(&v))
      reals.push_back(*d);
    else if (const bool* b = std::get_if<bool>(&v))
      ints.push_back(*b ? 1 : 0);
    else if (const uint64_t* u = std::get_if<uint64_t>(&v))
      ints.push_back(static_cast<int64_t>(*u));
    else
      ints.push_back(std::get<int64_t>(v));
  }
  if (of == kF32 || of == kF64) return reals;
  return ints;
}

}  // namespace

const char* ggml_type_name(GgmlType t) {
  const TypeInfo* i = type_info(static_cast<uint32_t>(t));
  return i ? i->name : "?";
}

int64_t ggml_block_values(GgmlType t) {
  return type_info(static_cast<uint32_t>(t))->values;
}

int64_t ggml_block_bytes(GgmlType t) {
  return type_info(static_cast<uint32_t>(t))->bytes;
}

int64_t GgufTensor::rows() const {
  return shape_numel(shape) / row_values();
}

GgufFile::GgufFile(const std::string& path) : path_(path) {
  MappedFile m = map_file(path, "GGUF file");
  map_ = std::move(m.data);
  size_ = m.size;
  mapped_ = true;
  parse();
}

void GgufFile::drop_pages(const GgufTensor& t, size_t from, size_t bytes) const {
  if (!mapped_) return;
  const size_t begin = offset_of(t) + std::min(from, t.bytes);
  drop_mapped_pages(map_.get(), begin, begin + std::min(bytes, t.bytes - std::min(from, t.bytes)));
}

GgufFile::GgufFile(std::shared_ptr<const void> data, size_t size, std::string name)
    : path_(std::move(name)), map_(std::move(data)), size_(size) {
  parse();
}

void GgufFile::parse() {
  const auto* bytes = static_cast<const uint8_t*>(map_.get());
  Cursor c(bytes, size_, path_);
  const auto magic = c.get<uint32_t>("magic");
  XDIT_CHECK(std::memcmp(&magic, "GGUF", 4) == 0, "GGUF file ", path_,
             " does not start with the GGUF magic (is it a GGUF file?)");
  version_ = c.get<uint32_t>("version");
  XDIT_CHECK(version_ == 2 || version_ == 3, "GGUF file ", path_, " has version ", version_,
             "; xdit reads versions 2 and 3");
  // At least a name length, a dimension count, a type and an offset each.
  const uint64_t n_tensors = c.count("tensor count", 8 + 4 + 4 + 8);
  const uint64_t n_kv = c.count("metadata count", 8 + 4 + 1);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("metadata key");
    const auto type = c.get<uint32_t>("metadata type");
    metadata_[key] = value(c, type, "metadata value", path_);
  }
  uint64_t alignment = 32;
  if (const auto a = metadata_.find("general.alignment"); a != metadata_.end()) {
    const int64_t* v = std::get_if<int64_t>(&a->second);
    XDIT_CHECK(v != nullptr && *v > 0 && (*v & (*v - 1)) == 0, "GGUF file ", path_,
               " is malformed: general.alignment must be a power of two");
    alignment = static_cast<uint64_t>(*v);
  }
  struct Pending {
    std::string name;
    GgufTensor t;
    uint64_t offset;
  };
  std::vector<Pending> pending;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Pending p;
    p.name = c.string("tensor name");
    XDIT_CHECK(!p.name.empty() && p.name.size() <= 256, "GGUF file ", path_,
               " is malformed: tensor ", i, "'s name is ", p.name.size(), " bytes");
    const auto n_dims = c.get<uint32_t>("tensor dimensions");
    // ggml itself holds at most 4; the community's Wan files store the 3-D
    // patch convolution's weight with its 5 (ComfyUI-GGUF and gguf-py read them).
    XDIT_CHECK(n_dims >= 1 && n_dims <= 5, "GGUF file ", path_, " is malformed: ", p.name, " has ",
               n_dims, " dimensions");
    Shape dims(n_dims);
    for (auto& d : dims) {
      const auto v = c.get<uint64_t>("tensor dimension");
      XDIT_CHECK(v >= 1 && v <= (uint64_t{1} << 40), "GGUF file ", path_, " is malformed: ", p.name,
                 " has a dimension of ", v);
      d = static_cast<int64_t>(v);
    }
    p.t.shape.assign(dims.rbegin(), dims.rend());  // torch's order
    const auto type = c.get<uint32_t>("tensor type");
    const TypeInfo* info = type_info(type);
    XDIT_CHECK(info != nullptr, "GGUF file ", path_, ": ", p.name, " has the ggml type ", type,
               ", which xdit does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, "
               "Q5_K, Q6_K)");
    p.t.type = static_cast<GgmlType>(type);
    XDIT_CHECK(dims[0] % info->values == 0, "GGUF file ", path_, " is malformed: ", p.name,
               "'s rows of ", dims[0], " values are not whole ", info->name, " blocks of ",
               info->values);
    int64_t numel = 1;
    for (int64_t d : dims) {
      XDIT_CHECK(numel <= (int64_t{1} << 40) / d, "GGUF file ", path_, " is malformed: ", p.name,
                 " is too large");
      numel *= d;
    }
    p.t.bytes = static_cast<size_t>(numel / info->values * info->bytes);
    p.offset = c.get<uint64_t>("tensor offset");
    XDIT_CHECK(p.offset % alignment == 0, "GGUF file ", path_, " is malformed: ", p.name,
               "'s data offset ", p.offset, " is not aligned to ", alignment);
    XDIT_CHECK(tensors_.count(p.name) == 0 &&
                   std::none_of(pending.begin(), pending.end(),
                                [&](const Pending& q) { return q.name == p.name; }),
               "GGUF file ", path_, " is malformed: ", p.name, " appears twice");
    pending.push_back(std::move(p));
  }
  const uint64_t start = (c.at() + alignment - 1) / alignment * alignment;
  XDIT_CHECK(start <= size_, "GGUF file ", path_, " is truncated before its data");
  for (Pending& p : pending) {
    XDIT_CHECK(p.offset <= size_ - start && p.t.bytes <= size_ - start - p.offset, "GGUF file ",
               path_, " is truncated: ", p.name, " runs past the end of the file (", size_,
               " bytes)");
    p.t.data = bytes + start + p.offset;
    tensors_[p.name] = p.t;
  }
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const auto it = tensors_.find(name);
  XDIT_CHECK(it != tensors_.end(), "GGUF file ", path_, " has no tensor ", name);
  return it->second;
}

Tensor GgufFile::dequantized(const std::string& name) const {
  const GgufTensor& t = tensor(name);
  Tensor out = Tensor::empty(t.shape);
  const int64_t blocks = shape_numel(t.shape) / ggml_block_values(t.type);
  dequantize_blocks(t.type, t.data, blocks, out.data<float>());
  return out;
}

}  // namespace xdit::io
