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
  MemoryQuery q;
  describe_text(q);
  if (q.t5 == nullptr) return;  // the text side is not open (embeddings given)
  nn::check_divisible(q.t5->num_heads, degree, "attention heads of the T5 text encoder",
                      "--tensor_parallel_degree");
  nn::check_divisible(q.t5->d_ff, degree, "feed-forward units (d_ff) of the T5 text encoder",
                      "--tensor_parallel_degree");
}

int ModelFamily::text_parallel_degree(int ranks) const {
  MemoryQuery q;
  describe_text(q);
  if (q.t5 == nullptr) return 1;
  for (int d = ranks; d > 1; --d)
    if (ranks % d == 0 && q.t5->num_heads % d == 0 && q.t5->d_ff % d == 0) return d;
  return 1;
}

}  // namespace xdit::pipeline
