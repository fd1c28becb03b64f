#include "schedulers/dpm_solver.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::schedulers {

DPMSolverConfig DPMSolverConfig::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  DPMSolverConfig c;
  const std::string cls = io::string_or(j, "_class_name", "DPMSolverMultistepScheduler", w);
  XDIT_CHECK(cls == "DPMSolverMultistepScheduler", w, ": scheduler ", cls,
             " is not supported yet (xdit implements DPMSolverMultistepScheduler)");
  c.num_train_timesteps = io::int_in(j, "num_train_timesteps", 1000, 2, 1 << 20, w);
  c.beta_start = io::number_or(j, "beta_start", 0.0001, w);
  c.beta_end = io::number_or(j, "beta_end", 0.02, w);
  c.beta_schedule = io::string_or(j, "beta_schedule", "linear", w);
  c.solver_order = io::int_or(j, "solver_order", 2, w);
  c.prediction_type = io::string_or(j, "prediction_type", "epsilon", w);
  c.algorithm_type = io::string_or(j, "algorithm_type", "dpmsolver++", w);
  c.solver_type = io::string_or(j, "solver_type", "midpoint", w);
  c.lower_order_final = io::bool_or(j, "lower_order_final", true, w);
  c.euler_at_final = io::bool_or(j, "euler_at_final", false, w);
  c.final_sigmas_type = io::string_or(j, "final_sigmas_type", "zero", w);
  c.timestep_spacing = io::string_or(j, "timestep_spacing", "linspace", w);
  c.steps_offset = io::int_in(j, "steps_offset", 0, 0, c.num_train_timesteps - 1, w);
  c.lambda_min_clipped =
      io::number_or(j, "lambda_min_clipped", -std::numeric_limits<double>::infinity(), w, true);
  if (c.beta_schedule != "squaredcos_cap_v2")  // the cosine schedule does not use them
    for (double b : {c.beta_start, c.beta_end})
      XDIT_CHECK(b > 0 && b < 1, w, ": beta_start and beta_end must lie in (0, 1), found ", b);

  auto one_of = [&](const std::string& key, const std::string& v,
                    std::initializer_list<const char*> ok) {
    for (const char* o : ok)
      if (v == o) return;
    XDIT_FAIL(w, ": ", key, " \"", v, "\" is not supported");
  };
  one_of("beta_schedule", c.beta_schedule, {"linear", "scaled_linear", "squaredcos_cap_v2"});
  one_of("prediction_type", c.prediction_type, {"epsilon", "v_prediction", "sample"});
  one_of("algorithm_type", c.algorithm_type, {"dpmsolver++", "dpmsolver"});
  one_of("solver_type", c.solver_type, {"midpoint", "heun"});
  one_of("final_sigmas_type", c.final_sigmas_type, {"zero", "sigma_min"});
  one_of("timestep_spacing", c.timestep_spacing, {"linspace", "leading", "trailing"});
  XDIT_CHECK(c.solver_order == 1 || c.solver_order == 2, w, ": solver_order ", c.solver_order,
             " is not supported (1 or 2)");
  for (const char* flag :
       {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "use_lu_lambdas",
        "use_flow_sigmas", "thresholding", "rescale_betas_zero_snr", "use_dynamic_shifting"})
    XDIT_CHECK(!io::bool_or(j, flag, false, w), w, ": ", flag, "=true is not supported yet");
  XDIT_CHECK(j.is_object() && (!j.contains("trained_betas") || j["trained_betas"].is_null()), w,
             ": trained_betas is not supported yet");
  const std::string variance = io::string_or(j, "variance_type", "", w);
  XDIT_CHECK(variance.empty(), w, ": variance_type \"", variance, "\" is not supported yet");
  return c;
}

DPMSolverMultistep::DPMSolverMultistep(DPMSolverConfig cfg) : cfg_(std::move(cfg)) {
  const int64_t n = cfg_.num_train_timesteps;
  std::vector<float> betas(static_cast<size_t>(n));
  if (cfg_.beta_schedule == "linear" || cfg_.beta_schedule == "scaled_linear") {
    const bool sq = cfg_.beta_schedule == "scaled_linear";
    const double a = sq ? std::sqrt(cfg_.beta_start) : cfg_.beta_start;
    const double b = sq ? std::sqrt(cfg_.beta_end) : cfg_.beta_end;
    // torch.linspace(a, b, n, dtype=float32): computed here in f64, rounded once.
    for (int64_t i = 0; i < n; ++i) {
      const float v =
          static_cast<float>(a + (b - a) * static_cast<double>(i) / static_cast<double>(n - 1));
      betas[static_cast<size_t>(i)] = sq ? v * v : v;
    }
  } else {  // squaredcos_cap_v2 (betas_for_alpha_bar, cosine)
    auto abar = [](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * M_PI / 2), 2); };
    for (int64_t i = 0; i < n; ++i) {
      const double t1 = static_cast<double>(i) / n, t2 = static_cast<double>(i + 1) / n;
      betas[static_cast<size_t>(i)] = static_cast<float>(std::min(1 - abar(t2) / abar(t1), 0.999));
    }
  }
  // torch.cumprod on CPU accumulates in double and rounds each output to f32.
  alphas_cumprod_.resize(static_cast<size_t>(n));
  double acc = 1.0;
  for (int64_t i = 0; i < n; ++i) {
    acc *= static_cast<double>(1.0f - betas[static_cast<size_t>(i)]);
    alphas_cumprod_[static_cast<size_t>(i)] = static_cast<float>(acc);
  }
}

