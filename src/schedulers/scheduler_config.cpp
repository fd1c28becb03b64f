#include "schedulers/scheduler_config.h"

#include "core/error.h"

namespace xdit::schedulers {

void Scheduler::step(const Tensor& model_output, Tensor& sample) {
  XDIT_CHECK(model_output.shape() == sample.shape() && sample.ndim() == 4,
             "scheduler step: shapes ", shape_str(model_output.shape()), " and ",
             shape_str(sample.shape()), " differ");
  step(model_output.data<float>(), sample.data<float>(), sample.shape(), 0, sample.dim(2));
}

SchedulerConfig SchedulerConfig::from_json(const io::Json& j, const std::string& where) {
  io::require_object(j, where);
  const std::string cls = io::string_or(j, "_class_name", "DPMSolverMultistepScheduler", where);
  if (cls == "DPMSolverMultistepScheduler") return DPMSolverConfig::from_json(j, where);
  if (cls == "FlowMatchEulerDiscreteScheduler") return FlowMatchConfig::from_json(j, where);
  XDIT_FAIL(where, ": scheduler ", cls,
            " is not supported yet (xdit implements DPMSolverMultistepScheduler and "
            "FlowMatchEulerDiscreteScheduler)");
}

std::unique_ptr<Scheduler> SchedulerConfig::make() const {
  if (const auto* d = dpm_solver()) return std::make_unique<DPMSolverMultistep>(*d);
  return std::make_unique<FlowMatchEuler>(*flow_match());
}

std::string SchedulerConfig::class_name() const {
  return dpm_solver() != nullptr ? "DPMSolverMultistepScheduler"
                                 : "FlowMatchEulerDiscreteScheduler";
}

int64_t SchedulerConfig::num_train_timesteps() const {
  return dpm_solver() != nullptr ? dpm_solver()->num_train_timesteps
                                 : flow_match()->num_train_timesteps;
}

}  // namespace xdit::schedulers
