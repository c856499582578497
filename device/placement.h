// Where a worker computes (--device): the job's DeviceSpec against what this build and this
// machine offer and what the model has kernels for (device/cuda_model.h: every model). The choice
// and its reason are logged, and a job that insists on CUDA where it cannot have it is refused with
// the reason.
//
// The GPU probe loads the CUDA driver (libcuda.so.1) at run time, only in a build with CUDA, so
// the worker links no CUDA library and starts on machines without one.
//
// Thread-safety: ChooseDevice is pure; ProbeDevices may be called from any thread.
#ifndef SYNCLINE_DEVICE_PLACEMENT_H_
#define SYNCLINE_DEVICE_PLACEMENT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "syncline/options.h"

namespace syncline {

// What this process can compute on.
struct DeviceProbe {
  bool cuda_built = false;  // the build has CUDA (SYNCLINE_CUDA found nvcc)
  int gpus = 0;             // CUDA devices the driver reports; 0 without a driver
};

DeviceProbe ProbeDevices();

// Whether `model` (a Model name) has GPU kernels: logreg, softmax, mlp and ctr.
bool HasGpuKernels(std::string_view model);

struct DeviceChoice {
  std::string device;  // "cpu" or "cuda:N"
  int gpu = -1;        // N, or -1 for the CPU
  std::string reason;  // why this device, for the log
};

// Resolves --device for the worker of rank `rank`. auto: GPU rank % (visible GPUs), so that
// the workers of a machine spread over its GPUs, or the CPU with the reason a GPU cannot be
// used; cpu: the CPU; cuda[:N]: GPU N, or FailedPrecondition saying why it cannot be used (no
// CUDA in this build, no visible GPU N, no GPU kernels for the model).
absl::StatusOr<DeviceChoice> ChooseDevice(const DeviceSpec& spec, std::string_view model,
                                          const DeviceProbe& probe, int rank = 0);

}  // namespace syncline

#endif  // SYNCLINE_DEVICE_PLACEMENT_H_
