#include "parallel/vae_bands.h"

#include <cstdint>

#include "core/error.h"
#include "parallel/gather.h"

namespace xdit::parallel {

VaeBands::VaeBands(comm::Communicator& group, comm::Communicator& host,
                   std::vector<int64_t> latent_rows)
    : group_(group),
      host_(host),
      rows_(std::move(latent_rows)),
      single_(comm::make_single()),
      attention_(*single_, group) {
  XDIT_CHECK(static_cast<int>(rows_.size()) == group.size() && host.size() == group.size() &&
                 host.rank() == group.rank(),
             "VAE bands: ", rows_.size(), " bands for ", group.size(), " ranks");
  for (int64_t r : rows_) XDIT_CHECK(r >= 1, "VAE bands: a band of ", r, " latent rows");
}

VaeBands::~VaeBands() = default;

void VaeBands::sum(double* values, size_t count) {
  host_.allreduce_sum(values, count);
}

void VaeBands::exchange_halos(void* x, int64_t batch, int64_t rows, int64_t halo,
                              size_t row_bytes) {
  const int me = group_.rank(), n = group_.size();
  const bool has_up = me > 0, has_down = me + 1 < n;
  nn::zero_edge_halos(x, batch, rows, halo, row_bytes, !has_up, !has_down);
  if (n == 1) return;
  XDIT_CHECK(rows >= halo, "VAE bands: ", rows, " rows cannot give a halo of ", halo);
  auto* p = static_cast<uint8_t*>(x);
  const size_t item = static_cast<size_t>(rows + 2 * halo) * row_bytes,
               edge = static_cast<size_t>(halo) * row_bytes;
  // Tags: 2b for rows travelling up (to the band above), 2b + 1 down.
  std::vector<std::unique_ptr<comm::Request>> reqs;
  for (int64_t b = 0; b < batch; ++b) {
    uint8_t* it = p + static_cast<size_t>(b) * item;
    const int up = static_cast<int>(2 * b), down = up + 1;
    if (has_up) {
      reqs.push_back(group_.irecv(it, edge, comm::Type::kByte, me - 1, down));
      reqs.push_back(group_.isend(it + edge, edge, comm::Type::kByte, me - 1, up));
    }
    if (has_down) {
      reqs.push_back(group_.irecv(it + item - edge, edge, comm::Type::kByte, me + 1, up));
      reqs.push_back(group_.isend(it + item - 2 * edge, edge, comm::Type::kByte, me + 1, down));
    }
  }
  for (auto& r : reqs) r->wait();
}

Tensor VaeBands::gather(const Tensor& band) {
  const int64_t scale = band.dim(2) / rows_[static_cast<size_t>(group_.rank())];
  std::vector<int64_t> px;
  for (int64_t r : rows_) px.push_back(r * scale);
  return gather_rows(host_, band, px);
}

}  // namespace xdit::parallel
