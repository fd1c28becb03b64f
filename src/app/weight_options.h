// --transformer and --weights_dtype, shared by xdit generate and xdit serve
// (docs/quantization.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/device.h"
#include "pipeline/pipeline.h"

namespace xdit::app {

struct WeightOptions {
  std::string transformer;    // a single-file checkpoint of the transformer
  std::string weights_dtype;  // "", int8, fp8, q8_0 (kernels::WeightFormat)
  void add_to(CLI::App* app);
  // Before the load: the file checked against the config, the format set
  // (refused in one line on a CUDA device).
  void apply(pipeline::Pipeline& pipe, const Device& device) const;
};

}  // namespace xdit::app
