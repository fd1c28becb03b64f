// How the 2025 image pipelines turn prompts into their decoder LLM's states
// (the families' text sides build on these).
//
// Qwen-Image (QwenImagePipeline._get_qwen_prompt_embeds + encode_prompt):
// each prompt inside the fixed system template
//   <|im_start|>system\nDescribe the image by detailing the color, shape,
//   size, texture, quantity, text, spatial relationships of the objects and
//   background:<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n
//   <|im_start|>assistant\n
// tokenized (truncated at 1024 + 34 tokens, padded to the longest), through
// Qwen2.5-VL with the padding's mask, the last layer's normed states
// (hidden_states[-1]) of each prompt's real tokens less the first 34 (the
// pipeline drops that many, the system part with Qwen's own tokenizer),
// zero-padded to the longest with a mask, then cut at max_sequence_length.
//
// Z-Image (ZImagePipeline._encode_prompt): each prompt as Qwen3's chat
// template writes one user message with a generation prompt and thinking
// enabled (which adds no think block):
//   <|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n
// padded to max_sequence_length (512) and truncated there, through Qwen3
// with the padding's mask, the states before the last layer, without the
// final norm (hidden_states[-2]), of each prompt's real tokens.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/qwen_text.h"
#include "tokenizers/qwen_tokenizer.h"

namespace xdit::pipeline {

struct MaskedEmbeddings {
  Tensor embeds;  // [B, L, hidden] f32
  Tensor mask;    // [B, L] f32: 1 for a prompt's tokens, 0 for the zero padding
};

constexpr int64_t kQwenImageTemplateDrop = 34;
constexpr int64_t kQwenImageMaxLength = 1024;  // the pipeline's tokenizer_max_length

// Throws one line when a prompt's template leaves no token after the 34
// dropped (a tokenizer of another vocabulary), before the encoder runs.
MaskedEmbeddings encode_qwen_image_prompts(const tokenizers::QwenTokenizer& tokenizer,
                                           models::QwenTextEncoder& encoder,
                                           const std::vector<std::string>& prompts,
                                           int64_t max_sequence_length = kQwenImageMaxLength);

constexpr int64_t kZImageMaxLength = 512;

// Per prompt its real tokens' states [tokens, hidden]. `encoder` needs its
// first num_layers − 1 layers (built with those alone, it runs no more).
std::vector<Tensor> encode_z_image_prompts(const tokenizers::QwenTokenizer& tokenizer,
                                           models::QwenTextEncoder& encoder,
                                           const std::vector<std::string>& prompts,
                                           int64_t max_sequence_length = kZImageMaxLength);

}  // namespace xdit::pipeline
