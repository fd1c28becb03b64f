#include "app/png_metadata.h"

namespace xdit::app {

namespace {

// "7,8,9 scale 2.8 from 0.01 to 0.2", or "" when off.
std::string skip_layers_text(const pipeline::SkipLayerGuidance& s) {
  if (!s.on()) return "";
  std::string t;
  for (const int64_t l : s.layers) {
    if (!t.empty()) t += ',';  // (not "," + to_string: GCC 12 warns -Wrestrict on that)
    t += std::to_string(l);
  }
  return t + " scale " + std::to_string(s.scale) + " from " + std::to_string(s.start) + " to " +
         std::to_string(s.stop);
}

}  // namespace

std::string parallel_label(const parallel::ParallelConfig& c, int64_t steps, int64_t token_rows) {
  if (c.serial()) return "serial (1 process)";
  if (c.dynamic_weights && c.data_parallel_degree > 1) {
    // Each replica balances its own rows: rank 0's weights say nothing of
    // the image another replica made.
    parallel::ParallelConfig without = c;
    without.patch_weights.clear();
    return without.label(steps, token_rows);
  }
  return c.label(steps, token_rows);
}

std::map<std::string, std::string> png_metadata(const ImageMetadata& m) {
  std::string software = std::string("xdit ") + XDIT_VERSION;
  if (!m.software_note.empty()) software += " " + m.software_note;
  return {
      {"model_revision", m.model_revision},  // empty (left out) for a folder
      {"model_folder", m.model_folder},
      {"prompt", m.prompt},
      {"negative_prompt", m.negative_prompt},
      {"seed", std::to_string(m.seed)},
      {"num_inference_steps", std::to_string(m.steps)},
      {"guidance_scale", std::to_string(m.guidance)},
      {"guidance_scale_2", m.guidance_2 >= 0 ? std::to_string(m.guidance_2) : ""},
      {"true_cfg_scale", m.true_cfg != 1.0 ? std::to_string(m.true_cfg) : ""},
      {"cfg_truncation", m.cfg_truncation != 1.0 ? std::to_string(m.cfg_truncation) : ""},
      {"cfg_normalization", m.cfg_normalization != 0.0 ? std::to_string(m.cfg_normalization) : ""},
      {"max_sequence_length",
       m.max_sequence_length > 0 ? std::to_string(m.max_sequence_length) : ""},
      {"skip_guidance_layers", skip_layers_text(m.slg)},
      {"size", std::to_string(m.width) + "x" + std::to_string(m.height)},
      {"model", m.model},
      {"pipeline", m.pipeline},
      {"dtype", m.dtype},
      {"parallel", m.parallel},
      {"cache", m.cache},
      {"lora", m.lora},
      {"software", software}};
}

}  // namespace xdit::app
