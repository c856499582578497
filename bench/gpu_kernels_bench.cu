#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/gpu_kernels_bench.h"
#include "device/cuda_executor.cuh"
#include "device/device_step.h"

namespace syncline::bench {
namespace {

using cuda_executor::Check;
using cuda_executor::CudaExecutor;

// The best of `turns` timings (after one untimed) of f() on `stream`, in milliseconds.
template <class F>
double BestMs(cudaStream_t stream, int turns, const F& f) {
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  f();
  double best = 1e30;
  for (int t = 0; t < turns; ++t) {
    Check(cudaEventRecord(start, stream), "cudaEventRecord");
    f();
    Check(cudaEventRecord(stop, stream), "cudaEventRecord");
    Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    best = std::min(best, static_cast<double>(ms));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

// A device-to-device copy that moves `bytes` in all (half read, half written).
double CopyMs(CudaExecutor& e, size_t bytes) {
  CudaExecutor::Array<char> from, to;
  from.Reserve(bytes / 2 + 1);
  to.Reserve(bytes / 2 + 1);
  Check(cudaMemsetAsync(from.data(), 1, bytes / 2, e.stream()), "cudaMemsetAsync");
  return BestMs(e.stream(), 7, [&] {
    Check(cudaMemcpyAsync(to.data(), from.data(), bytes / 2, cudaMemcpyDeviceToDevice, e.stream()),
          "cudaMemcpyAsync");
  });
}

void SparseKernels(CudaExecutor& e, bool quick) {
  absl::PrintF(
      "\n## Sparse gather and scatter against a device-to-device copy of the same bytes\n\n"
      "Bytes: the rows each example reads (or the row gradients each feature adds) and the "
      "outputs written; the copy moves as many (half read, half written). Best of 7. Ids: "
      "\"skewed\" draws each field's from 2^22 with a skew; \"hot\" gives every field 4 "
      "values (as some of Criteo's have), so a row's gradient sums thousands of features, one "
      "thread per row and column.\n\n"
      "| kernel | ids | examples | features/example | keys | dim | GB/s | copy GB/s | "
      "kernel/copy |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  const size_t n = quick ? 4096 : 65536;
  const int per_example = 39;
  for (const bool hot : {false, true}) {
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    device_step::HostBatch<CudaExecutor> host;
    host.Reserve(n, n * per_example, /*ctr=*/false);
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < n; ++i) {
      host.offsets.data()[i] = static_cast<uint32_t>(i * per_example);
      host.labels.data()[i] = 0;
      for (int f = 0; f < per_example; ++f) {
        const uint64_t value = hot ? static_cast<uint64_t>(u(rng) * 4)
                                   : static_cast<uint64_t>(std::pow(u(rng), 3.0f) * (1 << 22));
        const uint64_t id = (static_cast<uint64_t>(f) << 22) | value;
        host.ids.data()[i * per_example + f] = id;
        host.values.data()[i * per_example + f] = 1.0f;
        ids.push_back(id);
      }
    }
    host.offsets.data()[n] = static_cast<uint32_t>(n * per_example);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    device_step::SparseBatch<CudaExecutor> batch;
    batch.Upload(e, host, ids.data(), ids.size());
    e.Fence();
    batch.Index(e);
    for (const int dim : {16, 64, 256}) {
      CudaExecutor::Array<float> rows, bias, out, grads;
      rows.Reserve(ids.size() * dim);
      bias.Reserve(dim);
      out.Reserve(n * dim);
      grads.Reserve(ids.size() * dim);
      e.Zero(rows.data(), ids.size() * dim);
      e.Zero(bias.data(), dim);
      e.Zero(out.data(), n * dim);
      const size_t moved = (n * per_example * dim + n * dim) * sizeof(float);
      const double gather = BestMs(
          e.stream(), 7, [&] { batch.Gather(e, rows.data(), bias.data(), dim, out.data()); });
      const size_t scattered = (n * per_example * dim + ids.size() * dim) * sizeof(float);
      const double copy_gather = CopyMs(e, moved), copy_scatter = CopyMs(e, scattered);
      auto gbs = [](size_t bytes, double ms) { return bytes / (ms * 1e6); };
      const char* kind = hot ? "hot" : "skewed";
      absl::PrintF("| gather | %s | %d | %d | %d | %d | %.0f | %.0f | %.2f |\n", kind, n,
                   per_example, ids.size(), dim, gbs(moved, gather), gbs(moved, copy_gather),
                   copy_gather / gather);
      // Both shapes of the scatter's threads, the one the batch chooses marked.
      const int chosen = batch.ScatterColumns(dim);
      for (const int columns : {1, device_step::kScatterColumns}) {
        batch.set_scatter_columns(columns);
        const double scatter =
            BestMs(e.stream(), 7, [&] { batch.Scatter(e, out.data(), dim, grads.data()); });
        absl::PrintF(
            "| scatter, %d column%s a thread%s | %s | %d | %d | %d | %d | %.0f | %.0f | "
            "%.2f |\n",
            columns, columns == 1 ? "" : "s", columns == chosen ? " (chosen)" : "", kind, n,
            per_example, ids.size(), dim, gbs(scattered, scatter), gbs(scattered, copy_scatter),
            copy_scatter / scatter);
      }
      batch.set_scatter_columns(0);
    }
  }
}

void Gemms(CudaExecutor& e, bool quick) {
  absl::PrintF(
      "\n## The mlp's matrix products (256,128, K=10) against cuBLAS at the same shapes\n\n"
      "The step's: row-major through the executor (cuBLAS, plain FP32, operands swapped for "
      "the row-major layout). cuBLAS: a handle of its own, the same shapes in its default math "
      "and in TF32 (which the step does not use: it would break the 1e-4 agreement with the "
      "CPU). TFLOP/s, best of 7.\n\n"
      "| product | m x n x k | step | cuBLAS FP32 | step/cuBLAS | cuBLAS TF32 |\n"
      "| --- | --- | ---: | ---: | ---: | ---: |\n");
  const int batch = quick ? 4096 : 65536;
  struct Product {
    const char* what;
    Transpose ta, tb;
    int m, n, k;
  };
  const Product products[] = {
      {"forward 256->128", Transpose::kNo, Transpose::kNo, batch, 128, 256},
      {"forward 128->10", Transpose::kNo, Transpose::kNo, batch, 10, 128},
      {"weights' gradient 256x128", Transpose::kYes, Transpose::kNo, 256, 128, batch},
      {"inputs' gradient 128->256", Transpose::kNo, Transpose::kYes, batch, 256, 128},
  };
  cublasHandle_t mine = nullptr;
  Check(cublasCreate(&mine), "cublasCreate");
  Check(cublasSetStream(mine, e.stream()), "cublasSetStream");
  for (const Product& p : products) {
    // Stored as the step stores them: A is m x k (or k x m when transposed), B k x n (n x k).
    const int lda = p.ta == Transpose::kNo ? p.k : p.m;
    const int ldb = p.tb == Transpose::kNo ? p.n : p.k;
    CudaExecutor::Array<float> a, b, c;
    a.Reserve(static_cast<size_t>(p.m) * p.k);
    b.Reserve(static_cast<size_t>(p.k) * p.n);
    c.Reserve(static_cast<size_t>(p.m) * p.n);
    e.Zero(a.data(), static_cast<size_t>(p.m) * p.k);
    e.Zero(b.data(), static_cast<size_t>(p.k) * p.n);
    const double flops = 2.0 * p.m * p.n * p.k;
    const double step = BestMs(e.stream(), 7, [&] {
      e.Gemm(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), p.n);
    });
    auto direct = [&](cublasMath_t math) {
      Check(cublasSetMathMode(mine, math), "cublasSetMathMode");
      const float one = 1, zero = 0;
      return BestMs(e.stream(), 7, [&] {
        Check(cublasSgemm(mine, p.tb == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N,
                          p.ta == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N, p.n, p.m, p.k, &one,
                          b.data(), ldb, a.data(), lda, &zero, c.data(), p.n),
              "cublasSgemm");
      });
    };
    const double fp32 = direct(CUBLAS_DEFAULT_MATH);
    const double tf32 = direct(CUBLAS_TF32_TENSOR_OP_MATH);
    auto tflops = [&](double ms) { return flops / (ms * 1e9); };
    absl::PrintF("| %s | %d x %d x %d | %.1f | %.1f | %.2f | %.1f |\n", p.what, p.m, p.n, p.k,
                 tflops(step), tflops(fp32), fp32 / step, tflops(tf32));
  }
  cublasDestroy(mine);
}

}  // namespace

int RunKernelBenchmarks(bool quick) {
  CudaExecutor e(0);
  SparseKernels(e, quick);
  Gemms(e, quick);
  return 0;
}

}  // namespace syncline::bench
