// SYNCLINE_HD marks a function that nvcc compiles for the device as well as the host (code that
// the CPU path and the GPU path share, so that both compute the same floats); g++ sees nothing.
#ifndef SYNCLINE_CORE_HOST_DEVICE_H_
#define SYNCLINE_CORE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define SYNCLINE_HD __host__ __device__
#else
#define SYNCLINE_HD
#endif

#endif  // SYNCLINE_CORE_HOST_DEVICE_H_
