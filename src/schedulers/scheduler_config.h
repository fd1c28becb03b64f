// scheduler_config.json → the scheduler it names, checked before any weights
// load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include "io/json.h"
#include "schedulers/dpm_solver.h"
#include "schedulers/flow_match.h"
#include "schedulers/scheduler.h"
#include "schedulers/unipc.h"

namespace xdit::schedulers {

// A scheduler_config.json, read and checked before any weights load.
class SchedulerConfig {
 public:
  SchedulerConfig() = default;                              // DPM-Solver++ with diffusers' defaults
  SchedulerConfig(DPMSolverConfig c) : v_(std::move(c)) {}  // NOLINT(runtime/explicit)
  SchedulerConfig(FlowMatchConfig c) : v_(std::move(c)) {}  // NOLINT(runtime/explicit)
  SchedulerConfig(UniPCConfig c) : v_(std::move(c)) {}      // NOLINT(runtime/explicit)
  // Dispatches on _class_name; an unknown class is refused naming it.
  static SchedulerConfig from_json(const io::Json& j, const std::string& where);
  std::unique_ptr<Scheduler> make() const;
  // diffusers' class name, for `xdit info` and logs.
  std::string class_name() const;
  int64_t num_train_timesteps() const;
  const DPMSolverConfig* dpm_solver() const { return std::get_if<DPMSolverConfig>(&v_); }
  const FlowMatchConfig* flow_match() const { return std::get_if<FlowMatchConfig>(&v_); }
  const UniPCConfig* unipc() const { return std::get_if<UniPCConfig>(&v_); }

 private:
  std::variant<DPMSolverConfig, FlowMatchConfig, UniPCConfig> v_;
};

}  // namespace xdit::schedulers
