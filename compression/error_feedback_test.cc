#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compression/codec.h"
#include "job/options.h"

namespace syncline {
namespace {

std::unique_ptr<Codec> MustCreate(const std::string& text) {
  absl::StatusOr<CodecSpec> spec = ParseCodec(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return Codec::Create(*spec);
}

// Whatever the codec drops, error feedback sends later: the decoded blocks plus the final
// residual add up to the gradients.
TEST(ErrorFeedbackTest, DecodedBlocksPlusResidualSumToTheGradients) {
  constexpr uint64_t kSeed = 20190128;
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  for (const std::string text : {"topk:0.01", "sign1", "sign1:100", "fp16"}) {
    std::unique_ptr<Codec> codec = MustCreate(text);
    std::mt19937_64 rng(kSeed);
    std::normal_distribution<float> normal;
    constexpr size_t kN = 10000;
    std::vector<double> sent(kN, 0), total(kN, 0);
    std::vector<float> gradient(kN), decoded(kN);
    std::vector<std::byte> block;
    ErrorFeedback feedback;
    for (int step = 0; step < 200; ++step) {
      for (size_t i = 0; i < kN; ++i) {
        gradient[i] = normal(rng) * (i % 10 == 0 ? 10.0f : 1.0f);
        total[i] += gradient[i];
      }
      feedback.Compress(*codec, gradient, &block);
      std::fill(decoded.begin(), decoded.end(), 0.0f);
      ASSERT_TRUE(codec->DecodeAdd(block, decoded).ok());
      for (size_t i = 0; i < kN; ++i) sent[i] += decoded[i];
    }
    ASSERT_EQ(feedback.residual().size(), kN);
    double worst = 0;
    for (size_t i = 0; i < kN; ++i) {
      const double error = std::fabs(sent[i] + feedback.residual()[i] - total[i]);
      worst = std::max(worst, error / (1.0 + std::fabs(total[i])));
    }
    EXPECT_LT(worst, 1e-4) << text;
  }
}

TEST(ErrorFeedbackTest, TopKResidualHoldsWhatWasNotSent) {
  std::unique_ptr<Codec> codec = MustCreate("topk:0.25");
  const std::vector<float> g = {1, -8, 3, 0.5f, 7, -2, 0.25f, 4};  // K = 2: -8 and 7
  std::vector<std::byte> block;
  ErrorFeedback feedback;
  feedback.Compress(*codec, g, &block);
  EXPECT_EQ(std::vector<float>(feedback.residual().begin(), feedback.residual().end()),
            (std::vector<float>{1, 0, 3, 0.5f, 0, -2, 0.25f, 4}));
  // The next step sends the largest of gradient + residual: -8 and 4 + 4.
  feedback.Compress(*codec, g, &block);
  std::vector<float> decoded(g.size(), 0.0f);
  ASSERT_TRUE(codec->DecodeAdd(block, decoded).ok());
  EXPECT_EQ(decoded, (std::vector<float>{0, -8, 0, 0, 0, 0, 0, 8}));
  feedback.Reset();
  EXPECT_TRUE(feedback.residual().empty());
  // A gradient of another size starts from a zero residual.
  feedback.Compress(*codec, std::vector<float>{5, 1, 1, 1}, &block);
  EXPECT_EQ(std::vector<float>(feedback.residual().begin(), feedback.residual().end()),
            (std::vector<float>{0, 1, 1, 1}));
}

// Karimireddy et al. 2019, "Error Feedback Fixes SignSGD and other Gradient Compression
// Schemes", section 3: minimise f(x) = x^2 / 2 with stochastic gradients g = x + xi, where xi
// is +1 with probability 2/3 and -2 with probability 1/3 (mean 0). For -1 < x < 2 the sign of g
// is +1 with probability 2/3, so sign descent keeps pushing x down until it sits at -1, far
// from the optimum 0; with error feedback it converges to 0.
//
// sign1 scales by the chunk's mean |g|, which in one dimension would make it the identity. So
// the problem runs in d coordinates at once with independent noise and one chunk: the scale is
// then about the same for every coordinate, and each coordinate follows (scaled) sign
// descent. Plain: x -= lr * decode(compress(g)); with feedback, compress(g + e) and keep e.
double MeanOfLastIterates(bool error_feedback, uint64_t seed) {
  constexpr size_t kDims = 256;
  constexpr int kSteps = 20000;
  constexpr int kTail = 1000;
  std::unique_ptr<Codec> codec = Codec::Create(CodecSpec{CodecKind::kSign1, 0, kDims});
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution plus_one(2.0 / 3.0);
  std::vector<float> x(kDims, 1.0f), g(kDims);
  std::vector<std::byte> block;
  ErrorFeedback feedback;
  double tail_sum = 0;
  for (int t = 1; t <= kSteps; ++t) {
    for (size_t i = 0; i < kDims; ++i) g[i] = x[i] + (plus_one(rng) ? 1.0f : -2.0f);
    if (error_feedback) {
      feedback.Compress(*codec, g, &block);
    } else {
      codec->Encode(g, &block);
    }
    const float lr = 0.5f / std::sqrt(static_cast<float>(t));
    EXPECT_TRUE(codec->DecodeAdd(block, x, -lr).ok());
    if (t > kSteps - kTail) {
      double mean = 0;
      for (const float xi : x) mean += xi;
      tail_sum += mean / kDims;
    }
  }
  return tail_sum / kTail;
}

TEST(ErrorFeedbackTest, FixesSignDescentOnTheKarimireddyCounterexample) {
  constexpr uint64_t kSeed = 42;
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  const double plain = MeanOfLastIterates(false, kSeed);
  const double with_feedback = MeanOfLastIterates(true, kSeed);
  RecordProperty("seed", static_cast<int>(kSeed));
  RecordProperty("plain_mean_x", std::to_string(plain));
  RecordProperty("feedback_mean_x", std::to_string(with_feedback));
  EXPECT_LT(plain, -0.5) << "sign descent should settle near -1";
  EXPECT_LT(std::fabs(with_feedback), 0.2) << "error feedback should settle near 0";
}

}  // namespace
}  // namespace syncline
