#include "pipeline/plan.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace xdit::pipeline {

GuidanceSettings PlanFields::guidance() const {
  GuidanceSettings g;
  g.guidance_scale = guidance_scale;
  g.guidance_scale_2 = guidance_scale_2;
  g.true_cfg_scale = true_cfg_scale;
  g.cfg_truncation = cfg_truncation;
  g.cfg_normalization = cfg_normalization;
  g.skip_layers = skip_layer_guidance;
  g.negative = !uncond.empty() || negative_prompt.has_value();
  return g;
}

using nlohmann::json;

int64_t Plan::batch() const {
  return has_prompts() ? static_cast<int64_t>(f_.prompts.size()) : f_.cond.batch();
}

Plan Plan::share(int64_t begin, int64_t end, Tensor latents) const {
  XDIT_CHECK(0 <= begin && begin < end && end <= batch(), "plan share [", begin, ", ", end,
             ") outside a batch of ", batch());
  PlanFields f = f_;
  if (has_prompts()) {
    f.prompts.assign(f_.prompts.begin() + begin, f_.prompts.begin() + end);
  } else {
    f.cond = f_.cond.slice(begin, end);
    f.uncond = f_.uncond.slice(begin, end);
  }
  f.latents = std::move(latents);
  return Plan(std::move(f));
}

Plan Plan::with_embeddings(PromptEmbeddings e) const {
  XDIT_CHECK(has_prompts(), "the plan's conditioning is already embeddings");
  XDIT_CHECK(e.cond.batch() == batch(), "embeddings for ", e.cond.batch(),
             " prompt(s), the plan has ", batch());
  PlanFields f = f_;
  f.prompts.clear();
  f.negative_prompt.reset();
  f.cond = std::move(e.cond);
  f.uncond = std::move(e.uncond);
  return Plan(std::move(f));
}

namespace {

// The plan as ranks exchange it: one table, which both directions read, so a
// field cannot travel one way only. Every field of PlanFields but the
// embeddings and the initial latents (which never cross ranks) is a row.
struct PlanField {
  const char* name;
  void (*put)(const PlanFields& f, json& j);
  void (*get)(const json& j, PlanFields& f);
};

#define XDIT_PLAN_FIELD(member, type)                                                            \
  PlanField {                                                                                    \
#member,                                                                                     \
        [](const PlanFields& f,                                                                  \
           json& j) { j[#member] = f.member; },                                                  \
                                             [](const json& j,                                   \
                                                PlanFields&                                      \
                                                    f) { f.member = j.at(#member).get<type>(); } \
  }

#define XDIT_PLAN_OPTIONAL(key, member, type)                 \
  PlanField {                                                 \
    key,                                                      \
        [](const PlanFields& f, json& j) {                    \
          if (f.member) j[key] = *f.member;                   \
        },                                                    \
        [](const json& j, PlanFields& f) {                    \
          if (j.contains(key)) f.member = j[key].get<type>(); \
        }                                                     \
  }

const std::vector<PlanField>& plan_fields() {
  static const std::vector<PlanField> rows = {
      XDIT_PLAN_FIELD(prompts, std::vector<std::string>),
      XDIT_PLAN_OPTIONAL("negative_prompt", negative_prompt, std::string),
      XDIT_PLAN_FIELD(max_sequence_length, int64_t),
      XDIT_PLAN_FIELD(height, int64_t),
      XDIT_PLAN_FIELD(width, int64_t),
      XDIT_PLAN_FIELD(run_height, int64_t),
      XDIT_PLAN_FIELD(run_width, int64_t),
      XDIT_PLAN_FIELD(num_frames, int64_t),
      XDIT_PLAN_FIELD(latent_frames, int64_t),
      XDIT_PLAN_FIELD(num_inference_steps, int64_t),
      XDIT_PLAN_FIELD(guidance_scale, double),
      XDIT_PLAN_FIELD(guidance_scale_2, double),
      XDIT_PLAN_FIELD(true_cfg_scale, double),
      XDIT_PLAN_FIELD(cfg_truncation, double),
      XDIT_PLAN_FIELD(cfg_normalization, double),
      XDIT_PLAN_FIELD(skip_layer_guidance.layers, std::vector<int64_t>),
      XDIT_PLAN_FIELD(skip_layer_guidance.scale, double),
      XDIT_PLAN_FIELD(skip_layer_guidance.start, double),
      XDIT_PLAN_FIELD(skip_layer_guidance.stop, double),
      {"cache", [](const PlanFields& f, json& j) { j["cache"] = f.cache.name(); },
       [](const json& j, PlanFields& f) {
         f.cache.kind = CacheSettings::parse(j.at("cache").get<std::string>());
       }},
      // The cache's settings, each absent where the cache takes none.
      XDIT_PLAN_OPTIONAL("cache_threshold", cache.threshold, double),
      XDIT_PLAN_OPTIONAL("taylorseer_interval", cache.interval, int64_t),
      XDIT_PLAN_OPTIONAL("taylorseer_warmup", cache.warmup, int64_t),
      XDIT_PLAN_OPTIONAL("taylorseer_order", cache.order, int64_t),
      {"loras",
       [](const PlanFields& f, json& j) {
         j["loras"] = json::array();
         for (const LoraRef& l : f.loras)
           j["loras"].push_back({{"path", l.path},
                                 {"scale", l.scale},
                                 {"ignore_unmatched", l.ignore_unmatched},
                                 {"skipped", l.skipped}});
       },
       [](const json& j, PlanFields& f) {
         f.loras.clear();
         for (const json& l : j.at("loras"))
           f.loras.push_back({l.at("path").get<std::string>(), l.at("scale").get<double>(),
                              l.at("ignore_unmatched").get<bool>(),
                              l.at("skipped").get<int64_t>()});
       }},
      XDIT_PLAN_FIELD(seed, uint64_t),
      XDIT_PLAN_FIELD(resize_back, bool),
      XDIT_PLAN_FIELD(cfg, bool),
      {"output",
       [](const PlanFields& f, json& j) {
         j["output"] = f.output == Output::kImages ? "images" : "latents";
       },
       [](const json& j, PlanFields& f) {
         const std::string o = j.at("output").get<std::string>();
         XDIT_CHECK(o == "images" || o == "latents", "a plan's output is images or latents, got '",
                    o, "'");
         f.output = o == "images" ? Output::kImages : Output::kLatents;
       }},
  };
  return rows;
}
#undef XDIT_PLAN_FIELD
#undef XDIT_PLAN_OPTIONAL

// A field added to PlanFields changes its size: add its row above, then the
// size here (x86-64 with libstdc++, where the size is known).
#if defined(__GLIBCXX__) && defined(__x86_64__)
static_assert(sizeof(PlanFields) == 488,
              "PlanFields changed: give the new field a row in plan_fields()");
#endif

}  // namespace

json Plan::to_json() const {
  XDIT_CHECK(has_prompts(), "a plan holding embeddings cannot cross ranks");
  XDIT_CHECK(!f_.latents.defined(), "a plan with initial latents cannot cross ranks");
  json j = json::object();
  for (const PlanField& row : plan_fields()) row.put(f_, j);
  return j;
}

Plan Plan::from_json(const json& j) {
  PlanFields f;
  for (const PlanField& row : plan_fields()) row.get(j, f);
  XDIT_CHECK(!f.prompts.empty(), "a plan from another rank has no prompts");
  return Plan(std::move(f));
}

size_t Plan::field_count() {
  return plan_fields().size();
}

}  // namespace xdit::pipeline
