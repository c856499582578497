#include "device/placement.h"

#include <dlfcn.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace syncline {

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
#if SYNCLINE_WORKER_CUDA_BUILD
  probe.cuda_built = true;
  // The driver API by hand: two entry points, no headers, no link-time dependency. A missing
  // driver or a failing call means no GPU.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return probe;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(dlsym(driver, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(driver, "cuDeviceGetCount"));
  int gpus = 0;
  if (init != nullptr && count != nullptr && init(0) == 0 && count(&gpus) == 0) probe.gpus = gpus;
  dlclose(driver);
#endif
  return probe;
}

bool HasGpuKernels(std::string_view model) {
  return model == "logreg" || model == "softmax" || model == "mlp" || model == "ctr";
}

absl::StatusOr<DeviceChoice> ChooseDevice(const DeviceSpec& spec, std::string_view model,
                                          const DeviceProbe& probe, int rank) {
  const std::string name(model);
  // Why a GPU cannot be used, from the most basic reason on; empty: it can.
  std::string why;
  if (!probe.cuda_built) {
    why = "this build has no CUDA (configure with SYNCLINE_CUDA=ON where nvcc is installed)";
  } else if (probe.gpus == 0) {
    why = "no CUDA device is visible";
  } else if (spec.kind == DeviceKind::kCuda && spec.index >= probe.gpus) {
    why = absl::StrFormat("cuda:%d is not visible (%d CUDA device%s)", spec.index, probe.gpus,
                          probe.gpus == 1 ? "" : "s");
  } else if (!HasGpuKernels(model)) {
    why = absl::StrCat("the ", name, " model has no GPU kernels yet");
  }
  switch (spec.kind) {
    case DeviceKind::kCpu:
      return DeviceChoice{.device = "cpu", .reason = "--device cpu"};
    case DeviceKind::kAuto:
      if (!why.empty()) return DeviceChoice{.device = "cpu", .reason = why};
      break;
    case DeviceKind::kCuda:
      if (!why.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("--device=cuda:", spec.index, ": ", why, "; use --device cpu or auto"));
      }
      break;
  }
  const int gpu = spec.kind == DeviceKind::kCuda ? spec.index : std::max(rank, 0) % probe.gpus;
  return DeviceChoice{
      .device = absl::StrCat("cuda:", gpu),
      .gpu = gpu,
      .reason = spec.kind == DeviceKind::kCuda
                    ? absl::StrCat("--device cuda:", gpu)
                    : absl::StrFormat("%d CUDA device%s visible; rank %d takes cuda:%d", probe.gpus,
                                      probe.gpus == 1 ? "" : "s", rank, gpu)};
}

}  // namespace syncline
