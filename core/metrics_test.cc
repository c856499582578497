#include "core/metrics.h"

#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, CountersGaugesAndFunctionsAreWrittenWithHelpAndType) {
  MetricsRegistry r;
  r.AddCounter("syncline_worker_steps_total", "Training iterations finished.")->Add(3);
  Gauge* loss = r.AddGauge("syncline_worker_loss", "The last loss.", {{"role", "worker"}});
  loss->Set(0.25);
  r.AddGaugeFunction("syncline_answer", "Read at each scrape.", {}, [] { return 42.0; });
  const std::string page = r.Exposition();
  EXPECT_THAT(page, HasSubstr("# HELP syncline_worker_steps_total Training iterations finished.\n"
                              "# TYPE syncline_worker_steps_total counter\n"
                              "syncline_worker_steps_total 3\n"));
  EXPECT_THAT(page, HasSubstr("# TYPE syncline_worker_loss gauge\n"
                              "syncline_worker_loss{role=\"worker\"} 0.25\n"));
  EXPECT_THAT(page, HasSubstr("syncline_answer 42\n"));
}

TEST(MetricsTest, CountersNeverFall) {
  Counter c;
  c.Add(2);
  c.Add(-1);
  c.Add(std::nan(""));
  EXPECT_EQ(c.value(), 2);
}

TEST(MetricsTest, SeriesOfOneFamilyShareItsHeader) {
  MetricsRegistry r;
  r.AddCounter("syncline_phase_seconds_total", "Time by phase.", {{"phase", "batch"}})->Add(1);
  r.AddCounter("syncline_phase_seconds_total", "Time by phase.", {{"phase", "compute"}})->Add(2);
  const std::string page = r.Exposition();
  EXPECT_EQ(std::count(page.begin(), page.end(), '#'), 2) << page;
  EXPECT_THAT(page, HasSubstr("syncline_phase_seconds_total{phase=\"batch\"} 1\n"
                              "syncline_phase_seconds_total{phase=\"compute\"} 2\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndInfEqualsCount) {
  MetricsRegistry r;
  Histogram* h = r.AddHistogram("syncline_step_duration_seconds", "Step time.", {0.1, 1, 10},
                                {{"role", "worker"}});
  for (double v : {0.05, 0.1, 0.5, 2.0, 20.0}) h->Observe(v);
  const std::string page = r.Exposition();
  EXPECT_THAT(page,
              HasSubstr("# TYPE syncline_step_duration_seconds histogram\n"
                        "syncline_step_duration_seconds_bucket{role=\"worker\",le=\"0.1\"} 2\n"
                        "syncline_step_duration_seconds_bucket{role=\"worker\",le=\"1\"} 3\n"
                        "syncline_step_duration_seconds_bucket{role=\"worker\",le=\"10\"} 4\n"
                        "syncline_step_duration_seconds_bucket{role=\"worker\",le=\"+Inf\"} "
                        "5\n"
                        "syncline_step_duration_seconds_sum{role=\"worker\"} 22.65\n"
                        "syncline_step_duration_seconds_count{role=\"worker\"} 5\n"));
}

TEST(MetricsTest, HistogramStaysConsistentUnderConcurrentObservations) {
  Histogram h(DurationBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 20000; ++i) h.Observe(1e-4 * ((i * 7 + t) % 5000));
    });
  }
  for (int i = 0; i < 50; ++i) {
    const Histogram::Snapshot s = h.Take();
    for (size_t b = 1; b < s.cumulative.size(); ++b)
      ASSERT_LE(s.cumulative[b - 1], s.cumulative[b]);
    ASSERT_EQ(s.cumulative.back(), s.count);
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.Take().count, 80000u);
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry r;
  r.AddGauge("syncline_info", "A \\ backslash\nand a newline.", {{"host", "a\"b\\c\nd"}})->Set(1);
  const std::string page = r.Exposition();
  EXPECT_THAT(page, HasSubstr("# HELP syncline_info A \\\\ backslash\\nand a newline.\n"));
  EXPECT_THAT(page, HasSubstr("syncline_info{host=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST(MetricsTest, InvalidNamesAndTypeClashesAreNotExported) {
  MetricsRegistry r;
  r.AddCounter("9starts_with_a_digit", "bad")->Increment();
  r.AddCounter("syncline_ok_total", "ok", {{"__reserved", "x"}})->Increment();
  r.AddCounter("syncline_twice", "a counter")->Increment();
  r.AddGauge("syncline_twice", "now a gauge")->Set(5);  // works, not exported
  r.AddHistogram("syncline_h_seconds", "le is the buckets'", {1}, {{"le", "x"}});
  const std::string page = r.Exposition();
  EXPECT_THAT(page, Not(HasSubstr("9starts")));
  EXPECT_THAT(page, Not(HasSubstr("__reserved")));
  EXPECT_THAT(page, Not(HasSubstr("syncline_h_seconds")));
  EXPECT_THAT(page, HasSubstr("# TYPE syncline_twice counter\nsyncline_twice 1\n"));
}

TEST(MetricsTest, NumbersRoundTrip) {
  EXPECT_EQ(MetricNumber(0.1), "0.1");
  EXPECT_EQ(MetricNumber(1e21), "1e+21");
  EXPECT_EQ(MetricNumber(3), "3");
  EXPECT_EQ(MetricNumber(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(MetricNumber(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(MetricNumber(std::nan("")), "NaN");
}

TEST(MetricsTest, DurationBucketsSpanATenthOfAMillisecondToAHundredSeconds) {
  const std::vector<double> b = DurationBuckets();
  ASSERT_FALSE(b.empty());
  EXPECT_DOUBLE_EQ(b.front(), 1e-4);
  EXPECT_DOUBLE_EQ(b.back(), 100);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
}

TEST(MetricsTest, ProcessMetricsReadThisProcess) {
  MetricsRegistry r;
  AddProcessMetrics(r);
  volatile double sink = 0;
  for (int i = 0; i < 2000000; ++i) sink = sink + i;  // some CPU time
  const std::string page = r.Exposition();
  double cpu = -1, rss = -1;
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (absl::StartsWith(line, "process_cpu_seconds_total ")) {
      cpu = std::stod(std::string(line.substr(line.find(' ') + 1)));
    }
    if (absl::StartsWith(line, "process_resident_memory_bytes ")) {
      rss = std::stod(std::string(line.substr(line.find(' ') + 1)));
    }
  }
  EXPECT_GT(cpu, 0);
  EXPECT_GT(rss, 1 << 20);  // a test binary holds more than a MiB
}

}  // namespace
}  // namespace syncline
