#include "nn/block_weights.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "io/gguf_quants.h"

namespace xdit::nn {

namespace {
kernels::BlockRows decoded_as(const io::QuantizedRows& q, int64_t cols) {
  kernels::BlockRows b;
  b.cols = cols;
  const io::GgmlType t = q.type;
  XDIT_CHECK(cols % io::ggml_block_values(t) == 0, "a ", io::ggml_type_name(t), " row of ", cols,
             " values is not whole blocks");
  const int64_t blocks = cols / io::ggml_block_values(t);
  b.row_bytes = static_cast<size_t>(blocks * io::ggml_block_bytes(t));
  b.decode_row = [t, blocks](const uint8_t* row, float* dst) {
    io::dequantize_blocks(t, row, blocks, dst);
  };
  b.format = io::ggml_type_name(t);
  using Code = kernels::BlockRows::Code;
  b.code = t == io::GgmlType::kQ8_0   ? Code::kQ8_0
           : t == io::GgmlType::kQ4_K ? Code::kQ4_K
           : t == io::GgmlType::kQ5_K ? Code::kQ5_K
                                      : Code::kOther;
  return b;
}
}  // namespace

kernels::BlockRows block_rows(const io::QuantizedRows& q, int64_t r0, int64_t n) {
  XDIT_CHECK(r0 >= 0 && n >= 0 && r0 + n <= q.rows, "quantized rows [", r0, ", ", r0 + n,
             ") outside the weight's ", q.rows);
  kernels::BlockRows b = decoded_as(q, q.cols);
  XDIT_CHECK(b.row_bytes == q.row_bytes, "quantized rows of ", q.row_bytes, " bytes, expected ",
             b.row_bytes, " (padded rows are not read)");
  b.data = q.data + static_cast<size_t>(r0) * q.row_bytes;
  b.rows = n;
  return b;
}

kernels::BlockRows float_rows(const Tensor& t) {
  XDIT_CHECK(t.ndim() == 2, "float_rows: a matrix, got ", shape_str(t.shape()));
  kernels::BlockRows b;
  b.data = static_cast<const uint8_t*>(t.raw());
  b.rows = t.dim(0);
  b.cols = t.dim(1);
  const DType d = t.dtype();
  b.row_bytes = static_cast<size_t>(b.cols) * dtype_size(d);
  const auto n = static_cast<size_t>(b.cols);
  b.decode_row = [d, n](const uint8_t* row, float* dst) { convert_to_f32(row, d, dst, n); };
  b.format = dtype_name(d);
  return b;
}

kernels::BlockRows column_shares(const io::QuantizedRows& q,
                                 const std::vector<std::pair<int64_t, int64_t>>& shares,
                                 const std::string& name, int tp_size,
                                 std::vector<uint8_t>& bytes) {
  const int64_t per_block = io::ggml_block_values(q.type),
                block_bytes = io::ggml_block_bytes(q.type);
  int64_t cols = 0;
  for (const auto& [begin, count] : shares) {
    XDIT_CHECK(begin % per_block == 0 && count % per_block == 0, "tensor parallel degree ", tp_size,
               " splits ", name, " at input ", begin, " (a share of ", count,
               " inputs), which cuts its ", io::ggml_type_name(q.type), " blocks of ", per_block,
               " values; choose a degree whose shares are whole blocks, or unquantized weights");
    cols += count;
  }
  kernels::BlockRows b = decoded_as(q, cols);
  bytes.resize(static_cast<size_t>(q.rows) * b.row_bytes);
  for (int64_t r = 0; r < q.rows; ++r) {
    uint8_t* dst = bytes.data() + static_cast<size_t>(r) * b.row_bytes;
    for (const auto& [begin, count] : shares) {
      const auto n = static_cast<size_t>(count / per_block * block_bytes);
      std::memcpy(dst,
                  q.data + static_cast<size_t>(r) * q.row_bytes +
                      static_cast<size_t>(begin / per_block * block_bytes),
                  n);
      dst += n;
    }
  }
  b.data = bytes.data();
  b.rows = q.rows;
  return b;
}

}  // namespace xdit::nn
