// Row-major matrix products for the models' dense layers, on OpenBLAS.
//
// OpenBLAS picks its kernels for the CPU it runs on (AVX-512, AVX2, ...) while the rest of the
// build stays portable x86-64. It runs on the calling thread only: a worker process is one
// training thread, and a job puts several processes on a machine, so a BLAS thread pool would
// only compete with them. With one thread the result is a pure function of the inputs, so BSP
// runs stay bitwise reproducible on a given machine.
//
// Thread-safety: thread-safe.
#ifndef SYNCLINE_MODELS_GEMM_H_
#define SYNCLINE_MODELS_GEMM_H_

namespace syncline {

enum class Transpose { kNo, kYes };

// C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C, every matrix row-major with leading
// dimensions lda, ldb, ldc (of A and B as stored, before op).
void Gemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
void Gemm(Transpose ta, Transpose tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc);

}  // namespace syncline

#endif  // SYNCLINE_MODELS_GEMM_H_
