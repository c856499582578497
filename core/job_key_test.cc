#include "core/job_key.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"

namespace syncline {
namespace {

class JobKeyTest : public testing::Test {
 protected:
  JobKeyTest() {
    std::string pattern = testing::TempDir() + "job_key_XXXXXX";
    dir_ = mkdtemp(pattern.data());
    path_ = dir_ + "/job.key";
  }
  ~JobKeyTest() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(JobKeyTest, SavedAndLoadedKeysDeriveTheSameEndpointKeys) {
  const JobKey key = JobKey::Generate();
  ASSERT_TRUE(key.Save(path_).ok());
  struct stat st = {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto loaded = JobKey::Load(path_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->PublicKeyFor("w3"), key.PublicKeyFor("w3"));
  EXPECT_EQ(loaded->SecretKeyFor("ps0"), key.SecretKeyFor("ps0"));
  EXPECT_EQ(key.PublicKeyFor("w3").size(), 32u);
  EXPECT_NE(key.PublicKeyFor("w3"), key.PublicKeyFor("w4"));
  EXPECT_NE(key.PublicKeyFor("w3"), JobKey::Generate().PublicKeyFor("w3"));
}

TEST_F(JobKeyTest, RefusesAKeyOthersMayReadOrThatIsNotAKey) {
  ASSERT_TRUE(JobKey::Generate().Save(path_).ok());
  chmod(path_.c_str(), 0644);
  auto readable = JobKey::Load(path_);
  EXPECT_EQ(readable.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(readable.status().message().find("chmod 600"), std::string::npos);
  std::ofstream(path_) << "syncline-job-key v1\nnot hex\n";
  chmod(path_.c_str(), 0600);
  EXPECT_EQ(JobKey::Load(path_).status().code(), absl::StatusCode::kInvalidArgument);
  std::ofstream(path_) << "hello\n";
  EXPECT_NE(JobKey::Load(path_).status().message().find("is not a job key"), std::string::npos);
  EXPECT_EQ(JobKey::Load(dir_ + "/none").status().code(), absl::StatusCode::kNotFound);
}

// The audit planted OUT/job.key.tmp -> a victim file, and Save wrote the key into the victim.
TEST_F(JobKeyTest, SaveNeverWritesThroughAPlantedLink) {
  const std::string victim = dir_ + "/victim";
  std::ofstream(victim) << "precious\n";
  std::filesystem::create_symlink(victim, path_ + ".tmp");
  ASSERT_TRUE(JobKey::Generate().Save(path_).ok());
  std::ifstream in(victim);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(path_));
  EXPECT_TRUE(JobKey::Load(path_).ok());
  // A link at the key's own name is replaced, not followed, too.
  std::filesystem::remove(path_);
  std::filesystem::create_symlink(victim, path_);
  ASSERT_TRUE(JobKey::Generate().Save(path_).ok());
  in = std::ifstream(victim);
  std::getline(in, line);
  EXPECT_EQ(line, "precious");
}

TEST_F(JobKeyTest, AKeyThatIsNotARegularFileIsRefusedWithoutBlocking) {
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  const auto fifo = JobKey::Load(path_);
  EXPECT_FALSE(fifo.ok());
  EXPECT_NE(fifo.status().message().find("not a regular file"), std::string::npos) << fifo.status();
}

// Per-node keys: each node's file holds its own secrets and its peers' public keys only.
class NodeKeyTest : public JobKeyTest {
 protected:
  NodeKeyTest() {
    for (const std::string& node : nodes_) {
      EXPECT_TRUE(job_.SaveNodeKey(dir_ + "/" + node + ".key", node, 0, nodes_).ok());
    }
  }
  JobKey Node(const std::string& node) {
    auto key = JobKey::Load(dir_, node);
    EXPECT_TRUE(key.ok()) << key.status();
    return *std::move(key);
  }
  static std::string Hex(const std::string& bytes) { return absl::BytesToHexString(bytes); }
  static std::string FileText(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  const std::vector<std::string> nodes_ = {"ps0", "w0", "w1"};
  JobKey job_ = JobKey::Generate();
};

TEST_F(NodeKeyTest, ANodeHoldsItsOwnSecretsAndItsPeersPublicKeysOnly) {
  const JobKey w0 = Node("w0");
  EXPECT_FALSE(w0.authority());
  EXPECT_EQ(w0.node(), "w0");
  for (const std::string id : {"w0", "w0.ctl", "w0@g2", "w0@g3.1"}) {
    EXPECT_TRUE(w0.Holds(id)) << id;
    EXPECT_EQ(w0.SecretKeyFor(id), job_.SecretKeyFor(id)) << id;
  }
  for (const std::string id : {"w1", "w1.ctl", "w1@g2", "ps0", "ps0.ctl", "coordinator"}) {
    EXPECT_FALSE(w0.Holds(id)) << id;
    EXPECT_EQ(w0.SecretKeyFor(id), "") << id;
  }
  // The public keys it needs: its peers' data keys and the coordinator's, as the job's key
  // derives them; none of another node's control keys.
  for (const std::string id : {"w1", "w1@g2.1", "ps0", "coordinator"}) {
    EXPECT_EQ(w0.PublicKeyFor(id), job_.PublicKeyFor(id)) << id;
  }
  EXPECT_EQ(w0.PublicKeyFor("w1.ctl"), "");
  // Neither the job's secret nor another node's is in its file.
  const std::string text = FileText(dir_ + "/w0.key");
  for (const std::string id : {"w1", "w1.ctl", "ps0", "ps0.ctl", "coordinator"}) {
    EXPECT_EQ(text.find(Hex(job_.SecretKeyFor(id))), std::string::npos) << id;
  }
  ASSERT_TRUE(job_.Save(path_).ok());
  const std::string job_text = FileText(path_);
  const std::string job_secret = job_text.substr(job_text.find('\n') + 1, 64);
  ASSERT_EQ(job_secret.size(), 64u);
  EXPECT_EQ(text.find(job_secret), std::string::npos);
  // A node's key makes no job key, nor another node's.
  EXPECT_EQ(w0.Save(path_).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w0.SaveNodeKey(dir_ + "/x.key", "w1", 0, nodes_).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(NodeKeyTest, BothEndsAndTheJobKeyAgreeOnAPairKeyNoThirdNodeCanCompute) {
  const JobKey w0 = Node("w0"), w1 = Node("w1"), ps0 = Node("ps0");
  constexpr char kContext[] = "test pair:";
  const auto by_client = w0.PairKey(kContext, "w0", "ps0");
  ASSERT_TRUE(by_client.has_value());
  EXPECT_EQ(ps0.PairKey(kContext, "w0", "ps0"), by_client);
  EXPECT_EQ(job_.PairKey(kContext, "w0", "ps0"), by_client);
  EXPECT_FALSE(w1.PairKey(kContext, "w0", "ps0").has_value());
  // Each pair, direction and meeting has a key of its own.
  EXPECT_NE(w0.PairKey(kContext, "ps0", "w0"), by_client);
  EXPECT_NE(w0.PairKey(kContext, "w0", "w1"), by_client);
  EXPECT_NE(w0.PairKey(kContext, "w0@g1", "w1@g1"), w0.PairKey(kContext, "w0", "w1"));
  EXPECT_EQ(w0.PairKey(kContext, "w0@g1", "w1@g1"), w1.PairKey(kContext, "w0@g1", "w1@g1"));
  EXPECT_NE(w0.PairKey("other:", "w0", "ps0"), by_client);
}

TEST_F(NodeKeyTest, AReplacementGetsANewControlKeyWhichTheJobKeyThenPresentsAlone) {
  const std::string old_control = job_.PublicKeyFor("w1.ctl");
  ASSERT_TRUE(job_.SaveNodeKey(dir_ + "/w1.key", "w1", 1, nodes_).ok());
  const JobKey w1 = Node("w1");
  EXPECT_EQ(w1.incarnation(), 1);
  EXPECT_NE(w1.PublicKeyFor("w1.ctl"), old_control);
  // The data key stays the node's: its peers' pair keys do not change.
  EXPECT_EQ(w1.PublicKeyFor("w1"), job_.PublicKeyFor("w1"));
  EXPECT_EQ(job_.IncarnationOfNode("w1"), 0);
  job_.SetIncarnation("w1", 1);
  EXPECT_EQ(job_.IncarnationOfNode("w1"), 1);
  EXPECT_EQ(job_.PublicKeyFor("w1.ctl"), w1.PublicKeyFor("w1.ctl"));
  EXPECT_EQ(job_.SecretKeyFor("w1.ctl"), w1.SecretKeyFor("w1.ctl"));
  EXPECT_EQ(job_.PublicKeyFor("w0.ctl"), Node("w0").PublicKeyFor("w0.ctl"));
}

TEST_F(NodeKeyTest, AnotherNodesFileOrABrokenOneIsRefusedByName) {
  auto wrong = JobKey::Load(dir_ + "/w0.key", "w1");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("is the key of w0, not of w1"), std::string::npos)
      << wrong.status();
  EXPECT_EQ(JobKey::Load(dir_, "w7").status().code(), absl::StatusCode::kNotFound);
  // The job's key loads for any node.
  ASSERT_TRUE(job_.Save(path_).ok());
  EXPECT_TRUE(JobKey::Load(path_, "w1").ok());
  std::ofstream(dir_ + "/w0.key") << "syncline-node-key v1\nnode w0\ndata 12\n";
  auto broken = JobKey::Load(dir_ + "/w0.key");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(broken.status().message().find("line 3"), std::string::npos) << broken.status();
  chmod((dir_ + "/w1.key").c_str(), 0640);
  EXPECT_EQ(JobKey::Load(dir_, "w1").status().code(), absl::StatusCode::kPermissionDenied);
  // A file in the folder under another node's name.
  ASSERT_TRUE(job_.SaveNodeKey(dir_ + "/w1.key", "ps0", 0, nodes_).ok());
  EXPECT_NE(JobKey::Load(dir_, "w1").status().message().find("is the key of ps0, not of w1"),
            std::string::npos);
}

TEST_F(NodeKeyTest, AKeyFileWithASecondLineOfAKindOrWithoutTheCoordinatorIsRefused) {
  const std::string text = FileText(dir_ + "/w0.key");
  const auto with = [&](const std::string& extra, const std::string& drop) {
    std::string t = text;
    if (!drop.empty()) t.erase(t.find(drop), t.find('\n', t.find(drop)) - t.find(drop) + 1);
    std::ofstream(dir_ + "/x.key") << t << extra;
    chmod((dir_ + "/x.key").c_str(), 0600);
    return JobKey::Load(dir_ + "/x.key").status();
  };
  EXPECT_TRUE(with("", "").ok());
  EXPECT_NE(with("node w1\n", "").message().find("a second 'node' line"), std::string::npos);
  EXPECT_NE(with("peer ps0 " + std::string(64, 'a') + "\n", "").message().find("a second"),
            std::string::npos);
  EXPECT_NE(with("peer w1.ctl " + std::string(64, 'a') + "\n", "").message().find("not a node"),
            std::string::npos);
  EXPECT_NE(with("", "peer coordinator").message().find("the coordinator's public key"),
            std::string::npos);
}

TEST_F(NodeKeyTest, OnlyPlainNodeIdsGetKeyFiles) {
  for (const std::string bad : {"", "w1.ctl", "w1@g2", "w1#1", "w 1", "../w1"}) {
    EXPECT_EQ(job_.SaveNodeKey(dir_ + "/bad.key", bad, 0, nodes_).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(job_.SaveNodeKey(dir_ + "/bad.key", "w1", -1, nodes_).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job_.SaveNodeKey(dir_ + "/bad.key", "w1", 0, {"w0", "w1.ctl"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(job_.Holds(""));
  EXPECT_EQ(job_.SecretKeyFor("@x"), "");
}

TEST_F(NodeKeyTest, AMovedFromKeyHoldsNothing) {
  JobKey moved = JobKey::Generate();
  const std::string w1 = moved.PublicKeyFor("w1");
  JobKey to = std::move(moved);
  EXPECT_EQ(to.PublicKeyFor("w1"), w1);
  EXPECT_FALSE(moved.authority());  // NOLINT(bugprone-use-after-move): what is left
  EXPECT_FALSE(moved.Holds("w1"));
  EXPECT_EQ(moved.PublicKeyFor("w1"), "");
  EXPECT_FALSE(moved.PairKey("x", "w0", "ps0").has_value());
}

TEST_F(NodeKeyTest, AControlKeysNameCarriesItsIncarnation) {
  EXPECT_EQ(job_.UserIdFor("w1.ctl"), "w1.ctl");
  EXPECT_EQ(job_.UserIdFor("w1@g2.5"), "w1");
  job_.SetIncarnation("w1", 2);
  EXPECT_EQ(job_.UserIdFor("w1.ctl"), "w1.ctl#2");
  EXPECT_EQ(job_.UserIdFor("w1"), "w1");
  ASSERT_TRUE(job_.SaveNodeKey(dir_ + "/w1.key", "w1", 2, nodes_).ok());
  EXPECT_EQ(Node("w1").UserIdFor("w1.ctl"), "w1.ctl#2");
}

}  // namespace
}  // namespace syncline
