// The LoRA file formats people download, read from their key names as
// diffusers 0.42's `load_lora_weights` converts them
// (loaders/lora_conversion_utils.py), into one layout: which of the file's
// tensors adapt which module of which component, under diffusers' names.
//
//   diffusers / PEFT  `<component>.<module>.lora_A.weight`, `.lora_B.weight`,
//                     optional `<component>.<module>.alpha`;
//   kohya / sd-scripts (FLUX.1)  `lora_unet_double_blocks_0_img_attn_qkv
//                     .lora_down.weight`, `.lora_up.weight`, `.alpha`; CLIP
//                     as `lora_te1_text_model_encoder_layers_0_…` (or `lora_te_`),
//                     T5-XXL as `lora_te3_encoder_block_0_layer_0_SelfAttention_q`;
//   Black Forest Labs' names as ComfyUI writes them (FLUX.1)
//                     `diffusion_model.double_blocks.0.img_attn.qkv.lora_down
//                     .weight` (and `text_encoders.clip_l.transformer.…`,
//                     `text_encoders.t5xxl.transformer.…`),
//                     which diffusers reads as kohya's;
//   XLabs (FLUX.1)    `double_blocks.0.processor.qkv_lora1.down.weight`, ….
//
// A fused kohya / BFL / XLabs projection (qkv; a single block's linear1 =
// q | k | v | MLP in, for FLUX.1, proportions 1 : 1 : 1 : 4) adapts
// diffusers' separate modules: each takes its rows of B and all of A, as
// diffusers' converter does (its "sparse" variant, which also splits A's
// rank, gives the same products).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace xdit::nn {

// Where an adapter's alpha comes from (alpha / rank scales B·A).
enum class LoraAlpha {
  kKeyMetadataOrRank,  // diffusers: `.alpha`, else lora_adapter_metadata, else rank
  kKeyOrRank,          // kohya: `.alpha`, else rank
  kRank,               // XLabs (no alpha)
};

// One adapted module as the file stores it.
struct LoraKey {
  std::string component;  // "transformer", "text_encoder", …
  std::string module;     // diffusers' name in that component ("transformer_blocks.0.attn.to_q")
  std::string down, up;   // the file's A [rank, in] and B [rows, rank]
  std::string alpha;      // the file's alpha tensor; "" for none
  LoraAlpha alpha_rule = LoraAlpha::kKeyMetadataOrRank;
  std::vector<int> parts;    // B's rows split in these proportions (fused); {} = all of B
  int part = 0;              // this module's part
  bool swap_halves = false;  // B's two halves exchanged (BFL's shift | scale → scale | shift)
};

struct LoraLayout {
  std::string format;  // "diffusers", "kohya", "bfl", "xlabs"
  std::vector<LoraKey> keys;
  // Tensors no module takes (T5 LoRAs, DoRA scales, names diffusers does not
  // map): the caller refuses them unless told to skip them.
  std::vector<std::string> unread;
};

// The layout of a file with these tensors; throws one line (naming `path`)
// for a format diffusers reads but xdit does not apply (a Flux Control or
// Kontext LoRA) or one of no known format.
LoraLayout lora_layout(const std::map<std::string, io::TensorEntry>& entries,
                       const std::string& path);

}  // namespace xdit::nn
