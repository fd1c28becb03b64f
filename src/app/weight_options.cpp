#include "app/weight_options.h"

#include "core/error.h"
#include "kernels/linear.h"

namespace xdit::app {

void WeightOptions::add_to(CLI::App* app) {
  app->add_option("--transformer", transformer,
                  "the transformer's weights from one file instead of --model's folder (whose "
                  "configs and other components are still used): a GGUF of FLUX.1's, SD3 / "
                  "SD3.5's, Z-Image's, Qwen-Image's or Wan's layout, as the community's GGUF files "
                  "(F32/F16/BF16, Q8_0, Q4_0/1, Q5_0/1, Q4_K, Q5_K, Q6_K; quantized matrices "
                  "stay quantized in memory), or a single-file safetensors of that layout "
                  "(F32/F16/BF16)");
  app->add_option("--weights_dtype", weights_dtype,
                  "keep the transformer's float weights as int8 (per output channel, run on the "
                  "CPU's int8 dot products against activations quantized per token), fp8 "
                  "(e4m3, decoded into the compute type) or q8_0 (GGUF's Q8_0 blocks, as a Q8_0 "
                  "GGUF file's matrices run); default: as --dtype")
      ->check(CLI::IsMember({"int8", "fp8", "q8_0"}));
}

void WeightOptions::apply(pipeline::Pipeline& pipe, const Device& device) const {
  if (!transformer.empty()) pipe.set_transformer_file(transformer);
  pipe.check_transformer_weights();
  const kernels::WeightFormat format = kernels::parse_weight_format(weights_dtype);
  XDIT_CHECK(format == kernels::WeightFormat::kCompute || !device.cuda(), "--weights_dtype ",
             weights_dtype,
             " runs on the CPU only so far (fp8 through cuBLASLt has not run on a GPU yet)");
  pipe.set_weights_format(format);
}

}  // namespace xdit::app
