// CreateCudaModel (device/cuda_model.h): the device models on the CUDA executor.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "device/cuda_executor.cuh"
#include "device/cuda_model.h"
#include "device/device_model.h"
#include "device/device_step.h"
#include "device/placement.h"

namespace syncline {

using cuda_executor::CudaExecutor;

absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(std::string_view name,
                                                       const ModelOptions& options, int device) {
  auto reference = Model::Create(name, options);
  if (!reference.ok()) return reference.status();
  device_step::Shape shape;
  if (!HasGpuKernels(name) || !DeviceShapeOf(**reference, options, &shape)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", std::string(name), " model has no GPU kernels yet"));
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device is usable: ", cudaGetErrorString(e)));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", device, " is not visible (", count, " CUDA devices)"));
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot use cuda:", device, ": ", cudaGetErrorString(e)));
  }
  return std::make_unique<DeviceModel<CudaExecutor>>(std::move(*reference), std::move(shape),
                                                     CudaExecutor(device));
}

}  // namespace syncline
