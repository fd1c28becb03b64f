// Resolution binning as diffusers' PixArt pipelines do it
// (PixArtImageProcessor.classify_height_width_bin and resize_and_crop_tensor).
#pragma once

#include <cstdint>
#include <utility>

#include "core/tensor.h"

namespace xdit::pipeline {

// The aspect-ratio table for a transformer sample size (32 → 256 px bins,
// 64 → 512, 128 → 1024, 256 → 2048); throws for other sizes.
int64_t bin_table_for_sample_size(int64_t sample_size);
// The bin (height, width) whose ratio is nearest height/width (first on ties).
std::pair<int64_t, int64_t> classify_height_width_bin(int64_t height, int64_t width, int64_t table);
// Bilinear resize (torch interpolate, align_corners=False) so the image covers
// (new_height, new_width), then a centre crop to exactly that size.
Tensor resize_and_crop(const Tensor& image, int64_t new_height, int64_t new_width);

}  // namespace xdit::pipeline
