// xdit info: what a model folder holds, its sizes, and a memory estimate.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "app/commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "io/model_folder.h"
#include "io/model_ref.h"
#include "io/weights.h"
#include "kernels/kernels.h"
#include "models/clip.h"
#include "models/qwen_text.h"
#include "models/t5.h"
#include "models/vae.h"
#include "models/wan_vae.h"
#include "pipeline/pipeline.h"
#include "tokenizers/clip_tokenizer.h"
#include "tokenizers/qwen_tokenizer.h"
#include "tokenizers/t5_tokenizer.h"

namespace xdit::app {

namespace {

struct InfoOptions {
  std::string model, dtype = "bf16";
  int64_t height = 0, width = 0, batch = 1;
  bool check_weights = false;
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "/") + x;
  return s;
}

std::string count(int64_t n) {
  char buf[32];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.1f M", n / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f K", n / 1e3);
  return buf;
}

// Scans every weight of every component for NaN/Inf; prints one line per
// tensor that holds any. Returns the number of such tensors.
int64_t check_weights(const io::ModelFolder& f, const pipeline::ModelFamily& family,
                      std::ostream& out) {
  int64_t bad_tensors = 0, tensors = 0;
  for (const auto& [comp, kind] : family.components()) {  // every one the family has
    if (!pipeline::ModelFamily::has_weights(kind)) continue;
    if (!std::filesystem::is_directory(f.root() + "/" + comp)) continue;
    io::WeightStore w(f.component(comp));
    const auto bad = w.nonfinite_tensors();
    tensors += static_cast<int64_t>(w.names().size());
    for (const auto& [name, n] : bad) {
      const Shape shape = w.shape(name);
      out << "non-finite:   " << comp << "/" << name << " " << shape_str(shape) << ": " << n
          << " NaN/Inf of " << shape_numel(shape) << " values\n";
    }
    bad_tensors += static_cast<int64_t>(bad.size());
  }
  out << "weights:      " << tensors << " tensors scanned, " << bad_tensors
      << " with NaN/Inf values\n";
  return bad_tensors;
}

