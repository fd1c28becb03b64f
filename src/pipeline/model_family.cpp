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

}  // namespace xdit::pipeline
