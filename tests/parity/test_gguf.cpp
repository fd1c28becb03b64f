// The GGUF reader (io/gguf.h) and its dequantization (io/gguf_quants.h)
// against gguf-py, the format's reference implementation
// (tools/goldens/make_gguf.py): every type xdit reads, odd shapes, every
// metadata value type; then each malformed file is one line.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace xdit {
namespace {

const std::string kDir = std::string(XDIT_TEST_DATA) + "/gguf/";

TEST(Gguf, EveryTypeDequantizesAsGgufPy) {
  const io::GgufFile f(kDir + "types.gguf");
  const auto want = io::read_safetensors_f32(kDir + "types_f32.safetensors");
  EXPECT_EQ(f.version(), 3u);
  ASSERT_EQ(f.tensors().size(), want.size());
  for (const auto& [name, w] : want) {
    SCOPED_TRACE(name);
    const Tensor got = f.dequantized(name);
    ASSERT_EQ(got.shape(), w.shape());
    // Exact f32 arithmetic as gguf-py's: equal but for an FMA's last bit.
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      worst = std::max(worst, std::abs(double(got.data<float>()[i]) - w.data<float>()[i]));
      scale = std::max(scale, std::abs(double(w.data<float>()[i])));
    }
    EXPECT_LE(worst, 1e-6 * scale);
    EXPECT_GT(scale, 0);
  }
  EXPECT_EQ(f.tensor("q8_0_3d").shape, Shape({2, 3, 32}));
  EXPECT_EQ(f.tensor("q4_k_256").type, io::GgmlType::kQ4_K);
  EXPECT_EQ(f.tensor("q5_k_512").bytes, size_t{4 * 176});
}

// gguf-py's Q8_0 blocks are ggml's quantizer's: quantizing their own
// values again gives the same bytes (d = max|x| / 127 comes back exactly).
TEST(Gguf, Q8_0QuantizerMakesGgufPysBlocks) {
  const io::GgufFile f(kDir + "types.gguf");
  for (const char* name : {"q8_0_2d", "q8_0_3d"}) {
    const io::GgufTensor& t = f.tensor(name);
    const Tensor values = f.dequantized(name);
    std::vector<uint8_t> q(t.bytes);
    io::quantize_q8_0(values.data<float>(), values.numel() / 32, q.data());
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.bytes), q) << name;
  }
}

TEST(Gguf, MetadataOfEveryType) {
  const io::GgufFile f(kDir + "types.gguf");
  const auto& m = f.metadata();
  EXPECT_EQ(std::get<std::string>(m.at("general.name")), "xdit gguf types");
  EXPECT_EQ(std::get<int64_t>(m.at("general.alignment")), 64);
  EXPECT_EQ(std::get<int64_t>(m.at("test.i8")), -3);
  EXPECT_EQ(std::get<int64_t>(m.at("test.u16")), 65535);
  EXPECT_EQ(std::get<int64_t>(m.at("test.i64")), -(int64_t{1} << 40));
  EXPECT_EQ(std::get<double>(m.at("test.f32")), 0.25);
  EXPECT_EQ(std::get<double>(m.at("test.f64")), -1.5);
  EXPECT_TRUE(std::get<bool>(m.at("test.bool")));
  EXPECT_EQ(std::get<std::vector<int64_t>>(m.at("test.ints")), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(std::get<std::vector<std::string>>(m.at("test.strings")),
            (std::vector<std::string>{"a", "bc"}));
}

// Malformed files: one line each, naming the file.
class GgufBad : public testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(kDir + "types.gguf", std::ios::binary);
    good_.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string error(std::string bytes) const {
    auto keep = std::make_shared<std::string>(std::move(bytes));
    return test::error_message([&] {
      io::GgufFile(std::shared_ptr<const void>(keep, keep->data()), keep->size(), "bad.gguf");
    });
  }
  void expect(const std::string& bytes, const std::string& part) const {
    const std::string e = error(bytes);
    EXPECT_NE(e.find(part), std::string::npos) << e;
    EXPECT_NE(e.find("bad.gguf"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  template <class T>
  std::string with(size_t at, T v) const {
    std::string b = good_;
    std::memcpy(b.data() + at, &v, sizeof v);
    return b;
  }
  std::string good_;
};

TEST_F(GgufBad, EachIsOneLine) {
  ASSERT_GT(good_.size(), 64u);
  EXPECT_EQ(error(good_), "(no error)");
  expect(with<uint32_t>(0, 0x12345678), "GGUF magic");
  expect(with<uint32_t>(4, 1), "version 1");
  expect(with<uint64_t>(8, uint64_t{1} << 60), "tensor count");
  expect(with<uint64_t>(16, uint64_t{1} << 60), "metadata count");
  expect(good_.substr(0, 30), "is more than its 30 bytes can hold");
  expect(good_.substr(0, good_.size() - 100), "runs past the end");
  // Every truncation before the last tensor's end (the file's padding after
  // it may go): one line, no crash.
  size_t last = 0;
  {
    const auto keep = std::make_shared<std::string>(good_);
    const io::GgufFile g(std::shared_ptr<const void>(keep, keep->data()), keep->size(), "g");
    const auto* base = reinterpret_cast<const uint8_t*>(keep->data());
    for (const auto& [n, t] : g.tensors())
      last = std::max(last, static_cast<size_t>(t.data - base) + t.bytes);
  }
  for (size_t cut = 0; cut < last; cut += 7) {
    const std::string e = error(good_.substr(0, cut));
    EXPECT_NE(e, "(no error)") << cut;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // A tensor's type, dimension count and offset, found by its name.
  const size_t name = good_.find("q4_k_256");
  ASSERT_NE(name, std::string::npos);
  const size_t dims = name + 8, type = dims + 4 + 2 * 8, offset = type + 4;
  expect(with<uint32_t>(type, 99), "ggml type 99");
  expect(with<uint32_t>(dims, 7), "7 dimensions");
  expect(with<uint64_t>(dims + 4, 255), "not whole Q4_K blocks");
  expect(with<uint64_t>(offset, 3), "not aligned to 64");
  expect(with<uint64_t>(offset, uint64_t{1} << 50), "runs past the end");
}

}  // namespace
}  // namespace xdit