int run_info(InfoOptions o) {
  if (o.model.empty()) o.model = default_model_dir();
  const DType dt = parse_dtype(o.dtype);
  const io::ModelRef model = io::resolve_model(o.model);
  pipeline::Pipeline pipe(model.folder, dt);  // checks configs and weight headers
  const io::ModelFolder& f = pipe.folder();
  const pipeline::ModelFamily& family = pipe.family();
  std::ostringstream out;
  out << "model:        " << model.describe() << " (" << f.pipeline_class() << ": " << family.name()
      << ")\n";
  using Kind = pipeline::ModelFamily::ComponentKind;
  io::WeightStore tw(f.component(family.component(Kind::kTransformer)));
  const int64_t tp = tw.parameter_count();
  out << "transformer:  " << family.describe() << "\n"
      << "              " << count(tp) << " parameters, stored " << join(tw.dtypes()) << " ("
      << human_size(static_cast<double>(tw.stored_bytes())) << ")\n";
  if (family.boundary_ratio() > 0) {
    const double boundary = family.boundary_ratio() *
                            static_cast<double>(pipe.scheduler_config().num_train_timesteps());
    io::WeightStore tw2(f.component("transformer_2"));
    out << "transformer_2: the low-noise expert, " << count(tw2.parameter_count())
        << " parameters, stored " << join(tw2.dtypes()) << " ("
        << human_size(static_cast<double>(tw2.stored_bytes())) << "): the steps with t < "
        << boundary << " (transformer: t >= " << boundary
        << "), at --guidance_scale_2; generate holds one expert at a time\n";
  }
  pipeline::MemoryQuery q;
  std::optional<models::T5Config> t5;
  std::optional<models::ClipTextConfig> clip;
  std::optional<models::QwenTextConfig> qwen;
  std::optional<models::VaeConfig> vae;
  const int64_t max_len = pipe.default_max_sequence_length();
  bool any_encoder = false;
  const auto components = family.components();  // the family says what it has
  for (const auto& [comp, kind] : components) {
    if (kind != Kind::kT5Encoder && kind != Kind::kClipEncoder && kind != Kind::kQwenEncoder)
      continue;
    if (!std::filesystem::is_directory(f.root() + "/" + comp)) continue;
    any_encoder = true;
    const std::string where = f.component(comp) + "/config.json";
    const io::Json j = f.component_config(comp, "config.json");
    io::WeightStore w(f.component(comp));
    const std::string label =
        std::string(comp) + ":" + std::string(std::max<size_t>(1, 15 - std::strlen(comp)), ' ');
    if (kind == Kind::kQwenEncoder) {
      qwen = models::QwenTextConfig::from_json(j, where);
      out << label << qwen->model_type << " decoder LLM, " << qwen->num_layers << " layers, hidden "
          << qwen->hidden_size << ", " << qwen->num_heads << " heads (" << qwen->num_kv_heads
          << " key/value), feed-forward " << qwen->intermediate_size;
    } else if (kind == Kind::kT5Encoder) {
      t5 = models::T5Config::from_json(j, where);
      // SD3 and FLUX: the CLIP of text_encoder / text_encoder_2 counts too.
      out << label << (t5->bias_per_block ? "UMT5" : "T5") << " encoder, " << t5->num_layers
          << " layers, d_model " << t5->d_model << ", " << t5->num_heads << " heads, "
          << (t5->gated_gelu ? "gated-gelu" : "relu");
    } else {
      const auto c = models::ClipTextConfig::from_json(j, where);
      if (!clip || c.parameter_count() > clip->parameter_count()) clip = c;  // the larger one
      out << label << "CLIP text encoder, " << c.num_hidden_layers << " layers, hidden "
          << c.hidden_size << ", " << c.num_attention_heads << " heads, "
          << c.max_position_embeddings << " tokens"
          << (c.projection_dim > 0 ? ", projection " + std::to_string(c.projection_dim) : "");
    }
    out << "\n"
        << "              " << count(w.parameter_count()) << " parameters, stored "
        << join(w.dtypes()) << " (" << human_size(static_cast<double>(w.stored_bytes())) << ")\n";
  }
  if (!any_encoder) out << "text_encoder: (none: generate takes --prompt_embeds)\n";
  for (const auto& [comp, kind] : components) {
    if (kind != Kind::kT5Tokenizer && kind != Kind::kClipTokenizer && kind != Kind::kQwenTokenizer)
      continue;
    const std::string dir = f.root() + "/" + comp;
    const char* vocab = kind == Kind::kT5Tokenizer     ? "/spiece.model"
                        : kind == Kind::kClipTokenizer ? "/vocab.json"
                                                       : "/tokenizer_config.json";
    if (!std::filesystem::is_regular_file(dir + vocab)) continue;  // embeddings-only folders
    const std::string label =
        std::string(comp) + ":" + std::string(std::max<size_t>(1, 13 - std::strlen(comp)), ' ');
    if (kind == Kind::kQwenTokenizer) {
      tokenizers::QwenTokenizer tok(dir);
      out << label << "Qwen2 byte-level BPE, " << tok.vocab_size()
          << " tokens; max sequence length " << max_len << "\n";
    } else if (kind == Kind::kT5Tokenizer) {
      tokenizers::T5Tokenizer tok(dir);
      out << label << "SentencePiece, " << tok.vocab_size() << " pieces; max sequence length "
          << max_len << " (the tokenizer takes at most " << tok.model_max_length() << ")\n";
    } else {
      tokenizers::ClipTokenizer tok(dir);
      out << label << "CLIP byte-level BPE, " << tok.vocab_size() << " tokens; "
          << tok.model_max_length() << " tokens per prompt\n";
    }
  }
  const Kind vae_kind = family.vae_kind();
  const char* vae_dir = family.component(vae_kind);
  std::optional<models::WanVaeConfig> wan_vae;
  if (std::filesystem::is_directory(f.root() + "/" + vae_dir)) {
    const std::string where = f.component(vae_dir) + "/config.json";
    const io::Json cfg = f.component_config(vae_dir, "config.json");
    io::WeightStore w(f.component(vae_dir));
    const std::string label = std::string(vae_dir) + ":" +
                              std::string(std::max<size_t>(1, 13 - std::strlen(vae_dir)), ' ');
    int64_t decoder_parameters = 0;
    if (vae_kind == Kind::kAutoencoderKLWan) {
      wan_vae = models::WanVaeConfig::from_json(cfg, where);
      out << label << "AutoencoderKLWan, base " << wan_vae->base_dim << " x";
      for (int64_t m : wan_vae->dim_mult) out << " " << m;
      out << ", " << wan_vae->z_dim << " latent channels, scale factor "
          << wan_vae->spatial_factor() << " (space) x " << wan_vae->temporal_factor()
          << " (time)\n";
      for (const auto& [name, shape] : wan_vae->decoder_weight_specs())
        decoder_parameters += shape_numel(shape);
    } else {
      vae = models::VaeConfig::from_json(cfg, where);
      out << label << "AutoencoderKL, blocks";
      for (int64_t ch : vae->block_out_channels) out << " " << ch;
      out << ", " << vae->latent_channels << " latent channels, scale factor "
          << vae->scale_factor() << ", scaling " << vae->scaling_factor;
      if (vae->shift_factor != 0) out << ", shift " << vae->shift_factor;
      out << "\n";
      decoder_parameters = vae->decoder_parameter_count();
    }
    out << "              " << count(decoder_parameters) << " decoder parameters of "
        << count(w.parameter_count()) << ", stored " << join(w.dtypes()) << "\n";
  }
  out << "scheduler:    " << pipe.scheduler_config().class_name() << "\n";
  out << "defaults:     " << family.default_steps() << " steps, guidance_scale "
      << family.guider().default_guidance() << "\n";
  // Memory estimate: the same one generate checks requests against.
  const int64_t vsf = pipe.vae_scale_factor();
  q.prompts = o.batch;
  q.run_height = q.out_height = o.height ? o.height : family.default_height(vsf);
  q.run_width = q.out_width = o.width ? o.width : family.default_width(vsf);
  q.frames = family.default_frames();
  q.latent_frames = (q.frames - 1) / pipe.vae_factors().temporal + 1;
  q.text_tokens = max_len;
  q.dtype = dt;
  q.vae_scale_factor = vsf;
  pipeline::GuidanceSettings asked;  // nothing asked: the defaults, no negative prompt
  asked.guidance_scale = asked.true_cfg_scale = pipeline::kDefaultGuidance;
  q.cfg = family.guider().two_predictions(family.guider().resolved(asked));
  q.t5 = t5 ? &*t5 : nullptr;
  q.clip = clip ? &*clip : nullptr;
  q.qwen = qwen ? &*qwen : nullptr;
  q.qwen_layers = qwen ? family.text_layers_run(qwen->num_layers) : 0;
  q.vae = vae ? &*vae : nullptr;
  q.wan_vae = wan_vae ? &*wan_vae : nullptr;
  const pipeline::MemoryEstimate e =
      pipeline::estimate_memory(family.spec(), family.parameter_count(), q);
  std::string source;
  const size_t avail = available_memory_bytes(&source);
  out << "memory (estimate, --dtype " << o.dtype << ", " << q.run_width << "x" << q.run_height
      << (q.frames > 1 ? ", " + std::to_string(q.frames) + " frames" : std::string()) << ", "
      << o.batch << (q.frames > 1 ? " video(s)" : " image(s)") << (q.cfg ? ", CFG" : "")
      << "): " << e.describe() << "; peak about " << human_size(e.peak())
      << " (text encoders freed after encoding)";
  if (avail > 0) out << "; available " << human_size(static_cast<double>(avail));
  out << "\n";
  out << "cpu:          " << kernels::cpu_isa_level_name(kernels::cpu_isa()) << " kernels (oneDNN "
      << kernels::cpu_isa_name() << ")";
  if (kernels::cpu_hardware_isa() != kernels::cpu_isa())
    out << ", capped by ONEDNN_MAX_CPU_ISA from "
        << kernels::cpu_isa_level_name(kernels::cpu_hardware_isa());
  out << "; bf16 " << (kernels::cpu_has_bf16() ? "native" : "computed in f32") << "\n";
  const int64_t bad = o.check_weights ? check_weights(f, family, out) : 0;
  std::cout << out.str();
  XDIT_CHECK(bad == 0, bad,
             " weight tensor(s) hold NaN/Inf values (listed above): the model "
             "files are damaged or were saved from a diverged run");
  return 0;
}

