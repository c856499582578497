#include "launch/prometheus_targets.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/json_string.h"
#include "core/log.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

// Writes `text` to `path` through a temporary file and a rename: a reader sees the old file or
// the new one, whole.
absl::Status WriteAtomically(const fs::path& path, const std::string& text) {
  const fs::path temp = path.string() + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", temp.string()));
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot rename ", temp.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

std::string PrometheusDuration(absl::Duration d) {
  const int64_t ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(d));
  return ms % 1000 == 0 ? absl::StrCat(ms / 1000, "s") : absl::StrCat(ms, "ms");
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrometheusTargets>> PrometheusTargets::Create(
    PrometheusTargetsOptions options) {
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", options.dir, ": ", ec.message()));
  }
  if (options.linger <= absl::ZeroDuration()) {
    options.linger = 2 * options.scrape_interval + absl::Seconds(1);
  }
  const std::string interval = PrometheusDuration(options.scrape_interval);
  const std::string config = absl::StrFormat(
      "# Written by syncline-launch for the run in %s. Run:\n"
      "#   prometheus --config.file %s --storage.tsdb.path %s\n"
      "# The targets are every node's /metrics page, kept in targets.json as nodes join and\n"
      "# leave (docs/OBSERVABILITY.md has the queries to start with).\n"
      "global:\n"
      "  scrape_interval: %s\n"
      "  evaluation_interval: %s\n"
      "scrape_configs:\n"
      "  - job_name: %s\n"
      "    file_sd_configs:\n"
      "      - files: ['targets.json']\n"
      "        refresh_interval: %s\n",
      options.run, (fs::path(options.dir) / "prometheus.yml").string(),
      (fs::path(options.dir) / "data").string(), interval, interval, JsonString(options.job),
      interval);
  if (auto s = WriteAtomically(fs::path(options.dir) / "prometheus.yml", config); !s.ok()) return s;
  std::unique_ptr<PrometheusTargets> targets(new PrometheusTargets(std::move(options)));
  {
    absl::MutexLock lock(&targets->mu_);
    targets->Write();
  }
  return targets;
}

PrometheusTargets::PrometheusTargets(PrometheusTargetsOptions options)
    : options_(std::move(options)), sweeper_([this] { Sweep(); }) {}

PrometheusTargets::~PrometheusTargets() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  sweeper_.join();
}

std::string PrometheusTargets::targets_path() const {
  return (fs::path(options_.dir) / "targets.json").string();
}

std::string PrometheusTargets::config_path() const {
  return (fs::path(options_.dir) / "prometheus.yml").string();
}

void PrometheusTargets::Add(const std::string& node, const std::string& role, int rank,
                            const std::string& host, int port) {
  absl::MutexLock lock(&mu_);
  // An IPv6 host goes in brackets.
  const std::string address = host.find(':') != std::string::npos
                                  ? absl::StrCat("[", host, "]:", port)
                                  : absl::StrCat(host, ":", port);
  targets_[node] = Target{role, rank, address};
  Write();
}

void PrometheusTargets::Remove(const std::string& node) {
  absl::MutexLock lock(&mu_);
  auto it = targets_.find(node);
  if (it == targets_.end() || it->second.leaves != absl::InfiniteFuture()) return;
  it->second.leaves = absl::Now() + options_.linger;
}

void PrometheusTargets::Clear() {
  absl::MutexLock lock(&mu_);
  targets_.clear();
  Write();
}

void PrometheusTargets::Sweep() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [node, t] : targets_) next = std::min(next, t.leaves);
    // Bounded, so that a Remove made meanwhile is seen within the second.
    mu_.AwaitWithDeadline(absl::Condition(&stop_), std::min(next, absl::Now() + absl::Seconds(1)));
    const absl::Time now = absl::Now();
    const size_t before = targets_.size();
    std::erase_if(targets_, [now](const auto& entry) { return entry.second.leaves <= now; });
    if (targets_.size() != before) Write();
  }
}

void PrometheusTargets::Write() {
  std::string json = "[\n";
  bool first = true;
  for (const auto& [node, t] : targets_) {
    absl::StrAppendFormat(&json,
                          "%s  {\"targets\": [%s], \"labels\": {\"job\": %s, \"run\": %s, "
                          "\"role\": %s, \"rank\": \"%d\", \"node\": %s}}",
                          first ? "" : ",\n", JsonString(t.address), JsonString(options_.job),
                          JsonString(options_.run), JsonString(t.role), t.rank, JsonString(node));
    first = false;
  }
  json += first ? "]\n" : "\n]\n";
  if (auto s = WriteAtomically(targets_path(), json); !s.ok()) {
    SYNCLINE_LOG(WARNING) << "Prometheus targets not updated: " << s;
  }
}

}  // namespace syncline
