#include "worker/replicated_model.h"

#include <gtest/gtest.h>

#include <limits>

namespace syncline {
namespace {

// The audit's libsvm line "1 1000000000000:1" made every gossip and all-reduce worker abort
// on bad_alloc: the model is sized by the largest id. It is refused before anything is
// allocated, naming the file's line and the limit.
TEST(ReplicatedModelTest, AModelLargerThanTheLimitIsRefusedNamingWhereAndTheLimit) {
  ParameterLayout layout;
  layout.row_dim = 1;
  layout.num_features = 1000000000001;
  const absl::Status s =
      CheckReplicatedModelFits(layout, OptimizerKind::kAdagrad, "train.libsvm:7", 1 << 30);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("train.libsvm:7"), std::string::npos) << s;
  EXPECT_NE(s.message().find("over the limit of 1024 MiB"), std::string::npos) << s;
  OptimizerConfig adagrad;
  adagrad.kind = OptimizerKind::kAdagrad;
  ReplicatedModel model("gossip");
  const absl::Status init = model.Init(layout, adagrad);  // the default limit, at most RAM / 2
  EXPECT_EQ(init.code(), absl::StatusCode::kInvalidArgument) << init;
  EXPECT_TRUE(model.parameters().empty());
  // Sizes that overflow 64 bits say so.
  layout.row_dim = 1u << 31;
  layout.num_features = uint64_t{1} << 40;
  EXPECT_EQ(ReplicatedModelBytes(layout, OptimizerKind::kAdam),
            std::numeric_limits<uint64_t>::max());
  layout.row_dim = 4;
  layout.num_features = 1000;
  EXPECT_TRUE(CheckReplicatedModelFits(layout, OptimizerKind::kSgd, "x:1", 1 << 20).ok());
  EXPECT_EQ(ReplicatedModelBytes(layout, OptimizerKind::kSgd), 1000u * (4 * 4 + 8) + 4);
}

}  // namespace
}  // namespace syncline
