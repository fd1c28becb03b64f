#include "pipeline/model_family.h"

#include <algorithm>

#include "core/error.h"
#include "pipeline/family_util.h"

namespace xdit::pipeline {

const std::vector<std::string>& ModelFamily::supported_pipelines() {
  static const std::vector<std::string> names{"PixArtAlphaPipeline", "PixArtSigmaPipeline",
                                              "FluxPipeline", "StableDiffusion3Pipeline"};
  return names;
}

std::unique_ptr<ModelFamily> ModelFamily::from_folder(const io::ModelFolder& folder) {
  const std::string cls = folder.pipeline_class();
  if (cls == "PixArtAlphaPipeline" || cls == "PixArtSigmaPipeline")
    return make_pixart_family(folder);
  if (cls == "FluxPipeline") return make_flux_family(folder);
  if (cls == "StableDiffusion3Pipeline") return make_sd3_family(folder);
  std::string list;
  for (const auto& n : supported_pipelines()) list += (list.empty() ? "" : ", ") + n;
  XDIT_FAIL(folder.root(), "/model_index.json names the pipeline \"", cls,
            "\", which xdit does not run; supported pipelines: ", list);
}

void ModelFamily::check_tensor_parallel(int degree) const {
  if (!t5_cfg_) return;  // the text side is not open (embeddings given)
  nn::check_divisible(t5_cfg_->num_heads, degree, "attention heads of the T5 text encoder",
                      "--tensor_parallel_degree");
  nn::check_divisible(t5_cfg_->d_ff, degree, "feed-forward units (d_ff) of the T5 text encoder",
                      "--tensor_parallel_degree");
}

models::T5Encoder& ModelFamily::t5_encoder(DType dtype) {
  XDIT_CHECK(t5_cfg_ && t5_weights_, "encode before the text side was opened");
  if (!t5_)
    t5_ = std::make_unique<models::T5Encoder>(*t5_cfg_, *t5_weights_, dtype, text_tp_,
                                              text_resident_);
  return *t5_;
}

int ModelFamily::text_parallel_degree(int ranks) const {
  if (!t5_cfg_) return 1;
  for (int d = ranks; d > 1; --d)
    if (ranks % d == 0 && t5_cfg_->num_heads % d == 0 && t5_cfg_->d_ff % d == 0) return d;
  return 1;
}

}  // namespace xdit::pipeline
