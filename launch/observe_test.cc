// What the launcher writes for watching a job: the Prometheus target list, the merged trace and
// TensorBoard's records (the real Prometheus and TensorBoard read them in scripts/test-*.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/time/clock.h"
#include "core/crc32c.h"
#include "core/trace.h"
#include "launch/prometheus_targets.h"
#include "launch/tensorboard_writer.h"
#include "launch/trace_merge.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path TempDir(const std::string& name) {
  const fs::path p = fs::path(testing::TempDir()) / ("observe_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

TEST(PrometheusTargetsTest, ListsNodesWithTheirLabelsAndLetsALeaverLinger) {
  const fs::path dir = TempDir("targets");
  auto targets =
      PrometheusTargets::Create(PrometheusTargetsOptions{.dir = dir.string(),
                                                         .run = "runs/x",
                                                         .scrape_interval = absl::Milliseconds(500),
                                                         .linger = absl::Milliseconds(300)});
  ASSERT_TRUE(targets.ok()) << targets.status();
  const std::string config = ReadAll(dir / "prometheus.yml");
  EXPECT_THAT(config, HasSubstr("scrape_interval: 500ms"));
  EXPECT_THAT(config, HasSubstr("files: ['targets.json']"));
  EXPECT_EQ(ReadAll(dir / "targets.json"), "[\n]\n");
  (*targets)->Add("ps0", "server", 0, "127.0.0.1", 9100);
  (*targets)->Add("w1", "worker", 1, "10.0.0.2", 9101);
  const std::string listed = ReadAll(dir / "targets.json");
  EXPECT_THAT(listed, HasSubstr("{\"targets\": [\"127.0.0.1:9100\"], \"labels\": {\"job\": "
                                "\"syncline\", \"run\": \"runs/x\", \"role\": \"server\", "
                                "\"rank\": \"0\", \"node\": \"ps0\"}}"));
  EXPECT_THAT(listed, HasSubstr("\"10.0.0.2:9101\""));
  // A replacement is listed at its new port.
  (*targets)->Add("ps0", "server", 0, "127.0.0.1", 9200);
  EXPECT_THAT(ReadAll(dir / "targets.json"), HasSubstr("127.0.0.1:9200"));
  // A leaver stays for its linger (Prometheus scrapes it down once), then goes.
  (*targets)->Remove("w1");
  EXPECT_THAT(ReadAll(dir / "targets.json"), HasSubstr("\"w1\""));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (ReadAll(dir / "targets.json").find("\"w1\"") != std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_THAT(ReadAll(dir / "targets.json"), Not(HasSubstr("\"w1\"")));
  EXPECT_THAT(ReadAll(dir / "targets.json"), HasSubstr("\"ps0\""));
  (*targets)->Clear();
  EXPECT_EQ(ReadAll(dir / "targets.json"), "[\n]\n");
  EXPECT_FALSE(fs::exists(dir / "targets.json.tmp"));
}

TEST(TraceMergeTest, OneProcessPerNodeOnTheCoordinatorsClockAndNothingMalformed) {
  const fs::path dir = TempDir("merge");
  const absl::Time t0 = absl::FromUnixMicros(1000000);
  TraceRecorder w0("w0", "w0 on a");
  const int steps = w0.Track("steps");
  w0.Slice(steps, "step 3", "step", t0, t0 + absl::Microseconds(100), "\"step\":3");
  w0.Slice(steps, "read", "phase", t0, t0 + absl::Microseconds(40));
  ASSERT_TRUE(w0.Write((dir / TraceFileName("w0")).string(), /*offset=*/5, /*round trip=*/2).ok());
  TraceRecorder ps0("ps0", "ps0 on \"b\"");
  ps0.AsyncSlice("parked pull of w0", "parked pull", 7, t0, t0 + absl::Microseconds(10));
  ASSERT_TRUE(ps0.Write((dir / TraceFileName("ps0")).string(), -3, 2).ok());
  // A stranger's line in a node file is skipped.
  std::ofstream(dir / TraceFileName("w0"), std::ios::app) << "{\"pid\":9,\"evil\":1}\n";

  auto merged = MergeTraces(dir.string(), (dir / "trace.json").string());
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->nodes, 2);
  EXPECT_EQ(merged->malformed, 1u);
  EXPECT_EQ(merged->max_offset_us, 5);
  const std::string trace = ReadAll(dir / "trace.json");
  EXPECT_THAT(trace, HasSubstr("{\"displayTimeUnit\":\"ms\",\"traceEvents\":["));
  // Servers first: ps0 is process 1, w0 process 2.
  EXPECT_THAT(trace, HasSubstr("{\"pid\":1,\"ts\":0,\"ph\":\"M\",\"tid\":0,\"name\":"
                               "\"process_name\",\"args\":{\"name\":\"ps0 on \\\"b\\\"\"}}"));
  EXPECT_THAT(trace, HasSubstr("{\"pid\":1,\"ts\":999997,\"ph\":\"b\""));
  EXPECT_THAT(trace, HasSubstr("{\"pid\":2,\"ts\":1000005,\"ph\":\"X\",\"dur\":100,\"tid\":1,"
                               "\"name\":\"step 3\",\"cat\":\"step\",\"args\":{\"step\":3}}"));
  // Track names keep time 0.
  EXPECT_THAT(trace, HasSubstr("{\"pid\":2,\"ts\":0,\"ph\":\"M\",\"tid\":1,\"name\":"
                               "\"thread_name\",\"args\":{\"name\":\"steps\"}}"));
  EXPECT_THAT(trace, Not(HasSubstr("evil")));
  EXPECT_TRUE(absl::IsNotFound(
      MergeTraces(TempDir("empty").string(), (dir / "none.json").string()).status()));
}

TEST(TraceRecorderTest, DropsEventsPastItsBoundAndSaysSo) {
  TraceRecorder r("w0", "w0", /*max_events=*/3);
  const int t = r.Track("steps");
  for (int i = 0; i < 5; ++i) r.Slice(t, "s", "step", absl::UnixEpoch(), absl::UnixEpoch());
  r.AsyncSlice("p", "parked pull", 1, absl::UnixEpoch(), absl::UnixEpoch());  // both or neither
  EXPECT_EQ(r.events(), 3u);
  EXPECT_EQ(r.dropped(), 4u);
}

// A little-endian field of `bytes` bytes of a record.
uint64_t LittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}
uint64_t U64(const std::string& s, size_t at) { return LittleEndian(s, at, 8); }
uint32_t U32(const std::string& s, size_t at) {
  return static_cast<uint32_t>(LittleEndian(s, at, 4));
}

