#include "core/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"

namespace syncline {

struct MetricsRegistry::Series {
  std::string labels;  // rendered: `a="x",b="y"` (no braces), "" without labels
  std::variant<std::unique_ptr<Counter>, std::unique_ptr<Gauge>, std::unique_ptr<Histogram>,
               std::function<double()>>
      metric;
};

struct MetricsRegistry::Family {
  std::string name;
  std::string help;
  Type type;
  std::vector<std::unique_ptr<Series>> series;
};

namespace {

bool NameChar(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (alpha || (colon && c == ':')) return true;
  return !first && c >= '0' && c <= '9';
}

// Label values and HELP text as the format escapes them: backslash and newline, and in label
// values the double quote.
std::string Escape(absl::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderLabels(const MetricLabels& labels) {
  std::string out;
  for (const auto& [name, value] : labels) {
    absl::StrAppend(&out, out.empty() ? "" : ",", name, "=\"", Escape(value, true), "\"");
  }
  return out;
}

const char* TypeName(int type) {
  switch (type) {
    case 0:
      return "counter";
    case 1:
      return "gauge";
    default:
      return "histogram";
  }
}

// `name{labels}` or `name{labels,extra}`, or bare `name`.
void AppendSeriesName(std::string* out, absl::string_view name, absl::string_view labels,
                      absl::string_view extra = {}) {
  absl::StrAppend(out, name);
  if (labels.empty() && extra.empty()) return;
  absl::StrAppend(out, "{", labels, !labels.empty() && !extra.empty() ? "," : "", extra, "}");
}

}  // namespace

bool ValidMetricName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, /*colon=*/true)) return false;
  }
  return true;
}

