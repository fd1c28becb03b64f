#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file.h"

namespace xdit::io {

namespace {

// Element sizes of every dtype the safetensors format defines; xdit reads the
// float ones and recognises the rest so that such files still open.
size_t safetensors_dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

const char* safetensors_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

std::string last_errno_text() {
  return std::strerror(errno);
}

// Every live mapping of a file, with the descriptor kept open to ask the
// file (not its path) whether it changed (changed_mapped_files).
struct Mapping {
  const void* addr;
  size_t size;
  int fd;
  std::string path;
  timespec mtime;
};
std::mutex g_mappings_mu;
std::list<Mapping> g_mappings;

}  // namespace

std::vector<std::string> changed_mapped_files() {
  std::vector<std::string> changed;
  std::lock_guard<std::mutex> lock(g_mappings_mu);
  for (const Mapping& m : g_mappings) {
    struct stat st {};
    if (::fstat(m.fd, &st) != 0 || static_cast<size_t>(st.st_size) < m.size ||
        st.st_mtim.tv_sec != m.mtime.tv_sec || st.st_mtim.tv_nsec != m.mtime.tv_nsec)
      changed.push_back(m.path);
  }
  return changed;
}

MappedFile map_file(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a FIFO given as a weights or embeddings file must not
  // wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  XDIT_CHECK(fd >= 0, "cannot open ", what, " ", path, ": ", last_errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    XDIT_FAIL(what, " ", path, " is not a regular file");
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    XDIT_FAIL(what, " ", path, " is empty");
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    const std::string why = last_errno_text();
    ::close(fd);
    XDIT_FAIL("cannot memory-map ", path, ": ", why);
  }
  {
    std::lock_guard<std::mutex> lock(g_mappings_mu);
    g_mappings.push_back({p, size, fd, path, st.st_mtim});
  }
  std::shared_ptr<const void> data(p, [size](const void* q) {
    ::munmap(const_cast<void*>(q), size);
    std::lock_guard<std::mutex> lock(g_mappings_mu);
    g_mappings.remove_if([&](const Mapping& m) {
      if (m.addr != q) return false;
      ::close(m.fd);
      return true;
    });
  });
  return {std::move(data), size};
}

SafeTensorsFile::SafeTensorsFile(const std::string& path) : path_(path) {
  MappedFile m = map_file(path, "safetensors file");
  map_ = std::move(m.data);
  file_size_ = m.size;
  mapped_ = true;
  parse();
}

void drop_mapped_pages(const void* mapping, size_t begin, size_t end) {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t b = (begin + page - 1) / page * page;
  const size_t e = end / page * page;
  // Advice only: a failure leaves the pages resident, nothing else.
  if (e > b) ::madvise(static_cast<char*>(const_cast<void*>(mapping)) + b, e - b, MADV_DONTNEED);
}

void SafeTensorsFile::drop_pages(const std::string& name) const {
  const auto it = entries_.find(name);
  if (!mapped_ || it == entries_.end()) return;
  drop_mapped_pages(map_.get(), data_start_ + it->second.begin, data_start_ + it->second.end);
}

SafeTensorsFile::SafeTensorsFile(std::shared_ptr<const void> data, size_t size, std::string name)
    : path_(std::move(name)), map_(std::move(data)), file_size_(size) {
  parse();
}

