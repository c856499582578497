// The models' training step and evaluation written once for a data-parallel executor: a CUDA
// GPU (device/cuda_model.cu) or, for tests, the host (device/host_executor.h).
//
// Every kernel is a functor over an index, `void operator()(size_t i) const`, marked
// SYNCLINE_HD so that nvcc compiles it for the device and g++ for the host. The steps
// (SparseStep, LinearStep, MlpStep, ...) call an executor E for what a GPU library does better
// than a hand-written kernel:
//
//   E::Array<T>          grow-only storage where the kernels run: data(), Reserve(n)
//   E::PinnedArray<T>    grow-only host storage that uploads and downloads read and write
//   e.ForEach(n, f)      f(i) for every i in [0, n), in any order and concurrently
//   e.Upload(dst, src, n)
//                        host to device, on a copy stream: kernels see it after e.Fence()
//   e.Fence()            work issued after it waits for the uploads issued before it
//   e.Download(dst, src, n), e.Zero(p, n)
//                        in order with the kernels
//   e.Gemm(...)          row-major C = alpha op(A) op(B) + beta C, as models/gemm.h (cuBLAS)
//   e.SortBySlot(slots, sorted, order, n, bits)
//                        stable sort of occurrence indices by slot (a radix sort: CUB)
//   e.ExclusiveSum(in, out, n)
//                        out[i] = in[0] + ... + in[i - 1] (uint32; a scan: CUB)
//   e.SortByKey64(keys, order, n, bits)
//                        order[0, n) = the indices of keys[0, n) in a stable sort by key
//                        (64-bit, each below 2^bits; a radix sort: CUB)
//   E::BlockCodec        a codec over floats where the kernels run (the CUDA codecs):
//                        Input(n) -> where it reads, Encode(n, &block) -> the block on the
//                        host, Decode(n) -> the last block decoded, where the kernels run
//   e.SortUnique(ids, n, out) -> count
//                        the sorted unique values of ids[0, n) into out (CUB)
//   e.Copy(dst, src, n)  device to device, in order with the kernels
//   e.Finish()           waits for the work and the uploads issued
//   e.Activate()         makes the executor's device the calling thread's (a model's entry
//                        points call it first)
//
// The host executor runs the same steps serially, so the index arithmetic of every kernel and
// the order of every step is checked against the CPU models (device_model_test.cc) on machines
// without a GPU; the same tests run the CUDA executor where there is one.
//
// Determinism: no kernel uses atomics. Row gradients are summed per row in the order the
// features occur in the batch (a stable sort groups them), in pieces of kPiece features whose
// partial sums are then added in order; dense gradients per column in fixed chunks; the loss
// per example (summed on the host in example order). So a step's result is a pure function of
// its inputs, as BSP's reproducibility needs.
//
// The pieces, one concept a header: device/kernels.h (what the kernels share), device/scatter.h
// (the deterministic scatter), device/batch.h (a batch staged for the device), device/shape.h,
// device/mlp_step.h (linear and mlp), device/ctr_kernels.h and device/ctr_step.h (ctr),
// device/evaluation.h (metrics and AUC on the device). This header names the executor's
// contract and includes them all.
//
// Thread-safety: the functors are immutable; a step uses its executor and buffers alone.
#ifndef SYNCLINE_DEVICE_DEVICE_STEP_H_
#define SYNCLINE_DEVICE_DEVICE_STEP_H_

#include "device/batch.h"
#include "device/ctr_kernels.h"
#include "device/ctr_step.h"
#include "device/evaluation.h"
#include "device/kernels.h"
#include "device/mlp_step.h"
#include "device/scatter.h"
#include "device/shape.h"

#endif  // SYNCLINE_DEVICE_DEVICE_STEP_H_
