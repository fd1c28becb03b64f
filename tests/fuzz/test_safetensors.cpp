// safetensors reader/writer: round trips, sharded indexes, and a clear error
// for every kind of malformed file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "test_util.h"

namespace xdit::io {
namespace {

namespace fs = std::filesystem;

class SafeTensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("xdit_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes header (JSON text) + `data_bytes` bytes of data, with the 8-byte
  // length set to `len_override` when given.
  std::string raw(const std::string& name, const std::string& header, size_t data_bytes,
                  int64_t len_override = -1) {
    const std::string p = (dir_ / name).string();
    std::ofstream f(p, std::ios::binary);
    uint64_t n = len_override >= 0 ? static_cast<uint64_t>(len_override) : header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
    f << header;
    for (size_t i = 0; i < data_bytes; ++i) f.put(static_cast<char>(i));
    return p;
  }

  // The message of the error opening `path` throws.
  static std::string error_of(const std::string& path) {
    try {
      SafeTensorsFile f(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }

  fs::path dir_;
};

TEST_F(SafeTensors, RoundTripAllDtypesAndMetadata) {
  auto v = test::randn(3 * 5 * 7, 1);
  Tensor a = Tensor::from_vector(v, {3, 5, 7});
  Tensor b = a.to(DType::kBF16).reshape({105});
  Tensor c = a.to(DType::kF16).reshape({7, 15});
  const std::string p = (dir_ / "x.safetensors").string();
  write_safetensors(p, {{"a", a}, {"b.weight", b}, {"c", c}}, {{"made_by", "test"}});
  SafeTensorsFile f(p);
  EXPECT_EQ(f.metadata().at("made_by"), "test");
  EXPECT_EQ(f.get("a").shape(), (Shape{3, 5, 7}));
  EXPECT_EQ(f.get("a").to_vector(), v);
  EXPECT_EQ(f.get("b.weight").dtype(), DType::kBF16);
  EXPECT_EQ(f.get("b.weight").to_vector(), b.to_vector());
  EXPECT_EQ(f.get("c").to_vector(), c.to_vector());
  EXPECT_LT(test::rel_max_err(f.get("c").to_vector(), v), 1e-3);
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST_F(SafeTensors, ShardedIndexIsFollowed) {
  Tensor a = Tensor::from_vector(test::randn(6, 2), {2, 3});
  Tensor b = Tensor::from_vector(test::randn(4, 3), {4});
  write_safetensors((dir_ / "model-00001-of-00002.safetensors").string(), {{"x.a", a}});
  write_safetensors((dir_ / "model-00002-of-00002.safetensors").string(), {{"x.b", b}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 40}, "weight_map": {"x.a": "model-00001-of-00002.safetensors",)"
      << R"( "x.b": "model-00002-of-00002.safetensors"}})";
  WeightStore s(dir_.string());
  EXPECT_EQ(s.get("x.a", {2, 3}).to_vector(), a.to_vector());
  EXPECT_EQ(s.get("x.b", {4}).to_vector(), b.to_vector());
  EXPECT_EQ(s.stored_bytes(), 40u);
  try {
    s.get("x.b", {2, 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has shape [4] but the config implies [2, 2]"),
              std::string::npos);
  }
  EXPECT_THROW(s.get("x.c", {1}), Error);
}

// A tensor-parallel share of a stored weight: whole rows are a view of the
// file's mapping (no copy; it outlives the store), columns a copy; both hold
// the stored values of a 7 x 5 bf16 matrix and count as sliced bytes.
TEST_F(SafeTensors, SharesAreRowViewsAndColumnCopies) {
  const auto v = test::randn(7 * 5, 6);
  const Tensor w = Tensor::from_vector(v, {7, 5}).to(DType::kBF16);
  const Tensor b = Tensor::from_vector(test::randn(7, 7), {7});
  write_safetensors((dir_ / "m.safetensors").string(), {{"l.weight", w}, {"l.bias", b}});
  Tensor rows, cols, bias;
  {
    WeightStore s(dir_.string());
    const Tensor whole = s.get("l.weight", {7, 5});
    rows = s.get_slice("l.weight", {7, 5}, 0, 2, 3);
    EXPECT_EQ(rows.raw(), static_cast<const char*>(whole.raw()) + 2 * 5 * 2)
        << "rows [2, 5) should lie in the mapping, not in a copy";
    cols = s.get_slice("l.weight", {7, 5}, 1, 1, 3);
    bias = s.get_slice("l.bias", {7}, 0, 4, 3);
    EXPECT_EQ(s.loaded().sliced, (3 * 5 + 7 * 3) * 2u + 3 * 4u);
    EXPECT_EQ(s.loaded().total, s.loaded().sliced + 7 * 5 * 2u);
    EXPECT_THROW(s.get_slice("l.weight", {7, 5}, 0, 5, 3), Error);
  }
  const auto stored = w.to_vector(), rv = rows.to_vector(), cv = cols.to_vector();
  ASSERT_EQ(rows.shape(), (Shape{3, 5}));
  ASSERT_EQ(cols.shape(), (Shape{7, 3}));
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 5; ++c) {
      const float x = stored[static_cast<size_t>(r * 5 + c)];
      if (r >= 2 && r < 5) {
        EXPECT_EQ(rv[static_cast<size_t>((r - 2) * 5 + c)], x);
      }
      if (c >= 1 && c < 4) {
        EXPECT_EQ(cv[static_cast<size_t>(r * 3 + c - 1)], x);
      }
    }
  const auto bv = b.to_vector();
  EXPECT_EQ(bias.to_vector(), std::vector<float>(bv.begin() + 4, bv.end()));
}

// Resident pages of this process (/proc/self/statm's second field).
int64_t resident_pages() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident;
}

// drop_pages takes a tensor's pages out of the resident set once a layer has
// its own copy; a view read afterwards still sees the same values, and a
// file given as bytes in memory is left alone (advice there would zero it).
TEST_F(SafeTensors, DropPagesLeavesResidentMemoryAndKeepsValues) {
  const int64_t n = 3 << 20;  // 12 MB of f32
  const auto v = test::randn(n, 4);
  const auto small = test::randn(37, 5);
  const std::string p = (dir_ / "big.safetensors").string();
  write_safetensors(
      p, {{"big", Tensor::from_vector(v, {n})}, {"small", Tensor::from_vector(small, {37})}});
  WeightStore s(dir_.string());
  const Tensor view = s.get("big", {n});
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += view.data<float>()[i];  // touches every page
  const int64_t touched = resident_pages();
  s.drop_pages("big");
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  EXPECT_GT(touched - resident_pages(), (n * 4 / page) * 9 / 10)
      << "the tensor's pages should have left the resident set";
  EXPECT_EQ(view.to_vector(), v);  // read again from the file
  EXPECT_EQ(s.get("small", {37}).to_vector(), small);
  s.drop_pages("no.such.weight");  // nothing to do
  EXPECT_NE(sum, 0.0);

  std::ifstream in(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto held = std::make_shared<std::string>(bytes);
  SafeTensorsFile mem(std::shared_ptr<const void>(held, held->data()), held->size(), "in memory");
  mem.drop_pages("big");
  EXPECT_EQ(mem.get("big").to_vector(), v);
}

TEST_F(SafeTensors, MissingShardIsNamed) {
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map": {"w": "model-00001-of-00002.safetensors"}})";
  try {
    WeightStore s(dir_.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model-00001-of-00002.safetensors"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos);
  }
}

TEST_F(SafeTensors, FolderWithoutWeights) {
  try {
    WeightStore s(dir_.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no safetensors weights"), std::string::npos);
  }
}

TEST_F(SafeTensors, EachMalformationHasItsMessage) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  EXPECT_EQ(error_of(raw("good", ok, 24)), "(no error)");
  struct Bad {
    std::string what, header;
    size_t data;
    int64_t len;
    std::string expect;
  };
  const std::vector<Bad> bad = {
      {"empty", "", 0, -2, "is empty"},
      {"short", "", 0, -3, "truncated"},
      {"header_past_end", ok, 24, 1 << 20, "runs past the end"},
      {"bad_json", R"({"w":{"dtype":"F32",)", 24, -1, "not valid JSON"},
      {"not_object", "[1,2,3]", 0, -1, "not a JSON object"},
      {"truncated_data", ok, 10, -1, "truncated"},
      {"offsets_out_of_range", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[100,108]}})", 24,
       -1, "truncated"},
      {"reversed", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 24, -1, "reversed"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       16, -1, "overlap"},
      {"unknown_dtype", R"({"w":{"dtype":"F33","shape":[6],"data_offsets":[0,24]}})", 24, -1,
       "unknown dtype 'F33'"},
      {"size_mismatch", R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})", 24, -1,
       "is 12 bytes but data_offsets span 24"},
      {"missing_field", R"({"w":{"dtype":"F32","shape":[6]}})", 24, -1,
       "needs dtype, shape and data_offsets"},
      {"negative_dim", R"({"w":{"dtype":"F32","shape":[-6],"data_offsets":[0,24]}})", 24, -1,
       "negative"},
  };
  for (const auto& b : bad) {
    std::string path;
    if (b.len == -2) {
      path = (dir_ / b.what).string();
      std::ofstream(path).close();
    } else if (b.len == -3) {
      path = (dir_ / b.what).string();
      std::ofstream(path) << "abc";
    } else {
      path = raw(b.what, b.header, b.data, b.len);
    }
    const std::string msg = error_of(path);
    EXPECT_NE(msg.find(b.expect), std::string::npos) << b.what << ": " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << b.what << " should name the file: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << b.what << " message is one line";
  }
}

TEST_F(SafeTensors, NonFloatDtypeOpensButIsNotRead) {
  const std::string p =
      raw("ids", R"({"ids":{"dtype":"I64","shape":[3],"data_offsets":[0,24]}})", 24);
  SafeTensorsFile f(p);
  EXPECT_TRUE(f.contains("ids"));
  EXPECT_THROW(f.get("ids"), Error);
}

TEST_F(SafeTensors, RandomBytesNeverCrash) {
  // A small fuzz loop: random corruptions of a valid file either open or throw.
  Tensor a = Tensor::from_vector(test::randn(12, 4), {3, 4});
  const std::string good = (dir_ / "g.safetensors").string();
  write_safetensors(good, {{"a", a}, {"b", a.to(DType::kBF16)}});
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::mt19937 rng(7);
  for (int it = 0; it < 300; ++it) {
    std::string m = bytes;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) m[rng() % m.size()] = static_cast<char>(rng());
    if (rng() % 5 == 0) m.resize(rng() % m.size());
    const std::string p = (dir_ / "f.safetensors").string();
    std::ofstream(p, std::ios::binary | std::ios::trunc) << m;
    try {
      SafeTensorsFile f(p);
      for (const auto& [name, e] : f.entries()) {
        try {
          (void)f.get(name).to_vector();
        } catch (const Error&) {
        }
      }
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace xdit::io
