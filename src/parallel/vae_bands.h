// The patch-parallel VAE decoder (xDiT's --use_parallel_vae, DistVAE): the
// latent's rows split into bands over a group of ranks (a data-parallel
// replica), behind the nn::RowBands seam. Halo rows travel between
// neighbours (non-blocking sends and receives, one message per batch item
// and direction), GroupNorm statistics are summed in f64, the mid-block
// attention is Ring attention over the bands (exact, through the
// log-sum-exp), and the bands are all-gathered once at the end.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "nn/row_bands.h"
#include "parallel/usp_attention.h"

namespace xdit::parallel {

class VaeBands : public nn::RowBands {
 public:
  // `latent_rows`: every rank's rows of the latent, in the group's rank order.
  // `group` carries the decoder's activations (halos, attention: on a GPU a
  // device communicator), `host` the same ranks over host memory (the
  // statistics' sums and the final gather); one group on the CPU.
  VaeBands(comm::Communicator& group, comm::Communicator& host, std::vector<int64_t> latent_rows);
  VaeBands(comm::Communicator& group, std::vector<int64_t> latent_rows)
      : VaeBands(group, group, std::move(latent_rows)) {}
  ~VaeBands() override;
  const std::vector<int64_t>& rows() const override { return rows_; }
  int band() const override { return group_.rank(); }
  void sum(double* values, size_t count) override;
  void exchange_halos(void* x, int64_t batch, int64_t rows, int64_t halo,
                      size_t row_bytes) override;
  nn::AttentionBackend& attention() override { return attention_; }
  Tensor gather(const Tensor& band) override;

 private:
  comm::Communicator& group_;
  comm::Communicator& host_;
  std::vector<int64_t> rows_;
  std::unique_ptr<comm::Communicator> single_;  // the Ulysses side of the attention: none
  UspAttention attention_;
};

}  // namespace xdit::parallel