void DPMSolverMultistep::set_timesteps(int64_t steps, const TimestepHints& hints) {
  XDIT_CHECK(!hints.mu.has_value() && hints.sigmas.empty(),
             "DPMSolverMultistepScheduler takes no mu or custom sigmas");
  XDIT_CHECK(steps >= 1, "num_inference_steps must be at least 1, got ", steps);
  const int64_t T = cfg_.num_train_timesteps;
  XDIT_CHECK(steps <= T, "num_inference_steps ", steps, " exceeds the scheduler's ", T,
             " training steps");
  // lambda_t = log(alpha_t) − log(sigma_t); clip the schedule where it falls
  // below lambda_min_clipped (searchsorted on the flipped lambdas).
  int64_t clipped = 0;
  if (std::isfinite(cfg_.lambda_min_clipped)) {
    for (int64_t i = T - 1; i >= 0; --i) {
      const double ac = alphas_cumprod_[static_cast<size_t>(i)];
      const double lambda = std::log(std::sqrt(ac)) - std::log(std::sqrt(1 - ac));
      if (lambda < cfg_.lambda_min_clipped)
        ++clipped;
      else
        break;
    }
  }
  const int64_t last = T - clipped;
  std::vector<int64_t> ts;
  XDIT_CHECK(last >= 2, "lambda_min_clipped ", cfg_.lambda_min_clipped,
             " clips the whole noise schedule: fix scheduler_config.json");
  if (cfg_.timestep_spacing == "linspace") {
    // np.linspace(0, last − 1, steps + 1).round()[::-1][:-1]
    // (numpy computes arange · step with step = (last − 1)/steps; round half to even)
    const double step = static_cast<double>(last - 1) / static_cast<double>(steps);
    for (int64_t i = steps; i >= 1; --i)
      ts.push_back(static_cast<int64_t>(std::nearbyint(static_cast<double>(i) * step)));
  } else if (cfg_.timestep_spacing == "leading") {
    const int64_t ratio = last / (steps + 1);
    for (int64_t i = steps; i >= 1; --i) ts.push_back(i * ratio + cfg_.steps_offset);
  } else {  // trailing: np.arange(last, 0, −T/steps).round() − 1
    const double ratio = static_cast<double>(T) / static_cast<double>(steps);
    for (int64_t k = 0; static_cast<double>(last) - static_cast<double>(k) * ratio > 0; ++k)
      ts.push_back(static_cast<int64_t>(
                       std::nearbyint(static_cast<double>(last) - static_cast<double>(k) * ratio)) -
                   1);
  }
  for (int64_t t : ts)
    XDIT_CHECK(t >= 0 && t < T, "the scheduler's timestep ", t, " for ", steps,
               " steps lies outside its ", T,
               " training steps (steps_offset / timestep_spacing in scheduler_config.json)");
  // sigmas = sqrt((1 − ᾱ)/ᾱ) at each timestep (f32 as torch computes it), then the final sigma.
  sigmas_.clear();
  auto sigma_at = [&](int64_t t) {
    const float ac = alphas_cumprod_[static_cast<size_t>(t)];
    return std::sqrt((1.0f - ac) / ac);
  };
  for (int64_t t : ts) sigmas_.push_back(sigma_at(t));
  timesteps_.assign(ts.begin(), ts.end());
  sigmas_.push_back(cfg_.final_sigmas_type == "sigma_min" ? sigma_at(0) : 0.0f);
  step_index_ = 0;
  lower_order_nums_ = 0;
  reset_rows();
  cur_ = Tensor();
  prev_ = Tensor();
}