TEST(TensorBoardWriterTest, WritesFramedRecordsWithMaskedCrcs) {
  // The masked CRC of TFRecord: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
  const uint32_t crc = Crc32c("abc", 3);
  EXPECT_EQ(MaskedCrc32c("abc", 3), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  // wall_time 1.5, step 7, summary {value {tag "a", simple_value 0.5}}, as protobuf encodes it.
  const std::string event = EncodeScalarEvent(1.5, 7, "a", 0.5f);
  const std::string expected = std::string("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f", 9) +
                               std::string("\x10\x07", 2) +
                               std::string(
                                   "\x2a\x0a\x0a\x08\x0a\x01"
                                   "a"
                                   "\x15\x00\x00\x00\x3f",
                                   12);
  EXPECT_EQ(event, expected);

  const fs::path dir = TempDir("tensorboard");
  auto writer = TensorBoardWriter::Create((dir / "tb").string());
  ASSERT_TRUE(writer.ok()) << writer.status();
  (*writer)->Scalar("train/loss/w0", 10, 0.25, 100.0);
  EXPECT_THAT(fs::path((*writer)->path()).filename().string(), HasSubstr("events.out.tfevents."));
  const std::string file = ReadAll((*writer)->path());
  size_t at = 0;
  int records = 0;
  while (at < file.size()) {
    ASSERT_LE(at + 12, file.size());
    const uint64_t length = U64(file, at);
    EXPECT_EQ(U32(file, at + 8), MaskedCrc32c(file.data() + at, 8));
    ASSERT_LE(at + 12 + length + 4, file.size());
    EXPECT_EQ(U32(file, at + 12 + length), MaskedCrc32c(file.data() + at + 12, length));
    at += 12 + length + 4;
    ++records;
  }
  EXPECT_EQ(records, 2);  // the file version, then the scalar
  EXPECT_THAT(file, HasSubstr("brain.Event:2"));
  EXPECT_THAT(file, HasSubstr("train/loss/w0"));
}

}  // namespace
}  // namespace syncline
