#include "nn/row_bands.h"

#include "kernels/kernels.h"

namespace xdit::nn {

std::pair<int64_t, int64_t> RowBands::my_rows(int64_t scale) const {
  int64_t begin = 0;
  const auto& r = rows();
  for (int i = 0; i < band(); ++i) begin += r[static_cast<size_t>(i)];
  return {begin * scale, (begin + r[static_cast<size_t>(band())]) * scale};
}

int64_t RowBands::total_rows(int64_t scale) const {
  int64_t n = 0;
  for (int64_t r : rows()) n += r;
  return n * scale;
}

void zero_edge_halos(void* x, int64_t batch, int64_t rows, int64_t halo, size_t row_bytes, bool top,
                     bool bottom) {
  auto* p = static_cast<uint8_t*>(x);
  const size_t item = static_cast<size_t>(rows + 2 * halo) * row_bytes,
               edge = static_cast<size_t>(halo) * row_bytes;
  for (int64_t b = 0; b < batch; ++b) {
    uint8_t* it = p + static_cast<size_t>(b) * item;
    if (top) kernels::zero_bytes(it, edge);
    if (bottom) kernels::zero_bytes(it + item - edge, edge);
  }
}

void LocalBand::exchange_halos(void* x, int64_t batch, int64_t rows, int64_t halo,
                               size_t row_bytes) {
  zero_edge_halos(x, batch, rows, halo, row_bytes, true, true);
}

}  // namespace xdit::nn
