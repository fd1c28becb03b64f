#include "schedulers/scheduler_config.h"

#include "core/error.h"

namespace xdit::schedulers {

int64_t Scheduler::latent_rows(const Shape& latent_shape) {
  int64_t rows = 1;
  for (size_t i = 2; i + 1 < latent_shape.size(); ++i) rows *= latent_shape[i];
  return rows;
}

void Scheduler::step(const Tensor& model_output, Tensor& sample) {
  XDIT_CHECK(model_output.shape() == sample.shape() && sample.ndim() >= 4,
             "scheduler step: shapes ", shape_str(model_output.shape()), " and ",
             shape_str(sample.shape()), " differ");
  step(model_output.data<float>(), sample.data<float>(), sample.shape(), 0,
       latent_rows(sample.shape()));
}

bool Scheduler::begin_rows(const Shape& shape, int64_t row_begin, int64_t row_end, size_t steps,
                           int64_t index) {
  XDIT_CHECK(steps > 0, "scheduler step before set_timesteps");
  XDIT_CHECK(index < static_cast<int64_t>(steps), "scheduler stepped past the last timestep");
  XDIT_CHECK(
      shape.size() >= 4 && row_begin >= 0 && row_begin < row_end && row_end <= latent_rows(shape),
      "scheduler step: bad row range [", row_begin, ", ", row_end, ") for latents ",
      shape_str(shape));
  if (rows_shape_ == shape) return false;
  XDIT_CHECK(rows_done_ == 0, "scheduler step: latent shape changed in the middle of a step");
  rows_shape_ = shape;
  return true;
}

bool Scheduler::end_rows(int64_t rows) {
  rows_done_ += rows;
  const int64_t all = latent_rows(rows_shape_);
  if (rows_done_ < all) return false;
  XDIT_CHECK(rows_done_ == all, "scheduler step: patches covered ", rows_done_, " rows of ", all);
  rows_done_ = 0;
  return true;
}

SchedulerConfig SchedulerConfig::from_json(const io::Json& j, const std::string& where) {
  io::require_object(j, where);
  const std::string cls = io::string_or(j, "_class_name", "DPMSolverMultistepScheduler", where);
  if (cls == "DPMSolverMultistepScheduler") return DPMSolverConfig::from_json(j, where);
  if (cls == "FlowMatchEulerDiscreteScheduler") return FlowMatchConfig::from_json(j, where);
  if (cls == "UniPCMultistepScheduler") return UniPCConfig::from_json(j, where);
  XDIT_FAIL(where, ": scheduler ", cls,
            " is not supported yet (xdit implements DPMSolverMultistepScheduler, "
            "FlowMatchEulerDiscreteScheduler and UniPCMultistepScheduler)");
}

std::unique_ptr<Scheduler> SchedulerConfig::make() const {
  if (const auto* d = dpm_solver()) return std::make_unique<DPMSolverMultistep>(*d);
  if (const auto* u = unipc()) return std::make_unique<UniPCMultistep>(*u);
  return std::make_unique<FlowMatchEuler>(*flow_match());
}

std::string SchedulerConfig::class_name() const {
  if (dpm_solver() != nullptr) return "DPMSolverMultistepScheduler";
  if (unipc() != nullptr) return "UniPCMultistepScheduler";
  return "FlowMatchEulerDiscreteScheduler";
}

int64_t SchedulerConfig::num_train_timesteps() const {
  if (const auto* d = dpm_solver()) return d->num_train_timesteps;
  if (const auto* u = unipc()) return u->num_train_timesteps;
  return flow_match()->num_train_timesteps;
}

}  // namespace xdit::schedulers
