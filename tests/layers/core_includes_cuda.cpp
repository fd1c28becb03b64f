// A core source that includes the CUDA backend (kernels/, above core): must
// not compile (layers_enforced). core/device.cpp and core/tensor.cpp did this
// before core had DeviceRuntime.
#include "kernels/cuda/runtime.h"
