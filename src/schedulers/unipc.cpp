#include "schedulers/unipc.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::schedulers {

UniPCConfig UniPCConfig::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  UniPCConfig c;
  const std::string cls = io::string_or(j, "_class_name", "UniPCMultistepScheduler", w);
  XDIT_CHECK(cls == "UniPCMultistepScheduler", w, ": scheduler ", cls,
             " is not UniPCMultistepScheduler");
  c.num_train_timesteps = io::int_in(j, "num_train_timesteps", 1000, 2, 1 << 20, w);
  c.solver_order = io::int_or(j, "solver_order", 2, w);
  c.prediction_type = io::string_or(j, "prediction_type", "epsilon", w);
  c.solver_type = io::string_or(j, "solver_type", "bh2", w);
  c.lower_order_final = io::bool_or(j, "lower_order_final", true, w);
  c.flow_shift = io::number_or(j, "flow_shift", 1.0, w);
  c.final_sigmas_type = io::string_or(j, "final_sigmas_type", "zero", w);
  if (j.contains("disable_corrector") &&
      !(j["disable_corrector"].is_array() && j["disable_corrector"].empty()))
    c.disable_corrector = io::int_list_in(j, "disable_corrector", {}, 1 << 16, 0, 1 << 20, w);
  XDIT_CHECK(c.solver_order == 1 || c.solver_order == 2, w, ": solver_order ", c.solver_order,
             " is not supported (1 or 2)");
  XDIT_CHECK(c.prediction_type == "flow_prediction" || c.prediction_type == "epsilon" ||
                 c.prediction_type == "v_prediction" || c.prediction_type == "sample",
             w, ": prediction_type \"", c.prediction_type, "\" is not supported");
  // diffusers maps the DPM-Solver names midpoint / heun / logrho to bh2.
  if (c.solver_type == "midpoint" || c.solver_type == "heun" || c.solver_type == "logrho")
    c.solver_type = "bh2";
  XDIT_CHECK(c.solver_type == "bh1" || c.solver_type == "bh2", w, ": solver_type \"", c.solver_type,
             "\" is not supported (bh1 or bh2)");
  XDIT_CHECK(c.final_sigmas_type == "zero" || c.final_sigmas_type == "sigma_min", w,
             ": final_sigmas_type \"", c.final_sigmas_type, "\" is not supported");
  XDIT_CHECK(c.flow_shift > 0, w, ": flow_shift must be positive, found ", c.flow_shift);
  XDIT_CHECK(io::bool_or(j, "use_flow_sigmas", false, w), w,
             ": UniPCMultistepScheduler without use_flow_sigmas is not supported yet (xdit "
             "implements the flow-sigma schedule Wan ships)");
  XDIT_CHECK(io::bool_or(j, "predict_x0", true, w), w, ": predict_x0=false is not supported yet");
  for (const char* flag : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                           "use_dynamic_shifting", "thresholding", "rescale_betas_zero_snr"})
    XDIT_CHECK(!io::bool_or(j, flag, false, w), w, ": ", flag, "=true is not supported yet");
  for (const char* key : {"shift_terminal", "solver_p", "trained_betas"})
    XDIT_CHECK(!j.contains(key) || j[key].is_null(), w, ": ", key, " is not supported yet");
  // At the last step a final sigma of zero makes λ = ∞: B(h) = h = −∞ under
  // bh1, and the second-order predictor divides by r = 0; diffusers returns
  // NaN / inf there.
  if (c.final_sigmas_type == "zero") {
    XDIT_CHECK(c.solver_type != "bh1", w,
               ": solver_type bh1 with final_sigmas_type zero ends in NaN (in diffusers too); "
               "use bh2 or final_sigmas_type sigma_min");
    XDIT_CHECK(c.lower_order_final || c.solver_order == 1, w,
               ": lower_order_final=false with final_sigmas_type zero ends in inf (in diffusers "
               "too); use lower_order_final=true or final_sigmas_type sigma_min");
  }
  return c;
}

UniPCMultistep::UniPCMultistep(UniPCConfig cfg) : cfg_(std::move(cfg)) {}

void UniPCMultistep::set_timesteps(int64_t steps, const TimestepHints& hints) {
  XDIT_CHECK(!hints.mu.has_value(),
             "UniPCMultistepScheduler takes no mu (use_dynamic_shifting is not supported)");
  if (!hints.sigmas.empty()) steps = static_cast<int64_t>(hints.sigmas.size());
  XDIT_CHECK(steps >= 1, "num_inference_steps must be at least 1, got ", steps);
  const double N = static_cast<double>(cfg_.num_train_timesteps);
  // numpy, f64: np.linspace(1, 1/N, steps + 1)[:-1] (start + i·step), or the
  // pipeline's sigmas; shifted; the first lowered by 1e-6 when it is 1 (so
  // that log(α) stays finite).
  std::vector<double> s = hints.sigmas;
  if (s.empty()) {
    const double step = (1.0 / N - 1.0) / static_cast<double>(steps);
    for (int64_t i = 0; i < steps; ++i) s.push_back(static_cast<double>(i) * step + 1.0);
  }
  const double shift = cfg_.flow_shift;
  for (double& v : s) v = shift * v / (1.0 + (shift - 1.0) * v);
  if (std::fabs(s[0] - 1.0) < 1e-6) s[0] -= 1e-6;
  timesteps_.clear();
  sigmas_.clear();
  for (double v : s) {
    XDIT_CHECK(std::isfinite(v) && v > 0 && v < 1, "the scheduler's sigma ", v,
               " lies outside (0, 1) (check flow_shift and the sigmas)");
    timesteps_.push_back(static_cast<float>(static_cast<int64_t>(v * N)));  // truncated
    sigmas_.push_back(static_cast<float>(v));
  }
  sigmas_.push_back(cfg_.final_sigmas_type == "zero" ? 0.0f : sigmas_.back());
  step_index_ = 0;
  lower_order_nums_ = 0;
  last_order_ = 0;
  reset_rows();
  cur_ = prev_ = last_ = Tensor();
}

