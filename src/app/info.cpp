// xdit info: what a model folder holds, its sizes, and a memory estimate.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "app/commands.h"
#include "core/error.h"
#include "io/model_folder.h"
#include "io/weights.h"
#include "models/pixart.h"
#include "models/t5.h"
#include "models/vae.h"
#include "pipeline/pixart_pipeline.h"
#include "tokenizers/t5_tokenizer.h"

namespace xdit::app {

namespace {

struct InfoOptions {
  std::string model, dtype = "bf16";
  int64_t height = 0, width = 0, batch = 1;
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

int run_info(InfoOptions o) {
  if (o.model.empty()) o.model = default_model_dir();
  pipeline::PixArtPipeline pipe(o.model, DType::kF32);  // checks configs and weight headers
  const io::ModelFolder& f = pipe.folder();
  const auto& c = pipe.config();
  const DType dt = parse_dtype(o.dtype);
  const double wbytes = dt == DType::kF32 ? 4.0 : 2.0;
  std::ostringstream out;
  out << "model:        " << o.model << " (" << f.pipeline_class() << ")\n";
  io::WeightStore tw(f.component("transformer"));
  const int64_t tp = tw.parameter_count();
  out << "transformer:  PixArtTransformer2DModel, " << c.num_layers << " blocks, hidden "
      << c.hidden() << " (" << c.num_attention_heads << " heads x " << c.attention_head_dim
      << "), patch " << c.patch_size << ", sample size " << c.sample_size << ", caption "
      << c.caption_channels << ", micro-conditions " << (c.use_additional_conditions ? "yes" : "no")
      << "\n"
      << "              " << count(tp) << " parameters, stored " << join(tw.dtypes()) << " ("
      << human_bytes(static_cast<double>(tw.stored_bytes())) << ")\n";
  double text_bytes = 0, vae_bytes = 0;
  int64_t max_len = pipe.default_max_sequence_length();
  if (std::filesystem::is_directory(f.root() + "/text_encoder")) {
    auto t5 = models::T5Config::from_json(f.component_config("text_encoder", "config.json"),
                                          "text_encoder");
    io::WeightStore w(f.component("text_encoder"));
    text_bytes = static_cast<double>(w.parameter_count()) * wbytes;
    out << "text_encoder: T5 encoder, " << t5.num_layers << " layers, d_model " << t5.d_model
        << ", " << t5.num_heads << " heads, " << (t5.gated_gelu ? "gated-gelu" : "relu") << "\n"
        << "              " << count(w.parameter_count()) << " parameters, stored "
        << join(w.dtypes()) << " (" << human_bytes(static_cast<double>(w.stored_bytes())) << ")\n";
  } else {
    out << "text_encoder: (none: generate takes --prompt_embeds)\n";
  }
  if (std::filesystem::is_directory(f.root() + "/tokenizer")) {
    tokenizers::T5Tokenizer tok(f.component("tokenizer"));
    out << "tokenizer:    SentencePiece, " << tok.vocab_size() << " pieces; max sequence length "
        << max_len << "\n";
  }
  int64_t first_ch = 128;
  if (std::filesystem::is_directory(f.root() + "/vae")) {
    auto v = models::VaeConfig::from_json(f.component_config("vae", "config.json"), "vae");
    io::WeightStore w(f.component("vae"));
    vae_bytes = static_cast<double>(v.decoder_parameter_count()) * wbytes;
    first_ch = v.block_out_channels.front();
    out << "vae:          AutoencoderKL, blocks";
    for (int64_t ch : v.block_out_channels) out << " " << ch;
    out << ", scale factor " << v.scale_factor() << ", scaling " << v.scaling_factor << "\n"
        << "              " << count(v.decoder_parameter_count()) << " decoder parameters of "
        << count(w.parameter_count()) << ", stored " << join(w.dtypes()) << "\n";
  }
  out << "scheduler:    DPMSolverMultistepScheduler\n";
  // Memory estimate: weights in the compute type, plus the largest activations.
  const int64_t vsf = pipe.vae_scale_factor();
  const int64_t H = o.height ? o.height : c.sample_size * vsf,
                W = o.width ? o.width : c.sample_size * vsf;
  const double B = 2.0 * static_cast<double>(o.batch);  // with CFG
  const double tokens = static_cast<double>((H / vsf / c.patch_size) * (W / vsf / c.patch_size));
  const double act =
      B * tokens * static_cast<double>(c.hidden()) * 4.0 * 12.0;  // residual, qkv, ff, ...
  const double vae_act =
      static_cast<double>(o.batch) * H * W * static_cast<double>(first_ch) * 4.0 * 4.0;
  const double tr = static_cast<double>(tp) * wbytes;
  out << "memory (estimate, --dtype " << o.dtype << ", " << W << "x" << H << ", " << o.batch
      << " image(s), CFG): text encoder " << human_bytes(text_bytes)
      << " (freed after encoding); transformer " << human_bytes(tr) << " + activations "
      << human_bytes(act) << "; VAE decode " << human_bytes(vae_bytes) << " + "
      << human_bytes(vae_act) << "; peak about "
      << human_bytes(std::max(text_bytes, tr + std::max(act, vae_bytes + vae_act))) << "\n";
  std::cout << out.str();
  return 0;
}

}  // namespace

std::function<int()> add_info(CLI::App& app) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* i =
      app.add_subcommand("info", "describe a model folder: architecture, sizes, memory estimate");
  i->add_option("--model", o->model, "diffusers PixArt folder (default: the built-in tiny model)");
  i->add_option("--dtype", o->dtype, "compute type for the estimate")->capture_default_str();
  i->add_option("--height", o->height, "image height for the estimate (default: the model's)");
  i->add_option("--width", o->width, "image width for the estimate (default: the model's)");
  i->add_option("--batch", o->batch, "images per batch for the estimate")->capture_default_str();
  return [o] { return run_info(*o); };
}

}  // namespace xdit::app
