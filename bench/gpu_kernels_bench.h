// The GPU half of syncline-bench-gpu (gpu_kernels_bench.cu, CUDA builds only): the training
// step's memory-bound kernels (the sparse gather and scatter) against a device-to-device copy of
// the same bytes, and its matrix products against cuBLAS's default FP32 and TF32 modes at the
// same shapes. Prints markdown tables; returns the process's exit code.
#ifndef SYNCLINE_BENCH_GPU_KERNELS_BENCH_H_
#define SYNCLINE_BENCH_GPU_KERNELS_BENCH_H_

namespace syncline::bench {

int RunKernelBenchmarks(bool quick);

}  // namespace syncline::bench

#endif  // SYNCLINE_BENCH_GPU_KERNELS_BENCH_H_
