#include "device/cuda_model.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace syncline {

bool CudaModelsBuilt() { return SYNCLINE_GPU_MODELS != 0; }

#if !SYNCLINE_GPU_MODELS
absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(std::string_view name,
                                                       const ModelOptions& options, int device) {
  (void)options;
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot train ", std::string(name), " on cuda:", device,
      ": this build has no CUDA (configure with SYNCLINE_CUDA=ON where nvcc is installed)"));
}
#endif

}  // namespace syncline
