#include "compression/topk_select.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "compression/cpu_kernels.h"
#include "compression/half.h"

namespace syncline::compression_internal {
namespace {

// Below this many entries, or when more than an eighth is kept, sampling does not pay.
constexpr size_t kMinSampledN = size_t{1} << 16;
// The sample is sized so that about this many of its entries lie above the k-th largest key:
// the relative error of the estimated count is then about 1 / sqrt(512) = 4.4%.
constexpr double kSampleHits = 512;
constexpr size_t kMinSample = 4096;
// At most this share (1 / kMaxSampleShare) of the entries is sampled: on small gradients a
// coarser estimate (more candidates) is cheaper than a larger sample.
constexpr size_t kMaxSampleShare = 16;
constexpr size_t kMaxSample = size_t{1} << 20;
// Entries per sampled cache line.
constexpr size_t kSampleLine = 16;
// Samples with fewer expected hits than this are too thin to estimate from.
constexpr double kMinSampleHits = 64;
// The sample seed is fixed (mixed with n): the selection is exact whatever the sample, and a
// fixed seed makes its cost reproducible too.
constexpr uint64_t kSampleSeed = 0x9e3779b97f4a7c15ull;
// CutAtRank's histogram: the top 11 of the 31 key bits (exponent and 3 mantissa bits).
constexpr int kBucketShift = 20;
constexpr size_t kBuckets = size_t{1} << (31 - kBucketShift);

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The rank-th largest key, and how many entries equal to it belong to the `rank` largest
// (the others equal to it rank lower, by index).
struct Cut {
  uint32_t key;
  size_t ties;
};

// A radix step finds the cut: a histogram of the top key bits names the bucket holding the
// rank-th largest, and nth_element runs on that bucket's keys alone (for gradients a small
// fraction of them). Two reads of the keys key_at(0 .. size - 1); 1 <= rank <= size.
template <typename KeyAt>
Cut CutAtRank(size_t size, const KeyAt& key_at, size_t rank) {
  // Four interleaved histograms: gradients put most keys in a few buckets, and increments of
  // one counter would wait on each other. (Raw pointers, here and below, let the compiler
  // keep the loop state in registers.)
  std::vector<uint32_t> histograms(4 * kBuckets, 0);
  uint32_t* h = histograms.data();
  size_t i = 0;
  for (; i + 4 <= size; i += 4) {
    ++h[key_at(i) >> kBucketShift];
    ++h[(key_at(i + 1) >> kBucketShift) + kBuckets];
    ++h[(key_at(i + 2) >> kBucketShift) + 2 * kBuckets];
    ++h[(key_at(i + 3) >> kBucketShift) + 3 * kBuckets];
  }
  for (; i < size; ++i) ++h[key_at(i) >> kBucketShift];
  for (size_t b = 0; b < kBuckets; ++b) {
    h[b] += h[b + kBuckets] + h[b + 2 * kBuckets] + h[b + 3 * kBuckets];
  }
  size_t bucket = kBuckets;
  size_t above = 0;  // keys in buckets above `bucket`
  while (above + h[bucket - 1] < rank) above += h[--bucket];
  --bucket;
  std::vector<uint32_t> in_bucket(h[bucket]);
  uint32_t* dst = in_bucket.data();
  size_t count = 0;
  for (i = 0; i < size; ++i) {
    const uint32_t key = key_at(i);
    if ((key >> kBucketShift) == bucket) dst[count++] = key;
  }
  const size_t nth = rank - above - 1;
  std::nth_element(in_bucket.begin(), in_bucket.begin() + nth, in_bucket.end(), std::greater<>());
  const uint32_t cut = in_bucket[nth];
  // Everything in the bucket above the cut now lies before position nth.
  const auto larger = std::count_if(in_bucket.begin(), in_bucket.begin() + nth,
                                    [cut](uint32_t key) { return key > cut; });
  return {cut, rank - above - static_cast<size_t>(larger)};
}

// Replaces *out with the k entries of index_at(j), j ascending, whose key_at(j) is above the
// cut or, for the first cut.ties of them, equal to it.
template <typename IndexAt, typename KeyAt>
void TakeAboveCut(size_t size, const IndexAt& index_at, const KeyAt& key_at, Cut cut, size_t k,
                  std::vector<uint64_t>* out) {
  out->resize(k);
  uint64_t* dst = out->data();
  size_t taken = 0;
  for (size_t j = 0; j < size && taken < k; ++j) {
    const uint32_t key = key_at(j);
    if (key > cut.key) {
      dst[taken++] = index_at(j);
    } else if (key == cut.key && cut.ties > 0) {
      dst[taken++] = index_at(j);
      --cut.ties;
    }
  }
}

void SelectExact(std::span<const float> values, size_t k, std::vector<uint64_t>* out) {
  auto key_at = [values](size_t i) { return MagnitudeKey(values[i]); };
  TakeAboveCut(
      values.size(), [](size_t i) { return i; }, key_at, CutAtRank(values.size(), key_at, k), k,
      out);
}

// Returns false when sampling cannot give the answer (the caller then runs SelectExact).
bool SelectSampled(std::span<const float> values, size_t k, std::vector<uint64_t>* out,
                   TopKTrace* trace) {
  const size_t n = values.size();
  if (n < kMinSampledN || k > n / 8) return false;
  const double fraction = static_cast<double>(k) / static_cast<double>(n);
  const size_t m = std::min(
      n / kMaxSampleShare,
      std::clamp(static_cast<size_t>(std::ceil(kSampleHits / fraction)), kMinSample, kMaxSample));
  if (static_cast<double>(m) * fraction < kMinSampleHits) return false;

  // One cache line of kSampleLine entries from each of m / kSampleLine equal strata: spread
  // over the whole gradient, and every line read is used whole.
  const size_t lines = m / kSampleLine;
  const size_t stratum_lines = n / kSampleLine / lines;
  std::vector<uint32_t> sample(lines * kSampleLine);
  uint64_t state = kSampleSeed ^ n;
  for (size_t j = 0; j < lines; ++j) {
    // Multiply-shift instead of a 64-bit modulo, which would cost more than the read.
    const uint64_t line = j * stratum_lines + (((SplitMix64(&state) >> 32) * stratum_lines) >> 32);
    const float* src = values.data() + line * kSampleLine;
    for (size_t i = 0; i < kSampleLine; ++i) sample[j * kSampleLine + i] = MagnitudeKey(src[i]);
  }
  const double hits = static_cast<double>(sample.size()) * fraction;

  const CpuKernels& kernels = BestKernels();
  for (const double sigmas : {3.0, 8.0}) {
    // Take the threshold `sigmas` binomial standard deviations below the estimate, so that
    // the candidates include the k largest with high probability.
    const size_t rank = std::min(
        sample.size(), static_cast<size_t>(std::ceil(hits + sigmas * std::sqrt(hits))) + 1);
    const uint32_t threshold = CutAtRank(
                                   sample.size(), [&sample](size_t i) { return sample[i]; }, rank)
                                   .key;
    const double expected =
        static_cast<double>(n) * static_cast<double>(rank) / static_cast<double>(sample.size());
    const size_t cap = std::min(n, static_cast<size_t>(1.5 * expected) + 1024);
    auto indices = std::make_unique_for_overwrite<uint64_t[]>(cap);
    auto keys = std::make_unique_for_overwrite<uint32_t[]>(cap);
    const size_t count =
        kernels.select_at_least(values.data(), n, threshold, indices.get(), keys.get(), cap);
    ++trace->passes;
    if (count == kTooMany) return false;  // ties at the threshold: sampling cannot separate them
    if (count < k) continue;              // re-tune with a wider margin
    const uint32_t* candidate_keys = keys.get();
    const uint64_t* candidate_indices = indices.get();
    auto key_at = [candidate_keys](size_t j) { return candidate_keys[j]; };
    TakeAboveCut(
        count, [candidate_indices](size_t j) { return candidate_indices[j]; }, key_at,
        CutAtRank(count, key_at, k), k, out);
    return true;
  }
  return false;
}

}  // namespace

void SelectTopK(std::span<const float> values, size_t k, TopKMethod method,
                std::vector<uint64_t>* indices, TopKTrace* trace) {
  TopKTrace local;
  if (trace == nullptr) trace = &local;
  *trace = TopKTrace{};
  indices->clear();
  const size_t n = values.size();
  k = std::min(k, n);
  if (k == 0) return;
  if (k == n) {
    indices->resize(n);
    for (size_t i = 0; i < n; ++i) (*indices)[i] = i;
    return;
  }
  if (method == TopKMethod::kSampled && SelectSampled(values, k, indices, trace)) return;
  indices->clear();
  trace->used_exact = true;
  SelectExact(values, k, indices);
}

}  // namespace syncline::compression_internal
