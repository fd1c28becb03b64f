#include "schedulers/flow_match.h"

#include <cmath>

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::schedulers {

FlowMatchConfig FlowMatchConfig::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  FlowMatchConfig c;
  const std::string cls = io::string_or(j, "_class_name", "FlowMatchEulerDiscreteScheduler", w);
  XDIT_CHECK(cls == "FlowMatchEulerDiscreteScheduler", w, ": scheduler ", cls,
             " is not FlowMatchEulerDiscreteScheduler");
  c.num_train_timesteps = io::int_in(j, "num_train_timesteps", 1000, 1, 1 << 20, w);
  c.shift = io::number_or(j, "shift", 1.0, w);
  c.use_dynamic_shifting = io::bool_or(j, "use_dynamic_shifting", false, w);
  c.base_shift = io::number_or(j, "base_shift", 0.5, w);
  c.max_shift = io::number_or(j, "max_shift", 1.15, w);
  c.base_image_seq_len = io::int_in(j, "base_image_seq_len", 256, 0, 1 << 30, w);
  c.max_image_seq_len = io::int_in(j, "max_image_seq_len", 4096, 0, 1 << 30, w);
  c.invert_sigmas = io::bool_or(j, "invert_sigmas", false, w);
  c.shift_terminal = io::number_or(j, "shift_terminal", 0.0, w);
  c.time_shift_type = io::string_or(j, "time_shift_type", "exponential", w);
  XDIT_CHECK(c.time_shift_type == "exponential" || c.time_shift_type == "linear", w,
             ": time_shift_type \"", c.time_shift_type,
             "\" is not supported (exponential or linear)");
  XDIT_CHECK(c.shift > 0, w, ": shift must be positive, found ", c.shift);
  XDIT_CHECK(c.shift_terminal < 1, w, ": shift_terminal must be below 1, found ", c.shift_terminal);
  XDIT_CHECK(c.max_image_seq_len != c.base_image_seq_len, w,
             ": base_image_seq_len and max_image_seq_len are both ", c.base_image_seq_len,
             " (the shift interpolates between them)");
  for (const char* flag :
       {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "stochastic_sampling"})
    XDIT_CHECK(!io::bool_or(j, flag, false, w), w, ": ", flag, "=true is not supported yet");
  return c;
}

double FlowMatchConfig::mu(int64_t image_seq_len) const {
  const double m =
      (max_shift - base_shift) / static_cast<double>(max_image_seq_len - base_image_seq_len);
  const double b = base_shift - m * static_cast<double>(base_image_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

namespace {

// The schedule arithmetic of set_timesteps in numpy's dtype T (double when
// derived from the training sigmas, float for sigmas the pipeline passes);
// python-float constants take T, as numpy's weak scalars do.
template <class T>
std::vector<float> shape_sigmas(std::vector<T> s, const FlowMatchConfig& c,
                                std::optional<double> mu) {
  if (c.use_dynamic_shifting) {
    const bool exponential = c.time_shift_type == "exponential";
    const T num = static_cast<T>(exponential ? std::exp(*mu) : *mu);
    // time_shift(mu, 1.0, t): num / (num + (1/t − 1)^1)
    for (T& t : s) t = num / (num + (T(1) / t - T(1)));
  } else {
    const T shift = static_cast<T>(c.shift), shift_m1 = static_cast<T>(c.shift - 1.0);
    for (T& t : s) t = shift * t / (T(1) + shift_m1 * t);
  }
  if (c.shift_terminal != 0.0) {  // stretch_shift_to_terminal
    const T scale = (T(1) - s.back()) / static_cast<T>(1.0 - c.shift_terminal);
    for (T& t : s) t = T(1) - (T(1) - t) / scale;
  }
  return std::vector<float>(s.begin(), s.end());
}

}  // namespace

FlowMatchEuler::FlowMatchEuler(FlowMatchConfig cfg) : cfg_(std::move(cfg)) {
  // timesteps N … 1 (f32), sigmas = t / N, shifted here unless dynamic: in
  // torch f32 arithmetic. Only the ends are kept.
  const auto n = static_cast<float>(cfg_.num_train_timesteps);
  const auto train_sigma = [&](float t) {
    float s = t / n;
    if (!cfg_.use_dynamic_shifting) {
      const auto shift = static_cast<float>(cfg_.shift),
                 shift_m1 = static_cast<float>(cfg_.shift - 1.0);
      s = shift * s / (1.0f + shift_m1 * s);
    }
    return s;
  };
  sigma_max_ = train_sigma(n);
  sigma_min_ = train_sigma(1.0f);
}

void FlowMatchEuler::set_timesteps(int64_t steps, const TimestepHints& hints) {
  XDIT_CHECK(steps >= 1, "num_inference_steps must be at least 1, got ", steps);
  XDIT_CHECK(hints.sigmas.empty() || static_cast<int64_t>(hints.sigmas.size()) == steps,
             "the scheduler got ", hints.sigmas.size(), " sigmas for ", steps, " steps");
  XDIT_CHECK(
      !cfg_.use_dynamic_shifting || hints.mu.has_value(),
      "the scheduler shifts by image size (use_dynamic_shifting) but the pipeline gave no mu");
  const double N = static_cast<double>(cfg_.num_train_timesteps);
  std::vector<float> s;
  if (hints.sigmas.empty()) {
    // np.linspace(σ_max·N, σ_min·N, steps) / N in f64: i·step + start, the
    // last value exactly the stop.
    const double start = static_cast<double>(sigma_max_) * N,
                 stop = static_cast<double>(sigma_min_) * N;
    std::vector<double> t(static_cast<size_t>(steps));
    const double step = steps > 1 ? (stop - start) / static_cast<double>(steps - 1) : 0.0;
    for (int64_t i = 0; i < steps; ++i)
      t[static_cast<size_t>(i)] = static_cast<double>(i) * step + start;
    if (steps > 1) t.back() = stop;
    for (double& v : t) v /= N;
    s = shape_sigmas(std::move(t), cfg_, hints.mu);
  } else {
    s = shape_sigmas(std::vector<float>(hints.sigmas.begin(), hints.sigmas.end()), cfg_, hints.mu);
  }
  const auto nf = static_cast<float>(cfg_.num_train_timesteps);
  if (cfg_.invert_sigmas)
    for (float& v : s) v = 1.0f - v;
  for (float v : s)
    XDIT_CHECK(std::isfinite(v), "the scheduler's sigmas for ", steps,
               " steps are not finite (check shift, mu and sigmas)");
  timesteps_.clear();
  for (float v : s) timesteps_.push_back(v * nf);
  sigmas_ = s;
  sigmas_.push_back(cfg_.invert_sigmas ? 1.0f : 0.0f);
  step_index_ = 0;
  reset_rows();
}

void FlowMatchEuler::step(const float* model_output, float* sample, const Shape& shape,
                          int64_t row_begin, int64_t row_end) {
  begin_rows(shape, row_begin, row_end, timesteps_.size(), step_index_);
  const auto i = static_cast<size_t>(step_index_);
  const float dt = sigmas_[i + 1] - sigmas_[i];
  const int64_t n = shape[0] * shape[1] * (row_end - row_begin) * shape.back();
  kernels::flow_euler_step(model_output, sample, dt, n);
  if (end_rows(row_end - row_begin)) ++step_index_;
}

}  // namespace xdit::schedulers
