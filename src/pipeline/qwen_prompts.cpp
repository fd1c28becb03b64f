#include "pipeline/qwen_prompts.h"

#include <algorithm>

#include "core/error.h"

namespace xdit::pipeline {

namespace {
constexpr const char* kQwenImageTemplate =
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n";
constexpr const char* kQwenImageTemplateEnd = "<|im_end|>\n<|im_start|>assistant\n";
}  // namespace

MaskedEmbeddings encode_qwen_image_prompts(const tokenizers::QwenTokenizer& tokenizer,
                                           models::QwenTextEncoder& encoder,
                                           const std::vector<std::string>& prompts,
                                           int64_t max_sequence_length) {
  XDIT_CHECK(!prompts.empty(), "Qwen-Image: no prompts to encode");
  XDIT_CHECK(max_sequence_length >= 1, "max_sequence_length must be at least 1, got ",
             max_sequence_length);
  const int64_t drop = kQwenImageTemplateDrop, most = kQwenImageMaxLength + drop;
  std::vector<std::vector<int32_t>> tokens;
  for (const std::string& p : prompts) {
    std::vector<int32_t> ids =
        tokenizer.tokenize(std::string(kQwenImageTemplate) + p + kQwenImageTemplateEnd);
    if (static_cast<int64_t>(ids.size()) > most) ids.resize(static_cast<size_t>(most));
    XDIT_CHECK(static_cast<int64_t>(ids.size()) > drop, "Qwen-Image's prompt template is ",
               ids.size(), " tokens with this tokenizer, not more than the ", drop,
               " the pipeline drops: a tokenizer of another vocabulary?");
    tokens.push_back(std::move(ids));
  }
  const auto B = static_cast<int64_t>(prompts.size());
  int64_t S = 0;
  for (const auto& t : tokens) S = std::max<int64_t>(S, static_cast<int64_t>(t.size()));
  std::vector<int32_t> ids(static_cast<size_t>(B * S), tokenizer.pad_id());
  std::vector<uint8_t> mask(static_cast<size_t>(B * S), 0);
  for (int64_t b = 0; b < B; ++b)
    for (size_t i = 0; i < tokens[static_cast<size_t>(b)].size(); ++i) {
      ids[static_cast<size_t>(b * S) + i] = tokens[static_cast<size_t>(b)][i];
      mask[static_cast<size_t>(b * S) + i] = 1;
    }
  const Tensor h = encoder.encode(ids, mask, B, S, encoder.layers(), true);  // hidden_states[-1]
  const int64_t d = h.dim(2);
  int64_t L = 0;
  for (const auto& t : tokens) L = std::max<int64_t>(L, static_cast<int64_t>(t.size()) - drop);
  L = std::min(L, max_sequence_length);
  MaskedEmbeddings out{Tensor::zeros({B, L, d}), Tensor::zeros({B, L})};
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n =
        std::min(static_cast<int64_t>(tokens[static_cast<size_t>(b)].size()) - drop, L);
    std::copy_n(h.data<float>() + (b * S + drop) * d, n * d, out.embeds.data<float>() + b * L * d);
    std::fill_n(out.mask.data<float>() + b * L, n, 1.0f);
  }
  return out;
}

std::vector<Tensor> encode_z_image_prompts(const tokenizers::QwenTokenizer& tokenizer,
                                           models::QwenTextEncoder& encoder,
                                           const std::vector<std::string>& prompts,
                                           int64_t max_sequence_length) {
  XDIT_CHECK(!prompts.empty(), "Z-Image: no prompts to encode");
  const auto B = static_cast<int64_t>(prompts.size());
  const int64_t S = max_sequence_length, after = encoder.config().num_layers - 1;
  XDIT_CHECK(encoder.layers() >= after, "Z-Image's text states come after ", after,
             " layers; the encoder has ", encoder.layers());
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  std::vector<int64_t> lengths;
  for (const std::string& p : prompts) {
    const tokenizers::Tokens t =
        tokenizer.encode("<|im_start|>user\n" + p + "<|im_end|>\n<|im_start|>assistant\n", S);
    ids.insert(ids.end(), t.ids.begin(), t.ids.end());
    mask.insert(mask.end(), t.mask.begin(), t.mask.end());
    lengths.push_back(std::min(t.untruncated, S));
  }
  const Tensor h = encoder.encode(ids, mask, B, S, after, false);  // hidden_states[-2]
  const int64_t d = h.dim(2);
  std::vector<Tensor> out;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lengths[static_cast<size_t>(b)];
    Tensor e = Tensor::empty({n, d});
    std::copy_n(h.data<float>() + b * S * d, n * d, e.data<float>());
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace xdit::pipeline