void DPMSolverMultistep::step(const float* model_output, float* sample, const Shape& shape,
                              int64_t row_begin, int64_t row_end) {
  const bool new_shape = begin_rows(shape, row_begin, row_end, timesteps_.size(), step_index_);
  if (new_shape || cur_.device() != current_device()) {
    cur_ = Tensor::zeros(shape, DType::kF32, current_device());
    prev_ = Tensor::zeros(shape, DType::kF32, current_device());
  }
  const int64_t n_steps = static_cast<int64_t>(timesteps_.size());
  const int64_t i = step_index_;
  const bool lower_final =
      i == n_steps - 1 && (cfg_.euler_at_final || (cfg_.lower_order_final && n_steps < 15) ||
                           cfg_.final_sigmas_type == "zero");
  const int order = (cfg_.solver_order == 1 || lower_order_nums_ < 1 || lower_final) ? 1 : 2;

  auto alpha_sigma = [](double sigma, double& a, double& s) {
    a = 1.0 / std::sqrt(sigma * sigma + 1.0);
    s = sigma * a;
  };
  double a_t, s_t, a_s0, s_s0;
  alpha_sigma(sigmas_[static_cast<size_t>(i + 1)], a_t, s_t);
  alpha_sigma(sigmas_[static_cast<size_t>(i)], a_s0, s_s0);
  const double lam_t = std::log(a_t) - std::log(s_t);  // +inf when sigma_t = 0
  const double lam_s0 = std::log(a_s0) - std::log(s_s0);
  const double h = lam_t - lam_s0;
  const bool pp = cfg_.algorithm_type == "dpmsolver++";

  // convert_model_output: the prediction the solver works with.
  double xa = 1, xb = 0;  // converted = xa·sample + xb·model_output
  if (pp) {
    if (cfg_.prediction_type == "epsilon")
      xa = 1 / a_s0, xb = -s_s0 / a_s0;
    else if (cfg_.prediction_type == "sample")
      xa = 0, xb = 1;
    else
      xa = a_s0, xb = -s_s0;  // v_prediction
  } else {
    if (cfg_.prediction_type == "epsilon")
      xa = 0, xb = 1;
    else if (cfg_.prediction_type == "sample")
      xa = 1 / s_s0, xb = -a_s0 / s_s0;
    else
      xa = s_s0, xb = a_s0;
  }

  // The update, x_t = cs·sample + c0·D0 + c1·D1 with D0 = m0, D1 = (m0 − m1)/r0.
  const double em1 = std::exp(-h) - 1.0;  // −1 at the final step, where sigma_t = 0 and h = ∞
  const double ep1 = std::exp(h) - 1.0;
  double cs, c0, c1 = 0, inv_r0 = 0;
  if (pp) {
    cs = s_t / s_s0;
    c0 = -a_t * em1;
  } else {
    cs = a_t / a_s0;
    c0 = -s_t * ep1;
  }
  if (order == 2) {
    double a_s1, s_s1;
    alpha_sigma(sigmas_[static_cast<size_t>(i - 1)], a_s1, s_s1);
    const double lam_s1 = std::log(a_s1) - std::log(s_s1);
    const double r0 = (lam_s0 - lam_s1) / h;
    inv_r0 = 1.0 / r0;
    if (pp) {
      c1 = cfg_.solver_type == "midpoint" ? -0.5 * a_t * em1
                                          : a_t * ((std::exp(-h) - 1.0) / h + 1.0);
    } else {
      c1 = cfg_.solver_type == "midpoint" ? -0.5 * s_t * ep1
                                          : -s_t * ((std::exp(h) - 1.0) / h - 1.0);
    }
  }

  // H: the rows of the frame-major row axis (F·H of [B, C, F, H, W]).
  const int64_t B = shape[0], C = shape[1], H = latent_rows(shape), W = shape.back();
  const int64_t rows = row_end - row_begin;
  kernels::DpmUpdate k;
  k.xa = static_cast<float>(xa);
  k.xb = static_cast<float>(xb);
  k.cs = static_cast<float>(cs);
  k.c0 = static_cast<float>(c0);
  k.c1 = static_cast<float>(c1);
  k.inv_r0 = static_cast<float>(inv_r0);
  k.second_order = order == 2;
  // Per (batch, channel): the step's rows*W values, at rows [row_begin, …) of
  // the full-size history.
  const int64_t first = row_begin * W;
  kernels::dpm_solver_step(model_output, sample, cur_.data<float>() + first,
                           prev_.data<float>() + first, B * C, rows * W, H * W, k);
  if (end_rows(rows)) {  // the step is complete: advance
    std::swap(cur_, prev_);
    if (lower_order_nums_ < cfg_.solver_order) ++lower_order_nums_;
    ++step_index_;
  }
}

}  // namespace xdit::schedulers
