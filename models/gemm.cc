#include "models/gemm.h"

#include <cblas.h>

#include <mutex>

namespace syncline {
namespace {

CBLAS_TRANSPOSE Op(Transpose t) { return t == Transpose::kYes ? CblasTrans : CblasNoTrans; }

// OpenBLAS sizes its pool from OPENBLAS_NUM_THREADS or the core count; a product here must
// never fan out (see gemm.h).
void OneThread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace

void Gemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  OneThread();
  cblas_sgemm(CblasRowMajor, Op(ta), Op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void Gemm(Transpose ta, Transpose tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  OneThread();
  cblas_dgemm(CblasRowMajor, Op(ta), Op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace syncline
