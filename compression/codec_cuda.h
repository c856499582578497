// CUDA encoders and decoders for the codecs of codec.h. They produce the same bytes as the CPU
// codecs (sign1 scales use the summation order codec.h defines; topk selects the same set,
// ties included, by an exact radix select on the magnitude keys) but for the payload of a NaN
// sign1 scale (from a NaN in the gradient; no decoder accepts it), and accept exactly the blocks
// the CPU codecs accept (validation runs on the host, before anything is copied or decoded).
// Decoding multiplies and adds without fusing, so the CPU and GPU give the same floats.
//
// Indices of topk blocks are 32-bit here: n must be below 2^32.
// This header includes no CUDA header, so CPU-only code can include it; the library
// syncline_compression_cuda exists only when the build has CUDA (SYNCLINE_HAVE_CUDA).
#ifndef SYNCLINE_COMPRESSION_CODEC_CUDA_H_
#define SYNCLINE_COMPRESSION_CODEC_CUDA_H_

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compression/codec.h"

namespace syncline {

// Whether a CUDA device can be used. Any error (no driver, no device) counts as "no".
bool CudaAvailable();

// A codec with device buffers for up to `capacity` entries, kept between calls, working on
// the current device in its own stream. The *OnDevice steps serve gradients that already live
// on the device, and measuring the kernels without the PCIe copies.
// Thread-compatible.
class CudaCodec {
 public:
  // FailedPrecondition without a device; InvalidArgument for an invalid spec.
  static absl::StatusOr<std::unique_ptr<CudaCodec>> Create(const CodecSpec& spec, size_t capacity);
  ~CudaCodec();
  CudaCodec(const CudaCodec&) = delete;
  CudaCodec& operator=(const CudaCodec&) = delete;

  const CodecSpec& spec() const;
  size_t capacity() const;

  // Codec::Encode on the device: copies values in, encodes, copies the block out.
  absl::Status Encode(std::span<const float> values, std::vector<std::byte>* block);
  // Codec::DecodeAdd on the device; `out` is untouched when the block is malformed.
  absl::Status DecodeAdd(std::span<const std::byte> block, std::span<float> out,
                         float scale = 1.0f);

  // Device input (capacity floats), read by EncodeOnDevice.
  float* device_input();
  // Device output (capacity floats), added to by DecodeAddOnDevice.
  float* device_output();
  absl::Status UploadInput(std::span<const float> values);
  absl::Status UploadOutput(std::span<const float> values);
  absl::Status DownloadOutput(std::span<float> values);
  // Encodes device_input()[0, n) into the device block; returns when done.
  absl::Status EncodeOnDevice(size_t n);
  // Validates `block` as an encoding of n entries and copies it into the device block.
  absl::Status UploadBlock(std::span<const std::byte> block, size_t n);
  // Copies the device block (from EncodeOnDevice or UploadBlock) out.
  absl::Status DownloadBlock(std::vector<std::byte>* block);
  // device_output()[0, n) += scale * decode(device block); the block must encode n entries.
  // Returns when done.
  absl::Status DecodeAddOnDevice(size_t n, float scale = 1.0f);
  // Seconds a device-to-device cudaMemcpy of n floats (input to output) takes, launch and
  // wait included, the best of `repeats`: the reference the kernels are measured against.
  absl::StatusOr<double> TimeDeviceCopy(size_t n, int repeats);

 private:
  struct Impl;
  explicit CudaCodec(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One-shot forms (each allocates a CudaCodec for the call).
absl::Status CudaEncode(const CodecSpec& spec, std::span<const float> values,
                        std::vector<std::byte>* block);
absl::Status CudaDecodeAdd(const CodecSpec& spec, std::span<const std::byte> block,
                           std::span<float> out, float scale = 1.0f);

}  // namespace syncline

#endif  // SYNCLINE_COMPRESSION_CODEC_CUDA_H_
