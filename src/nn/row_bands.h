// The seam of layer-by-layer models that can run on a row band of the image
// (the patch-parallel VAE decoder): what such a model needs from the ranks
// that share the image, so that the model file names no communicator.
// nn::local_band() is the whole image on one rank; parallel/vae_bands.h
// splits it over a group (halo rows from the neighbours, statistics summed,
// attention over every band's tokens, bands gathered at the end).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/attention.h"

namespace xdit::nn {

class RowBands {
 public:
  virtual ~RowBands() = default;
  // Every band's rows of the model's input grid (the latent), in order.
  virtual const std::vector<int64_t>& rows() const = 0;
  // This rank's band.
  virtual int band() const = 0;
  // In-place sum over the bands (GroupNorm's Σx and Σx², f64, host memory).
  virtual void sum(double* values, size_t count) = 0;
  // x (the model's memory: the thread's current device) holds `batch` items of `rows` + 2·halo
  // rows, `row_bytes` bytes per row: fills the `halo` rows above and below each item's band with
  // the neighbouring bands' edge rows, and with zeros at the image's top and bottom (a
  // convolution's zero padding).
  virtual void exchange_halos(void* x, int64_t batch, int64_t rows, int64_t halo,
                              size_t row_bytes) = 0;
  // Self-attention over every band's tokens; the caller tells it the split
  // (AttentionBackend::set_sequence_split) before each call.
  virtual AttentionBackend& attention() = 0;
  // Every band's [B, C, rows_i, W] (host memory) assembled into
  // [B, C, Σ rows_i, W] on every rank.
  virtual Tensor gather(const Tensor& band) = 0;

  // This band's rows [begin, end) of the input grid scaled by `scale`.
  std::pair<int64_t, int64_t> my_rows(int64_t scale = 1) const;
  // All bands' rows at `scale`.
  int64_t total_rows(int64_t scale = 1) const;
};

// The whole image as one band (the serial decoder): zero halos, serial attention.
class LocalBand : public RowBands {
 public:
  explicit LocalBand(int64_t rows) : rows_{rows} {}
  const std::vector<int64_t>& rows() const override { return rows_; }
  int band() const override { return 0; }
  void sum(double*, size_t) override {}
  void exchange_halos(void* x, int64_t batch, int64_t rows, int64_t halo,
                      size_t row_bytes) override;
  AttentionBackend& attention() override { return serial_attention(); }
  Tensor gather(const Tensor& band) override { return band; }

 private:
  std::vector<int64_t> rows_;
};

// Zeros the halo rows of the bands at the image's top (`top`) and bottom
// (`bottom`) edges: x as in RowBands::exchange_halos.
void zero_edge_halos(void* x, int64_t batch, int64_t rows, int64_t halo, size_t row_bytes, bool top,
                     bool bottom);

}  // namespace xdit::nn
