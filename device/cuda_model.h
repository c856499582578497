// GPU models: the device steps of device/device_step.h on a CUDA device (device/cuda_model.cu),
// behind the Model interface, so that the trainer, the sync backends and evaluation treat a GPU
// worker like any other. Every model (logreg, softmax, mlp, ctr) has device steps.
//
// A build without CUDA has none: CreateCudaModel then fails naming why.
//
// Thread-safety: CreateCudaModel may be called from any thread; the models are as Model.
#ifndef SYNCLINE_DEVICE_CUDA_MODEL_H_
#define SYNCLINE_DEVICE_CUDA_MODEL_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "models/model.h"

namespace syncline {

// Whether this build compiled the models' device steps for CUDA.
bool CudaModelsBuilt();

// The model `name` with `options` (as Model::Create) computing on CUDA device `device`.
// Errors: Model::Create's; FailedPrecondition when the build has no CUDA, the model has no
// device steps (HasGpuKernels in device/placement.h), or the device cannot be used (the CUDA
// error named).
absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(std::string_view name,
                                                       const ModelOptions& options, int device);

}  // namespace syncline

#endif  // SYNCLINE_DEVICE_CUDA_MODEL_H_
