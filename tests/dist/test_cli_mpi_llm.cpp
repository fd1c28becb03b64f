// The decoder-LLM pipelines under mpirun end to end, from the prompt: Z-Image
// (CFG with a negative prompt of another length; the Qwen3 encoder split
// with the transformer under tensor parallelism) and Qwen-Image (true CFG
// with its per-token rescale): every method writes the serial run's pixels.
#include <gtest/gtest.h>

#include <string>

#include "dist/cli_mpi.h"

namespace xdit {
namespace {

using test::CliMpi;
using test::models;

TEST_F(CliMpi, ZImageParallelRunsWriteTheSerialImages) {
  const auto zimage = [&](const std::string& out, const std::string& extra) {
    return "generate --model '" + models() +
           "/zimage-tiny' --prompt 'a red fox in the snow' --prompt 'a cat' --negative_prompt "
           "'blurry, low quality' --guidance_scale 2 --height 56 --width 40 "
           "--num_inference_steps 3 --seed 5 --max_sequence_length 24 --dtype f32 -o '" +
           path(out) + "' " + extra;
  };
  expect_serial_pixels(zimage, Runs{{2, "--use_cfg_parallel"},
                                    {2, "--ulysses_degree 2"},
                                    {2, "--ring_degree 2"},
                                    {2, "--data_parallel_degree 2"},
                                    {2, "--pipefusion_parallel_degree 2 --warmup_steps 3"},
                                    {2, "--patch_parallel_degree 2 --warmup_steps 3"},
                                    {2, "--tensor_parallel_degree 2"},
                                    {4, "--use_cfg_parallel --ulysses_degree 2"},
                                    {4, "--tensor_parallel_degree 2 --ring_degree 2"}});
  // ZImagePipeline's cfg_truncation and cfg_normalization: each step's whole
  // image on every layout but PipeFusion, which refuses the norm cap.
  const auto limited = [&](const std::string& out, const std::string& extra) {
    return zimage(out, "--cfg_truncation 0.2 --cfg_normalization 1.05 " + extra);
  };
  expect_serial_pixels(limited,
                       Runs{{2, "--use_cfg_parallel"},
                            {2, "--ulysses_degree 2"},
                            {2, "--data_parallel_degree 2"},
                            {4, "--use_cfg_parallel --ring_degree 2"}},
                       "limited_");
  const test::Result r =
      run(2, limited("x.png", "--pipefusion_parallel_degree 2 --warmup_steps 1"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("cfg_normalization needs each step's whole image"), std::string::npos)
      << r.err;
}

TEST_F(CliMpi, QwenImageParallelRunsWriteTheSerialImages) {
  const auto qwen = [&](const std::string& out, const std::string& extra) {
    return "generate --model '" + models() +
           "/qwen-image-tiny' --prompt 'a red fox in the snow' --prompt 'a cat' "
           "--negative_prompt 'blurry' --true_cfg_scale 3 --height 56 --width 40 "
           "--num_inference_steps 3 --seed 5 --max_sequence_length 24 --dtype f32 -o '" +
           path(out) + "' " + extra;
  };
  expect_serial_pixels(qwen, Runs{{2, "--use_cfg_parallel"},
                                  {2, "--ulysses_degree 2"},
                                  {2, "--ring_degree 2"},
                                  {2, "--pipefusion_parallel_degree 2 --warmup_steps 3"},
                                  {2, "--tensor_parallel_degree 2"},
                                  {4, "--ulysses_degree 2 --ring_degree 2"}});
}

}  // namespace
}  // namespace xdit