namespace {

// λ = log α − log σ of a flow sigma σ (α = 1 − σ), in f64.
double lambda_of(double sigma) {
  return std::log(1.0 - sigma) - std::log(sigma);
}

// The B(h) coefficients of diffusers' multistep_uni_{p,c}_bh_update for an
// order (1 or 2) and hh = −h: b[0 .. order).
struct BhTerms {
  double h_phi_1, B_h, b[2];
};

BhTerms bh_terms(double hh, int order, bool bh1) {
  BhTerms t{};
  t.h_phi_1 = std::expm1(hh);
  t.B_h = bh1 ? hh : std::expm1(hh);
  double h_phi_k = t.h_phi_1 / hh - 1.0, factorial = 1.0;
  for (int i = 1; i <= order; ++i) {
    t.b[i - 1] = h_phi_k * factorial / t.B_h;
    factorial *= i + 1;
    h_phi_k = h_phi_k / hh - 1.0 / factorial;
  }
  return t;
}

}  // namespace

void UniPCMultistep::step(const float* model_output, float* sample, const Shape& shape,
                          int64_t row_begin, int64_t row_end) {
  const bool new_shape = begin_rows(shape, row_begin, row_end, timesteps_.size(), step_index_);
  if (new_shape || cur_.device() != current_device()) {
    cur_ = Tensor::zeros(shape, DType::kF32, current_device());
    prev_ = Tensor::zeros(shape, DType::kF32, current_device());
    last_ = Tensor::zeros(shape, DType::kF32, current_device());
  }
  const auto n_steps = static_cast<int64_t>(timesteps_.size());
  const int64_t i = step_index_;
  const bool bh1 = cfg_.solver_type == "bh1";
  auto sig = [&](int64_t k) { return static_cast<double>(sigmas_[static_cast<size_t>(k)]); };
  kernels::UniPcUpdate k;

  // convert_model_output (predict_x0): x0 = xa·sample + xb·model_output.
  const double s0 = sig(i), a0 = 1.0 - s0;
  if (cfg_.prediction_type == "flow_prediction") {
    k.xa = 1.0f, k.xb = static_cast<float>(-s0);
  } else if (cfg_.prediction_type == "epsilon") {
    k.xa = static_cast<float>(1.0 / a0), k.xb = static_cast<float>(-s0 / a0);
  } else if (cfg_.prediction_type == "v_prediction") {
    k.xa = static_cast<float>(a0), k.xb = static_cast<float>(-s0);
  } else {  // sample
    k.xa = 0.0f, k.xb = 1.0f;
  }

  // UniC, from σ[i−1] to σ[i] at the last step's order, with this step's x0.
  k.correct = i > 0 && std::find(cfg_.disable_corrector.begin(), cfg_.disable_corrector.end(),
                                 i - 1) == cfg_.disable_corrector.end();
  if (k.correct) {
    const int order = static_cast<int>(last_order_);
    const double st = sig(i), ss = sig(i - 1), at = 1.0 - st;
    const double h = lambda_of(st) - lambda_of(ss);
    const BhTerms t = bh_terms(-h, order, bh1);
    k.ca = static_cast<float>(st / ss);
    k.cb = static_cast<float>(-(at * t.h_phi_1));
    k.cg = static_cast<float>(at * t.B_h);
    if (order == 1) {
      k.cl = 0.5f;
    } else {  // solve [[1, 1], [r, 1]]·ρ = b
      const double r = (lambda_of(sig(i - 2)) - lambda_of(ss)) / h;
      const double rho0 = (t.b[0] - t.b[1]) / (1.0 - r);
      k.c_second = true;
      k.cr = static_cast<float>(rho0);
      k.c_inv_r = static_cast<float>(1.0 / r);
      k.cl = static_cast<float>(t.b[0] - rho0);
    }
  }

  // UniP, from σ[i] to σ[i+1].
  int64_t order =
      cfg_.lower_order_final ? std::min(cfg_.solver_order, n_steps - i) : cfg_.solver_order;
  order = std::min(order, lower_order_nums_ + 1);
  {
    const double st = sig(i + 1), ss = sig(i), at = 1.0 - st;
    const double h = lambda_of(st) - lambda_of(ss);  // +∞ at a final σ of zero
    const BhTerms t = bh_terms(-h, static_cast<int>(order), bh1);
    k.pa = static_cast<float>(st / ss);
    k.pb = static_cast<float>(-(at * t.h_phi_1));
    if (order == 2) {  // ρ = 0.5 (diffusers' simplified second order)
      const double r = (lambda_of(sig(i - 1)) - lambda_of(ss)) / h;
      k.p_second = true;
      k.pg = static_cast<float>(at * t.B_h);
      k.p_inv_r = static_cast<float>(1.0 / r);
    }
  }

  const int64_t B = shape[0], C = shape[1], H = latent_rows(shape), W = shape.back();
  const int64_t rows = row_end - row_begin, first = row_begin * W;
  kernels::unipc_step(model_output, sample, cur_.data<float>() + first, prev_.data<float>() + first,
                      last_.data<float>() + first, B * C, rows * W, H * W, k);
  if (end_rows(rows)) {  // the step is complete: this step's x0 becomes the last one
    std::swap(cur_, prev_);
    last_order_ = order;
    if (lower_order_nums_ < cfg_.solver_order) ++lower_order_nums_;
    ++step_index_;
  }
}

}  // namespace xdit::schedulers
