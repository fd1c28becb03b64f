// The text-side steps the model families share: opening a T5 component and
// encoding prompts with it, encoding with CLIP, and stopping on a model
// output that holds NaN/Inf.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/model_folder.h"
#include "io/weights.h"
#include "models/clip.h"
#include "models/t5.h"
#include "pipeline/plan.h"
#include "pipeline/request.h"
#include "tokenizers/clip_tokenizer.h"
#include "tokenizers/t5_tokenizer.h"

namespace xdit::pipeline {

// A CLIP text encoder component's config (checked, bounded), and then —
// after the family has checked the config against its transformer, so that a
// mismatch is named as such — its weight headers opened and checked against
// it (the "text_model." prefix or none, as the file has it).
std::unique_ptr<models::ClipTextConfig> read_clip_config(const io::ModelFolder& folder,
                                                         const std::string& component);
std::unique_ptr<io::WeightStore> open_clip_weights(const io::ModelFolder& folder,
                                                   const std::string& component,
                                                   const models::ClipTextConfig& cfg);

// Stops the run when a model's output holds NaN/Inf (it would decode to a
// black image); `component` is the model's folder, whose weights are the
// likely cause.
void check_finite_output(const Tensor& t, const char* model, const char* component);

// A T5 encoder component's config, checked against the width the
// transformer takes, with its weight headers opened into `weights`.
std::unique_ptr<models::T5Config> open_t5(const io::ModelFolder& folder,
                                          const std::string& component, int64_t width,
                                          std::unique_ptr<io::WeightStore>& weights);

// The longest T5 prompt FluxPipeline and StableDiffusion3Pipeline take: 512,
// or less where the tokenizer says so.
inline int64_t t5_sequence_limit(const tokenizers::T5Tokenizer& tok) {
  return std::min<int64_t>(512, tok.model_max_length());
}

// Lists of prompts → for each list, T5 embeddings [n, L, d] and the mask
// [n, L] (as floats; undefined when `masked` is false, as FLUX.1 and SD3
// call T5). All lists go through the encoder in one call, so its weights are
// read once for, say, the prompts and their negative prompts together, and a
// text that occurs more than once is encoded once. `lower_strip`: PixArt's
// caption preprocessing. A list's `warn`: say what truncation cut, as
// diffusers does for prompts (not for negative prompts).
//
// Masked (PixArt), the encoder runs only up to the longest text's last real
// token, not over all L: T5's mask keeps padding out of every real token's
// attention, so the real positions come out as over all L (to rounding), and
// the padded positions, which the transformer's cross-attention masks out,
// are zero. A 20-token prompt and "" then take 2 × 20 positions, not
// 2 × 120 (T5-XXL, bf16, 2 threads: 0.97 s against 5.3 s).
struct T5Texts {
  std::vector<std::string> texts;
  bool warn = false;
};
std::vector<std::pair<Tensor, Tensor>> encode_t5(const tokenizers::T5Tokenizer& tok,
                                                 models::T5Encoder& t5,
                                                 const std::vector<T5Texts>& lists, int64_t L,
                                                 bool lower_strip, bool masked);
// One list.
inline std::pair<Tensor, Tensor> encode_t5(const tokenizers::T5Tokenizer& tok,
                                           models::T5Encoder& t5,
                                           const std::vector<std::string>& texts, int64_t L,
                                           bool lower_strip, bool masked, bool warn) {
  return encode_t5(tok, t5, {T5Texts{texts, warn}}, L, lower_strip, masked).front();
}

// The request's prompts (warned about when truncated) and, under CFG, one
// negative prompt for each ("" when none is given, not warned about), as
// encode_t5 takes them.
std::vector<T5Texts> prompt_lists(const PlanFields& r, bool cfg);

// Prompts → CLIP's outputs at the tokenizer's model_max_length: the pooled
// vector, and the hidden state `hidden_state` indexes (SD3: -2, the
// penultimate layer; ClipTextEncoder::kNoHiddenState for none).
models::ClipTextOutput encode_clip(const tokenizers::ClipTokenizer& tok,
                                   models::ClipTextEncoder& clip,
                                   const std::vector<std::string>& texts, bool warn,
                                   int64_t hidden_state = models::ClipTextEncoder::kNoHiddenState);

}  // namespace xdit::pipeline
