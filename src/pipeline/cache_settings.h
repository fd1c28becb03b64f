// A request's step cache (docs/caches.md): which one, with what settings.
// Requests carry it (the CLI's --cache flags, serve's `cache` fields); the
// planner fills the defaults and checks it before any weight loads; the
// pipeline installs the cache for the run (step_cache.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace xdit::pipeline {

enum class CacheKind {
  kNone,
  // diffusers' FirstBlockCacheConfig: the first block's image-stream
  // residual against the last full step's decides whether the rest runs.
  kFirstBlock,
  // diffusers' TaylorSeerCacheConfig: the attention modules' outputs
  // forecast from finite-difference Taylor factors between full steps.
  kTaylorSeer,
  // xDiT's TeaCache: block 0's timestep-modulated input, its relative change
  // accumulated through the model's rescaling polynomial, decides whether
  // any block runs.
  kTeaCache,
};

struct CacheSettings {
  // diffusers' FirstBlockCacheConfig default, and xDiT's (--use_fbcache and
  // --use_teacache: rel_l1_thresh of its FLUX adapter; TeaCache's default).
  static constexpr double kFirstBlockThreshold = 0.05, kXDiTThreshold = 0.12;
  // TaylorSeerCacheConfig's defaults: cache_interval, disable_cache_before_step, max_order.
  static constexpr int64_t kTaylorInterval = 5, kTaylorWarmup = 3, kTaylorOrder = 1;

  CacheKind kind = CacheKind::kNone;
  // First-Block-Cache: run every block when the indicator's relative change
  // exceeds this; TeaCache: when the accumulated change reaches it. Unset:
  // the kind's default (the planner fills it in).
  std::optional<double> threshold;
  // TaylorSeer: full steps every `interval` after the first `warmup`, the
  // factors up to `order`. Unset: the defaults above.
  std::optional<int64_t> interval, warmup, order;

  bool on() const { return kind != CacheKind::kNone; }
  // "none", "fbcache", "taylorseer", "teacache".
  const char* name() const;
  // The kind a flag or request names ("none", "fbcache"); throws one line
  // listing the names otherwise.
  static CacheKind parse(const std::string& name);
  // The settings with their defaults filled in.
  CacheSettings resolved() const;
  // Throws one line for a threshold that is not finite or not above 0, or a
  // setting the kind does not take.
  void validate() const;
  // "fbcache threshold 0.05", "teacache threshold 0.12", "taylorseer
  // interval 5 warmup 3 order 1"
  // ("none" when off), resolved.
  std::string label() const;
};

}  // namespace xdit::pipeline
