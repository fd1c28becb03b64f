#include "nn/lora_formats.h"

#include <regex>
#include <set>

#include "core/error.h"

namespace xdit::nn {

namespace {

std::string replace_all(std::string s, char from, char to) {
  for (char& c : s)
    if (c == from) c = to;
  return s;
}

// The components diffusers' pipelines name in LoRA keys.
bool is_component(const std::string& s) {
  return s == "transformer" || s == "text_encoder" || s == "text_encoder_2" ||
         s == "text_encoder_3";
}

// diffusers' modules that one of FLUX.1's original (BFL) linears becomes.
struct FluxTarget {
  std::vector<std::string> modules;
  std::vector<int> parts;  // B's row proportions when fused
  bool swap_halves = false;
};

// FLUX.1's original linear names, '.' written '_' as sd-scripts does
// ("double_blocks_3_img_attn_qkv"), as diffusers'
// `_convert_sd_scripts_to_ai_toolkit` maps them; false for another name.
bool flux_target(const std::string& name, FluxTarget& t) {
  static const std::map<std::string, FluxTarget> kDouble = {
      {"img_attn_proj", {{"attn.to_out.0"}, {}}},
      {"img_attn_qkv", {{"attn.to_q", "attn.to_k", "attn.to_v"}, {1, 1, 1}}},
      {"img_mlp_0", {{"ff.net.0.proj"}, {}}},
      {"img_mlp_2", {{"ff.net.2"}, {}}},
      {"img_mod_lin", {{"norm1.linear"}, {}}},
      {"txt_attn_proj", {{"attn.to_add_out"}, {}}},
      {"txt_attn_qkv", {{"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}, {1, 1, 1}}},
      {"txt_mlp_0", {{"ff_context.net.0.proj"}, {}}},
      {"txt_mlp_2", {{"ff_context.net.2"}, {}}},
      {"txt_mod_lin", {{"norm1_context.linear"}, {}}},
  };
  // linear1 = q | k | v | MLP in: diffusers' dims [3072, 3072, 3072, 12288]
  // for FLUX.1, i.e. 1 : 1 : 1 : 4 (mlp_ratio 4) at any width.
  static const std::map<std::string, FluxTarget> kSingle = {
      {"linear1", {{"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"}, {1, 1, 1, 4}}},
      {"linear2", {{"proj_out"}, {}}},
      {"modulation_lin", {{"norm.linear"}, {}}},
  };
  // diffusers 0.42 converts these without the "transformer." prefix and so
  // never loads them; xdit applies them, as sd-scripts and ComfyUI do.
  static const std::map<std::string, FluxTarget> kGlobal = {
      {"guidance_in_in_layer", {{"time_text_embed.guidance_embedder.linear_1"}, {}}},
      {"guidance_in_out_layer", {{"time_text_embed.guidance_embedder.linear_2"}, {}}},
      {"img_in", {{"x_embedder"}, {}}},
      {"txt_in", {{"context_embedder"}, {}}},
      {"time_in_in_layer", {{"time_text_embed.timestep_embedder.linear_1"}, {}}},
      {"time_in_out_layer", {{"time_text_embed.timestep_embedder.linear_2"}, {}}},
      {"vector_in_in_layer", {{"time_text_embed.text_embedder.linear_1"}, {}}},
      {"vector_in_out_layer", {{"time_text_embed.text_embedder.linear_2"}, {}}},
      // BFL's final modulation is shift | scale, diffusers' scale | shift.
      {"final_layer_adaLN_modulation_1", {{"norm_out.linear"}, {}, true}},
      {"final_layer_linear", {{"proj_out"}, {}}},
  };
  static const std::regex block(R"(^(double|single)_blocks_(\d+)_(.+)$)");
  std::smatch m;
  if (std::regex_match(name, m, block)) {
    const auto& table = m[1] == "double" ? kDouble : kSingle;
    const auto it = table.find(m[3]);
    if (it == table.end()) return false;
    t = it->second;
    const std::string prefix =
        (m[1] == "double" ? "transformer_blocks." : "single_transformer_blocks.") + m[2].str() +
        ".";
    for (std::string& mod : t.modules) mod = prefix + mod;
    return true;
  }
  const auto it = kGlobal.find(name);
  if (it == kGlobal.end()) return false;
  t = it->second;
  return true;
}

// A CLIP module as sd-scripts names it after "lora_te1_"
// ("text_model_encoder_layers_0_self_attn_q_proj") → transformers' name.
bool clip_target(const std::string& name, std::string& module) {
  static const std::regex layer(
      R"(^text_model_encoder_layers_(\d+)_(self_attn_(q|k|v|out)_proj|mlp_fc(1|2))$)");
  std::smatch m;
  if (!std::regex_match(name, m, layer)) return false;
  const std::string part = m[2];
  module =
      "text_model.encoder.layers." + m[1].str() + "." +
      (part.starts_with("self_attn_") ? "self_attn." + part.substr(10) : "mlp." + part.substr(4));
  return true;
}

// A T5 module as sd-scripts names it after "lora_te3_"
// ("encoder_block_0_layer_1_DenseReluDense_wi_0") → transformers' name.
bool t5_target(const std::string& name, std::string& module) {
  static const std::regex layer(
      R"(^encoder_block_(\d+)_layer_(\d+)_(SelfAttention|DenseReluDense)_(q|k|v|o|wi_0|wi_1|wi|wo)$)");
  std::smatch m;
  if (!std::regex_match(name, m, layer)) return false;
  module =
      "encoder.block." + m[1].str() + ".layer." + m[2].str() + "." + m[3].str() + "." + m[4].str();
  return true;
}

// sd-scripts' (kohya) and BFL's names with lora_down / lora_up / alpha, as
// diffusers' `_convert_kohya_flux_lora_to_diffusers` reads them.
void read_kohya(const std::map<std::string, io::TensorEntry>& entries, LoraLayout& out) {
  const std::string kDown = ".lora_down.weight", kUp = ".lora_up.weight";
  std::set<std::string> taken;
  for (const auto& [key, entry] : entries) {
    if (!key.ends_with(kDown)) continue;
    const std::string base = key.substr(0, key.size() - kDown.size());
    // BFL's names as ComfyUI writes them → sd-scripts' ('.' → '_').
    std::string name = base;
    if (name.starts_with("diffusion_model.")) {
      name = "lora_unet_" + name.substr(16);
      out.format = "bfl";
    } else if (name.starts_with("text_encoders.clip_l.transformer.")) {
      name = "lora_te_" + name.substr(33);
    } else if (name.starts_with("text_encoders.t5xxl.transformer.")) {
      name = "lora_te3_" + name.substr(32);
    }
    name = replace_all(name, '.', '_');
    LoraKey k;
    k.down = key;
    k.up = base + kUp;
    if (entries.count(base + ".alpha")) k.alpha = base + ".alpha";
    k.alpha_rule = LoraAlpha::kKeyOrRank;
    bool known = false;
    FluxTarget t;
    std::string clip;
    if (name.starts_with("lora_unet_") && flux_target(name.substr(10), t)) {
      known = true;
      k.swap_halves = t.swap_halves;
      k.parts = t.parts;
      for (size_t i = 0; i < t.modules.size(); ++i) {
        k.component = "transformer";
        k.module = t.modules[i];
        k.part = static_cast<int>(i);
        out.keys.push_back(k);
      }
    } else if ((name.starts_with("lora_te_") && clip_target(name.substr(8), clip)) ||
               (name.starts_with("lora_te1_") && clip_target(name.substr(9), clip))) {
      known = true;
      k.component = "text_encoder";
      k.module = clip;
      out.keys.push_back(k);
    } else if (name.starts_with("lora_te3_") && t5_target(name.substr(9), clip)) {
      // sd-scripts' T5-XXL (diffusers drops it; FLUX.1's text_encoder_2).
      known = true;
      k.component = "text_encoder_2";
      k.module = clip;
      out.keys.push_back(k);
    }
    if (known) taken.insert({k.down, k.up, k.alpha});
  }
  for (const auto& [key, entry] : entries)
    if (taken.count(key) == 0) out.unread.push_back(key);
}

// XLabs' FLUX.1 processors, as diffusers' `_convert_xlabs_flux_lora_to_diffusers`.
void read_xlabs(const std::map<std::string, io::TensorEntry>& entries, LoraLayout& out) {
  static const std::regex key_re(
      R"(^(?:diffusion_model\.)?(double|single)_blocks\.(\d+)\.processor\.(\w+)\.down\.weight$)");
  static const std::map<std::string, std::vector<std::string>> kDouble = {
      {"qkv_lora1", {"attn.to_q", "attn.to_k", "attn.to_v"}},
      {"qkv_lora2", {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}},
      {"proj_lora1", {"attn.to_out.0"}},
      {"proj_lora2", {"attn.to_add_out"}},
  };
  static const std::map<std::string, std::vector<std::string>> kSingle = {
      {"qkv_lora", {"attn.to_q", "attn.to_k", "attn.to_v"}},
      {"proj_lora", {"proj_out"}},
  };
  std::set<std::string> taken;
  for (const auto& [key, entry] : entries) {
    std::smatch m;
    if (!std::regex_match(key, m, key_re)) continue;
    const bool dbl = m[1] == "double";
    const auto& table = dbl ? kDouble : kSingle;
    const auto it = table.find(m[3]);
    if (it == table.end()) continue;
    LoraKey k;
    k.component = "transformer";
    k.down = key;
    k.up = key.substr(0, key.size() - 12) + ".up.weight";
    k.alpha_rule = LoraAlpha::kRank;
    if (it->second.size() > 1) k.parts.assign(it->second.size(), 1);
    const std::string prefix =
        (dbl ? "transformer_blocks." : "single_transformer_blocks.") + m[2].str() + ".";
    for (size_t i = 0; i < it->second.size(); ++i) {
      k.module = prefix + it->second[i];
      k.part = static_cast<int>(i);
      out.keys.push_back(k);
    }
    taken.insert({k.down, k.up});
  }
  for (const auto& [key, entry] : entries)
    if (taken.count(key) == 0) out.unread.push_back(key);
}

// diffusers / PEFT: "<component>.<module>.lora_A.weight" (or, as diffusers
// also reads, lora_down / lora_up under a component's name).
void read_diffusers(const std::map<std::string, io::TensorEntry>& entries, const std::string& down,
                    const std::string& up, LoraLayout& out) {
  std::set<std::string> taken;
  for (const auto& [key, entry] : entries) {
    if (!key.ends_with(down)) continue;
    const std::string prefix = key.substr(0, key.size() - down.size());
    const size_t dot = prefix.find('.');
    if (dot == std::string::npos || !is_component(prefix.substr(0, dot))) continue;
    LoraKey k;
    k.component = prefix.substr(0, dot);
    k.module = prefix.substr(dot + 1);
    k.down = key;
    k.up = prefix + up;
    if (entries.count(prefix + ".alpha")) k.alpha = prefix + ".alpha";
    out.keys.push_back(k);
    taken.insert({k.down, k.up, k.alpha});
  }
  for (const auto& [key, entry] : entries)
    if (taken.count(key) == 0) out.unread.push_back(key);
}

}  // namespace

LoraLayout lora_layout(const std::map<std::string, io::TensorEntry>& entries,
                       const std::string& path) {
  const auto any = [&](const std::string& part) {
    for (const auto& [key, entry] : entries)
      if (key.find(part) != std::string::npos) return true;
    return false;
  };
  const auto any_prefix = [&](const std::string& head) {
    for (const auto& [key, entry] : entries)
      if (key.starts_with(head)) return true;
    return false;
  };
  LoraLayout out;
  // diffusers' order of tests (FluxLoraLoaderMixin.lora_state_dict).
  if (any(".lora_down.weight")) {
    bool peft_names = false;
    for (const auto& [key, entry] : entries)
      peft_names = peft_names || is_component(key.substr(0, key.find('.')));
    XDIT_CHECK(peft_names || !any_prefix("lora_transformer_"), "LoRA ", path,
               ": a 'lora_transformer_' (kohya-style names of diffusers' modules) file; xdit "
               "reads diffusers/PEFT, kohya/sd-scripts, BFL and XLabs LoRAs");
    if (peft_names) {
      out.format = "diffusers";
      read_diffusers(entries, ".lora_down.weight", ".lora_up.weight", out);
    } else {
      out.format = "kohya";
      read_kohya(entries, out);
    }
  } else if (any("processor")) {
    out.format = "xlabs";
    read_xlabs(entries, out);
  } else {
    XDIT_CHECK(
        !any("query_norm.scale"), "LoRA ", path,
        ": a Flux Control LoRA (Black Forest Labs' Canny / Depth); xdit has no control-image "
        "pipeline");
    XDIT_CHECK(!any("base_model"), "LoRA ", path,
               ": a FLUX.1 Kontext LoRA (fal's); xdit has no Kontext pipeline");
    out.format = "diffusers";
    read_diffusers(entries, ".lora_A.weight", ".lora_B.weight", out);
  }
  XDIT_CHECK(!out.keys.empty(), "LoRA ", path,
             ": no adapter in it of a known format (diffusers/PEFT lora_A / lora_B, kohya "
             "lora_down / lora_up, XLabs processor down / up)");
  return out;
}

}  // namespace xdit::nn
