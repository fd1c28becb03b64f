// The tiny random-weight models in models/ (models/<name>-tiny), one row
// each: the one list from which the test suites that loop over families take
// their models. A suite names itself in a row's `suites` to take that model;
// a new family adds its rows here, and tests/parity/test_tiny_models.cpp
// fails while a pipeline class the registry runs has none (as llama.cpp's
// test-llama-archs does for its architectures).
#pragma once

#include <initializer_list>
#include <set>
#include <string>
#include <vector>

namespace xdit::test {

// The suites that loop over the tiny models.
enum class Suite {
  kParallel,     // dist/test_parallel: every exact layout = the serial run
  kPatch,        // dist/test_patch: DistriFusion and naive patch within measured bounds
  kStepCache,    // dist/test_step_cache_mpi: caches under every layout
  kBlockHook,    // parity/test_block_hook: the block seam
  kWeightsDtype  // e2e/test_weights_dtype: int8 / fp8 / q8_0 weights vs bf16
};

struct TinyModel {
  std::string name;      // models/<name>-tiny
  std::string pipeline;  // its model_index.json _class_name
  std::set<Suite> suites;
};

inline const std::vector<TinyModel>& tiny_models() {
  using S = Suite;
  static const std::vector<TinyModel> rows = {
      {"pixart-alpha",
       "PixArtAlphaPipeline",
       {S::kParallel, S::kPatch, S::kStepCache, S::kBlockHook, S::kWeightsDtype}},
      {"pixart-sigma", "PixArtSigmaPipeline", {S::kParallel, S::kPatch, S::kWeightsDtype}},
      {"flux-dev",
       "FluxPipeline",
       {S::kParallel, S::kPatch, S::kStepCache, S::kBlockHook, S::kWeightsDtype}},
      {"flux-schnell", "FluxPipeline", {S::kParallel, S::kStepCache, S::kWeightsDtype}},
      {"sd3",
       "StableDiffusion3Pipeline",
       {S::kParallel, S::kStepCache, S::kBlockHook, S::kWeightsDtype}},
      {"sd35", "StableDiffusion3Pipeline", {S::kParallel, S::kPatch, S::kWeightsDtype}},
      {"wan21", "WanPipeline", {S::kParallel, S::kPatch, S::kStepCache, S::kBlockHook}},
      {"wan22", "WanPipeline", {S::kParallel, S::kPatch, S::kStepCache}},
      {"wan22-ti2v", "WanPipeline", {S::kParallel}},
      {"zimage", "ZImagePipeline", {S::kParallel, S::kPatch, S::kStepCache, S::kBlockHook}},
      {"qwen-image", "QwenImagePipeline", {S::kParallel, S::kPatch, S::kStepCache, S::kBlockHook}},
  };
  return rows;
}

// The names of the rows in `suite`, in the table's order, with `suffix`
// appended ("-tiny": the folder's name).
inline std::vector<std::string> tiny_models_in(Suite suite, const std::string& suffix = "") {
  std::vector<std::string> names;
  for (const TinyModel& m : tiny_models())
    if (m.suites.count(suite) > 0) names.push_back(m.name + suffix);
  return names;
}

}  // namespace xdit::test