bool ValidLabelName(absl::string_view name) {
  if (name.empty() || absl::StartsWith(name, "__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, /*colon=*/false)) return false;
  }
  return true;
}

std::string MetricNumber(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return std::string(buffer, ec == std::errc() ? end : buffer);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_([&] {
        // Increasing and finite: a bound out of order would make the cumulative counts fall.
        std::sort(bounds.begin(), bounds.end());
        bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
        std::erase_if(bounds, [](double b) { return !std::isfinite(b); });
        return bounds;
      }()),
      buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::ObserveMany(double v, uint64_t n) {
  if (std::isnan(v) || n == 0) return;
  // Prometheus's buckets are `le`: a value equal to a bound falls in that bound's bucket.
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[bucket].fetch_add(n, std::memory_order_relaxed);
  sum_.fetch_add(v * static_cast<double>(n), std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

std::vector<double> DurationBuckets() {
  // 100 us, 250 us, 500 us, 1 ms, ... 100 s: 1-2.5-5 steps, 19 buckets.
  std::vector<double> bounds;
  for (double decade = 1e-4; decade < 1e3; decade *= 10) {
    for (double m : {1.0, 2.5, 5.0}) {
      if (decade * m <= 100.0 + 1e-9) bounds.push_back(decade * m);
    }
  }
  return bounds;
}

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

MetricsRegistry::Family* MetricsRegistry::FamilyFor(absl::string_view name, absl::string_view help,
                                                    Type type, const MetricLabels& labels) {
  if (!ValidMetricName(name)) {
    SYNCLINE_LOG(ERROR) << "metric name '" << name << "' is not valid in Prometheus: not exported";
    return nullptr;
  }
  for (const auto& [label, value] : labels) {
    if (!ValidLabelName(label) || (type == Type::kHistogram && label == "le")) {
      SYNCLINE_LOG(ERROR) << "metric " << name << ": label name '" << label
                          << "' is not valid: not exported";
      return nullptr;
    }
  }
  if (series_ >= kMaxSeries) {
    if (!full_logged_) {
      SYNCLINE_LOG(ERROR) << "more than " << kMaxSeries << " metric series (at " << name
                          << "): the rest are not exported; are its labels bounded?";
      full_logged_ = true;
    }
    return nullptr;
  }
  for (const auto& f : families_) {
    if (f->name != name) continue;
    if (f->type == type) return f.get();
    SYNCLINE_LOG(ERROR) << "metric " << name << " is a " << TypeName(static_cast<int>(f->type))
                        << ", not a " << TypeName(static_cast<int>(type)) << ": not exported";
    return nullptr;
  }
  families_.push_back(
      std::make_unique<Family>(Family{std::string(name), std::string(help), type, {}}));
  return families_.back().get();
}

MetricsRegistry::Series& MetricsRegistry::AddSeries(Family* family, MetricLabels labels) {
  auto series = std::make_unique<Series>();
  series->labels = RenderLabels(labels);
  Series& s = *series;
  if (family == nullptr) {
    detached_.push_back(std::move(series));
  } else {
    family->series.push_back(std::move(series));
    ++series_;
  }
  return s;
}

MetricsRegistry::Series& MetricsRegistry::NewSeries(absl::string_view name, absl::string_view help,
                                                    Type type, MetricLabels labels) {
  Family* family = FamilyFor(name, help, type, labels);
  return AddSeries(family, std::move(labels));
}

template <typename M>
M* MetricsRegistry::Keep(absl::string_view name, absl::string_view help, Type type,
                         MetricLabels labels, std::unique_ptr<M> metric) {
  M* kept = metric.get();
  absl::MutexLock lock(&mu_);
  NewSeries(name, help, type, std::move(labels)).metric = std::move(metric);
  return kept;
}

Counter* MetricsRegistry::AddCounter(absl::string_view name, absl::string_view help,
                                     MetricLabels labels) {
  return Keep(name, help, Type::kCounter, std::move(labels), std::make_unique<Counter>());
}

Gauge* MetricsRegistry::AddGauge(absl::string_view name, absl::string_view help,
                                 MetricLabels labels) {
  return Keep(name, help, Type::kGauge, std::move(labels), std::make_unique<Gauge>());
}

Histogram* MetricsRegistry::AddHistogram(absl::string_view name, absl::string_view help,
                                         std::vector<double> bounds, MetricLabels labels) {
  return Keep(name, help, Type::kHistogram, std::move(labels),
              std::make_unique<Histogram>(std::move(bounds)));
}

void MetricsRegistry::AddCounterFunction(absl::string_view name, absl::string_view help,
                                         MetricLabels labels, std::function<double()> read) {
  absl::MutexLock lock(&mu_);
  NewSeries(name, help, Type::kCounter, std::move(labels)).metric = std::move(read);
}

void MetricsRegistry::AddGaugeFunction(absl::string_view name, absl::string_view help,
                                       MetricLabels labels, std::function<double()> read) {
  absl::MutexLock lock(&mu_);
  NewSeries(name, help, Type::kGauge, std::move(labels)).metric = std::move(read);
}

std::string MetricsRegistry::Exposition() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& f : families_) {
    absl::StrAppend(&out, "# HELP ", f->name, " ", Escape(f->help, false), "\n# TYPE ", f->name,
                    " ", TypeName(static_cast<int>(f->type)), "\n");
    for (const auto& s : f->series) {
      if (const auto* h = std::get_if<std::unique_ptr<Histogram>>(&s->metric)) {
        const Histogram::Snapshot snap = (*h)->Take();
        const std::string bucket = absl::StrCat(f->name, "_bucket");
        for (size_t i = 0; i < snap.cumulative.size(); ++i) {
          const std::string le =
              i < (*h)->bounds().size() ? MetricNumber((*h)->bounds()[i]) : "+Inf";
          AppendSeriesName(&out, bucket, s->labels, absl::StrCat("le=\"", le, "\""));
          absl::StrAppend(&out, " ", snap.cumulative[i], "\n");
        }
        AppendSeriesName(&out, absl::StrCat(f->name, "_sum"), s->labels);
        absl::StrAppend(&out, " ", MetricNumber(snap.sum), "\n");
        AppendSeriesName(&out, absl::StrCat(f->name, "_count"), s->labels);
        absl::StrAppend(&out, " ", snap.count, "\n");
        continue;
      }
      double value = 0;
      if (const auto* c = std::get_if<std::unique_ptr<Counter>>(&s->metric)) {
        value = (*c)->value();
      } else if (const auto* g = std::get_if<std::unique_ptr<Gauge>>(&s->metric)) {
        value = (*g)->value();
      } else if (const auto* read = std::get_if<std::function<double()>>(&s->metric)) {
        value = (*read)();
      }
      AppendSeriesName(&out, f->name, s->labels);
      absl::StrAppend(&out, " ", MetricNumber(value), "\n");
    }
  }
  return out;
}

void AddProcessMetrics(MetricsRegistry& registry) {
  registry.AddCounterFunction("process_cpu_seconds_total",
                              "User and system CPU time this process has spent, in seconds.", {},
                              [] {
                                rusage u{};
                                if (getrusage(RUSAGE_SELF, &u) != 0) return 0.0;
                                auto seconds = [](const timeval& t) {
                                  return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6;
                                };
                                return seconds(u.ru_utime) + seconds(u.ru_stime);
                              });
  registry.AddGaugeFunction(
      "process_resident_memory_bytes", "This process's resident memory, in bytes.", {}, [] {
        // statm's second field: resident pages.
        std::ifstream statm("/proc/self/statm");
        uint64_t size = 0, resident = 0;
        if (!(statm >> size >> resident)) return 0.0;
        return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
      });
}

}  // namespace syncline