int run_list_models() {
  const auto models = io::list_cached_models();
  const auto& ok = pipeline::ModelFamily::supported_pipelines();
  std::ostringstream out;
  int n = 0;
  for (const auto& m : models) {
    if (std::find(ok.begin(), ok.end(), m.pipeline_class) == ok.end()) continue;
    std::string refs;
    for (const auto& r : m.refs) refs += (refs.empty() ? "" : ",") + r;
    char line[512];
    std::snprintf(line, sizeof line, "%-48s %-20s %-12s %-10s %s\n", m.id.c_str(),
                  m.pipeline_class.c_str(), m.commit.substr(0, 12).c_str(),
                  refs.empty() ? "-" : refs.c_str(),
                  human_size(static_cast<double>(m.bytes)).c_str());
    if (n++ == 0)
      out << "model                                            pipeline             revision     "
             "refs       size\n";
    out << line;
  }
  if (n == 0)
    out << "no pipelines xdit can run in the Hugging Face cache at " << io::hf_hub_cache()
        << " (download one with `huggingface-cli download PixArt-alpha/PixArt-XL-2-1024-MS`)\n";
  std::cout << out.str();
  return 0;
}

}  // namespace

std::function<int()> add_list_models(CLI::App& app) {
  app.add_subcommand("list-models",
                     "list the diffusers pipelines in the Hugging Face cache that xdit can run");
  return [] { return run_list_models(); };
}

std::function<int()> add_info(CLI::App& app) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* i =
      app.add_subcommand("info", "describe a model folder: architecture, sizes, memory estimate");
  i->add_option(
      "--model", o->model,
      "diffusers PixArt, FLUX.1 or SD3 folder, or a Hugging Face repo id ORG/NAME[@REVISION] "
      "in the local "
      "cache (default: the built-in tiny model)");
  i->add_option("--dtype", o->dtype, "compute type for the estimate")->capture_default_str();
  i->add_option("--batch", o->batch, "images per batch for the estimate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  i->add_option("--height", o->height, "image height for the estimate (default: the model's)")
      ->check(CLI::Range(int64_t{1}, pipeline::Pipeline::kMaxImageSide));
  i->add_option("--width", o->width, "image width for the estimate (default: the model's)")
      ->check(CLI::Range(int64_t{1}, pipeline::Pipeline::kMaxImageSide));
  i->add_flag("--check-weights,--check_weights", o->check_weights,
              "scan every weight for NaN/Inf values and list the tensors that hold any");
  return [o] { return run_info(*o); };
}

}  // namespace xdit::app