void SafeTensorsFile::parse() {
  const std::string& path = path_;
  const auto* bytes = static_cast<const unsigned char*>(map_.get());

  XDIT_CHECK(file_size_ >= 8, "safetensors file ", path, " is truncated: ", file_size_,
             " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];
  XDIT_CHECK(header_len <= file_size_ - 8, "safetensors file ", path,
             " is malformed: header length ", header_len, " runs past the end of the file (",
             file_size_, " bytes)");
  data_start_ = 8 + static_cast<size_t>(header_len);
  const size_t data_size = file_size_ - data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + data_start_);
  } catch (const nlohmann::json::exception& e) {
    XDIT_FAIL("safetensors file ", path, " has a header that is not valid JSON (", e.what(), ")");
  }
  XDIT_CHECK(header.is_object(), "safetensors file ", path,
             " has a header that is not a JSON object");

  std::vector<std::pair<size_t, const std::string*>> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      XDIT_CHECK(v.is_object(), "safetensors file ", path, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        XDIT_CHECK(m.value().is_string(), "safetensors file ", path, ": metadata value '", m.key(),
                   "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "safetensors file " + path + ", tensor '" + name + "'";
    XDIT_CHECK(
        v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
        where, ": entry needs dtype, shape and data_offsets");
    XDIT_CHECK(v["dtype"].is_string(), where, ": dtype is not a string");
    TensorEntry e;
    e.dtype = v["dtype"].get<std::string>();
    const size_t esize = safetensors_dtype_size(e.dtype);
    XDIT_CHECK(esize != 0, where, ": unknown dtype '", e.dtype, "'");
    XDIT_CHECK(v["shape"].is_array(), where, ": shape is not an array");
    uint64_t count = 1;
    for (const auto& d : v["shape"]) {
      XDIT_CHECK(d.is_number_unsigned(), where, ": shape has a non-integer or negative dimension");
      const uint64_t dim = d.get<uint64_t>();
      XDIT_CHECK(dim <= (uint64_t{1} << 62) && (dim == 0 || count <= (uint64_t{1} << 62) / dim),
                 where, ": shape is too large");
      count *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    XDIT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                   off[1].is_number_unsigned(),
               where, ": data_offsets must be two non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    XDIT_CHECK(b <= en, where, ": data_offsets [", b, ", ", en, "] are reversed");
    XDIT_CHECK(en <= data_size, where, ": data ends at byte ", en,
               " of the data section but the file has only ", data_size,
               " data bytes (truncated file?)");
    XDIT_CHECK(en - b == count * esize, where, ": shape ", shape_str(e.shape), " x ", e.dtype,
               " is ", count * esize, " bytes but data_offsets span ", en - b);
    e.begin = b;
    e.end = en;
    auto [pos, inserted] = entries_.emplace(name, std::move(e));
    spans.emplace_back(pos->second.begin, &pos->first);
  }
  // Sorted by start, each non-empty tensor must begin at or after the furthest
  // end seen so far.
  std::sort(spans.begin(), spans.end());
  size_t max_end = 0;
  const std::string* max_name = nullptr;
  for (const auto& [begin, name] : spans) {
    const TensorEntry& cur = entries_.at(*name);
    if (cur.begin == cur.end) continue;
    XDIT_CHECK(max_name == nullptr || cur.begin >= max_end, "safetensors file ", path,
               " is malformed: tensors '", *max_name, "' and '", *name, "' overlap");
    if (cur.end > max_end) {
      max_end = cur.end;
      max_name = name;
    }
  }
}

Tensor SafeTensorsFile::get(const std::string& name) const {
  auto it = entries_.find(name);
  XDIT_CHECK(it != entries_.end(), "tensor '", name, "' not found in ", path_);
  const TensorEntry& e = it->second;
  DType t;
  if (e.dtype == "F32") {
    t = DType::kF32;
  } else if (e.dtype == "F16") {
    t = DType::kF16;
  } else if (e.dtype == "BF16") {
    t = DType::kBF16;
  } else {
    XDIT_FAIL("tensor '", name, "' in ", path_, " has dtype ", e.dtype,
              "; xdit reads F32, F16 and BF16 tensors");
  }
  const auto* base = static_cast<const unsigned char*>(map_.get()) + data_start_ + e.begin;
  // The format does not promise aligned offsets: a misaligned tensor is
  // copied (reading it in place would be undefined behaviour).
  if (reinterpret_cast<uintptr_t>(base) % dtype_size(t) != 0) {
    Tensor copy = Tensor::empty(e.shape, t);
    std::memcpy(copy.raw(), base, e.end - e.begin);
    return copy;
  }
  return Tensor::view(map_, base, e.shape, t);
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  OutputFile out(path);
  write_safetensors(out, tensors, metadata);
}

void write_safetensors(OutputFile& out, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    XDIT_CHECK(name != "__metadata__", "a tensor may not be named __metadata__");
    header[name] = {{"dtype", safetensors_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  out.commit([&](std::ostream& f) {
    unsigned char len[8];
    const uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& [name, t] : tensors)
      f.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  });
}

std::map<std::string, Tensor> read_safetensors_f32(const std::string& path) {
  SafeTensorsFile f(path);
  std::map<std::string, Tensor> out;
  for (const auto& [name, e] : f.entries()) out[name] = f.get(name).to(DType::kF32);
  return out;
}

}  // namespace xdit::io
