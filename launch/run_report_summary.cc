// RunReport's closing outputs: OUT/summary.json, written in sections (the job, its progress,
// its results, the servers' traffic, where the steps went, recovery), and the summary printed
// at the end.
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/json_string.h"
#include "job/job_spec.h"
#include "job/options.h"
#include "job/privacy_options.h"
#include "job/privacy_plan.h"
#include "launch/run_report.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

// {"a": 1, "b": 2} of members whose values are JSON already.
std::string JsonObject(const std::vector<std::pair<std::string, std::string>>& members) {
  return absl::StrCat(
      "{",
      absl::StrJoin(members, ", ",
                    [](std::string* out, const std::pair<std::string, std::string>& m) {
                      absl::StrAppend(out, JsonString(m.first), ": ", m.second);
                    }),
      "}");
}

// [a, b] of values that are JSON already.
std::string JsonArray(const std::vector<std::string>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// `split`'s members: "batch": 0.1, "upload": 0, ... (each divided by `per`).
std::vector<std::pair<std::string, std::string>> StepSplitMembers(const RunReport::StepSplit& split,
                                                                  double per) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < RunReport::StepSplit::kParts.size(); ++i) {
    out.emplace_back(RunReport::StepSplit::kParts[i],
                     JsonNumber(per > 0 ? split.seconds[i] / per : 0.0));
  }
  return out;
}

// "1 server", "2 servers".
std::string Count(int64_t n, absl::string_view thing) {
  return absl::StrCat(n, " ", thing, n == 1 ? "" : "s");
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", b, units[u]);
}

}  // namespace

void RunReport::JsonMembers::Add(std::string_view key, std::string json) {
  lines_.push_back(absl::StrCat("  ", JsonString(key), ": ", json));
}

std::string RunReport::JsonMembers::Text() const {
  return absl::StrCat("{\n", absl::StrJoin(lines_, ",\n"), "\n}\n");
}

RunReport::WorkerTotals RunReport::SumWorkers() const {
  WorkerTotals t;
  for (const auto& [rank, w] : workers_) {
    // A worker that did not say it was done (the job was interrupted, or it was lost) trained
    // up to its last progress report, from where it started: the resumed clock, or the one it
    // joined at.
    const auto joined = joined_.find(rank);
    const int64_t first =
        joined != joined_.end() ? joined->second : std::max<int64_t>(0, resumed_from_);
    t.steps += w.done ? w.steps_trained : std::max<int64_t>(0, w.clock - first);
    t.max_steps = std::max(t.max_steps, w.done ? w.steps : w.clock);
    t.pushed += w.bytes_pushed;
    t.pulled += w.bytes_pulled;
    t.examples += w.examples;
    if (w.clock > 0) {
      t.loss_sum += w.loss;
      ++t.reporting;
    }
  }
  return t;
}

void RunReport::AddJobMembers(JsonMembers& j, const std::string& failure,
                              const std::string& status) const {
  j.Add("status", JsonString(!status.empty() ? status : failure.empty() ? "ok" : "failed"));
  if (!failure.empty()) j.Add("error", JsonString(failure));
  j.Add("sync", JsonString(SyncModeName(job_.sync)));
  j.Add("servers", absl::StrCat(job_.servers));
  j.Add("workers", absl::StrCat(job_.workers));
  if (!job_.worker_command.empty()) {
    // The model is the workers' command's own (syncline.torch): name the command instead.
    j.Add("model", JsonString("command"));
    j.Add("worker_command", JsonString(absl::StrJoin(job_.worker_command, " ")));
  } else {
    j.Add("model", JsonString(ModelName(job_.model.kind)));
    if (!job_.model.hidden.empty()) j.Add("hidden", JsonString(HiddenName(job_.model.hidden)));
  }
  j.Add("device_requested", JsonString(DeviceName(job_.device)));
  // Where the workers that finished computed, as they said: "cpu", "cuda:0", or the devices of
  // a mixed job, sorted ("cpu,cuda:0"); "cpu" when none said (workers of an older build).
  if (failure.empty()) {
    std::set<std::string> devices;
    for (const auto& [rank, w] : workers_) {
      if (!w.device.empty()) devices.insert(w.device);
    }
    j.Add("device", JsonString(devices.empty() ? "cpu" : absl::StrJoin(devices, ",")));
  }
  j.Add("optimizer", JsonString(OptimizerName(job_.training.optimizer)));
  j.Add("learning_rate", JsonNumber(job_.training.learning_rate));
  j.Add("batch_size", absl::StrCat(job_.training.batch_size));
  j.Add("seed", absl::StrCat(job_.seed));
  j.Add("train", JsonString(job_.data.train));
  j.Add("test", JsonString(job_.data.test));
  j.Add("epochs", absl::StrCat(job_.training.epochs));
}

void RunReport::AddProgressMembers(JsonMembers& j, const WorkerTotals& t) const {
  j.Add("steps", absl::StrCat(t.steps));
  j.Add("steps_per_worker", absl::StrCat(t.max_steps));
  j.Add("examples", absl::StrCat(t.examples));
  // Examples of the iterations finished, as the servers counted them (the lost workers' too).
  // Without servers the workers count them: a lost worker's up to its last progress report,
  // unless the survivors of an elastic all-reduce counted every member's sums.
  double trained = examples_trained_;
  if (job_.servers == 0 && examples_in_model_ >= 0) {
    trained = examples_in_model_;
  } else if (job_.servers == 0) {
    trained = 0;
    for (const auto& [rank, w] : workers_) {
      trained += static_cast<double>(w.done ? w.examples : w.reported_examples);
    }
  }
  j.Add("examples_trained", JsonNumber(trained));
  j.Add("workers_left", absl::StrCat(workers_left_));
  // [clock, workers] pairs: the job's start, then each departure and arrival.
  std::vector<std::string> sizes = {absl::StrCat("[0, ", job_.workers, "]")};
  for (const auto& [clock, world] : world_sizes_) {
    sizes.push_back(absl::StrCat("[", clock, ", ", world, "]"));
  }
  j.Add("world_sizes", JsonArray(sizes));
  // Iterations trained twice: those a lost worker finished after the clock its batches were
  // handed over from (its last heartbeat)...
  int64_t redone = 0;
  for (const auto& [worker, from] : handed_from_) {
    if (auto it = finished_at_.find(worker); it != finished_at_.end()) {
      redone += std::max<int64_t>(0, it->second - from);
    }
  }
  // ...and the iterations rollbacks undid (the fastest worker's clock less the checkpoint's).
  j.Add("steps_redone", absl::StrCat(redone + steps_undone_));
  const int workers_joined = static_cast<int>(joined_.size()) +
                             static_cast<int>(std::count_if(
                                 restarted_.begin(), restarted_.end(),
                                 [](const std::string& label) { return label.starts_with("w"); }));
  j.Add("restarts", absl::StrCat(restarted_.size()));
  j.Add("rollbacks", absl::StrCat(rollbacks_));
  // Workers that joined the running job: by themselves (--join), and replacements of failed
  // ones.
  j.Add("workers_joined", absl::StrCat(workers_joined));
  std::vector<std::string> recovery;
  for (double seconds : recovery_seconds_) recovery.push_back(JsonNumber(seconds));
  j.Add("recovery_seconds", JsonArray(recovery));
}

void RunReport::AddResultMembers(JsonMembers& j, absl::Duration wall, const WorkerTotals& t) const {
  j.Add("wall_seconds", JsonNumber(absl::ToDoubleSeconds(wall)));
  // The held-out evaluations' time (--eval-every): speed figures leave it out.
  j.Add("evaluation_seconds", JsonNumber(evaluation_seconds_));
  j.Add("train_loss", t.reporting ? JsonNumber(t.loss_sum / t.reporting) : "null");
  j.Add("test_examples", absl::StrCat(test_examples_));
  j.Add("test_loss", have_evaluation_ ? JsonNumber(test_loss_) : "null");
  // AUC is the binary models' (softmax and mlp give class probabilities, even for 2).
  if (job_.model.kind == ModelKind::kLogreg || job_.model.kind == ModelKind::kCtr) {
    j.Add("test_auc", have_evaluation_ ? JsonNumber(test_auc_) : "null");
  }
  j.Add("test_accuracy", have_evaluation_ ? JsonNumber(test_accuracy_) : "null");
}

// Every byte the workers moved, and what one worker and the busiest server moved: the figures
// compression is judged by; the servers' counts and the staleness they served.
void RunReport::AddTrafficMembers(JsonMembers& j, const WorkerTotals& t) const {
  j.Add("bytes_pushed", absl::StrCat(t.pushed));
  j.Add("bytes_pulled", absl::StrCat(t.pulled));
  j.Add("bytes_pushed_per_worker_step",
        JsonNumber(t.steps > 0 ? static_cast<double>(t.pushed) / t.steps : 0.0));
  j.Add("bytes_all", absl::StrCat(t.pushed + t.pulled));
  const double per_worker = workers_.empty() ? 0.0 : 1.0 / workers_.size();
  j.Add("bytes_per_worker", JsonObject({{"pushed", JsonNumber(t.pushed * per_worker)},
                                        {"pulled", JsonNumber(t.pulled * per_worker)},
                                        {"all", JsonNumber((t.pushed + t.pulled) * per_worker)}}));
  if (!server_bytes_.empty()) {
    const auto busiest = std::max_element(
        server_bytes_.begin(), server_bytes_.end(), [](const auto& a, const auto& b) {
          return a.second.first + a.second.second < b.second.first + b.second.second;
        });
    const auto [in, out] = busiest->second;
    j.Add("busiest_server", JsonObject({{"server", absl::StrCat(busiest->first)},
                                        {"bytes_in", absl::StrCat(in)},
                                        {"bytes_out", absl::StrCat(out)},
                                        {"bytes_all", absl::StrCat(in + out)}}));
  }
  j.Add("server_bytes_in", absl::StrCat(server_bytes_in_));
  j.Add("server_bytes_out", absl::StrCat(server_bytes_out_));
  j.Add("server_requests", absl::StrCat(server_requests_));
  j.Add("server_rejected", absl::StrCat(server_rejected_));
  uint64_t reads = 0, sum = 0;
  int64_t max_staleness = 0;
  for (size_t i = 0; i < staleness_.size(); ++i) {
    reads += staleness_[i];
    sum += staleness_[i] * i;
    if (staleness_[i] > 0) max_staleness = static_cast<int64_t>(i);
  }
  j.Add("max_staleness_served", absl::StrCat(max_staleness));
  j.Add("mean_staleness_served", JsonNumber(reads ? static_cast<double>(sum) / reads : 0.0));
  if (embedding_.tables == 0) return;
  const EmbeddingTotals& e = embedding_;
  const uint64_t touches = e.memory_hits + e.disk_hits;
  j.Add("embedding",
        JsonObject({{"tables", absl::StrCat(e.tables)},
                    {"rows_in_memory", absl::StrCat(e.rows_in_memory)},
                    {"rows_on_disk", absl::StrCat(e.rows_on_disk)},
                    {"admitted", absl::StrCat(e.admitted)},
                    {"rejected", absl::StrCat(e.rejected)},
                    {"expired", absl::StrCat(e.expired)},
                    {"evictions", absl::StrCat(e.evictions)},
                    {"memory_hit_rate",
                     JsonNumber(touches ? static_cast<double>(e.memory_hits) / touches : 1.0)},
                    {"memory_bytes", absl::StrCat(e.memory_bytes)},
                    {"memory_budget_bytes", absl::StrCat(e.budget_bytes)}}));
}

// Where the workers' iterations went: seconds per iteration by part, over the iterations of
// every worker (a finished worker's last run, a lost one's reports), and each worker's totals
// with the device it computed on; and each process's peak memory.
void RunReport::AddStepMembers(JsonMembers& j) const {
  StepSplit all_split;
  for (const auto& [rank, w] : workers_) all_split += w.split;
  j.Add("step_seconds",
        JsonObject(StepSplitMembers(all_split, static_cast<double>(all_split.steps))));
  std::vector<std::pair<std::string, std::string>> per_worker;
  for (const auto& [rank, w] : workers_) {
    std::vector<std::pair<std::string, std::string>> members;
    if (!w.device.empty()) members.emplace_back("device", JsonString(w.device));
    members.emplace_back("steps", absl::StrCat(w.split.steps));
    for (auto& part : StepSplitMembers(w.split, 1)) members.push_back(std::move(part));
    per_worker.emplace_back(absl::StrCat("w", rank), JsonObject(members));
  }
  j.Add("worker_step_seconds", JsonObject(per_worker));
  std::vector<std::pair<std::string, std::string>> rss;
  for (const auto& [label, kib] : peak_rss_kib_) rss.emplace_back(label, JsonNumber(kib / 1024.0));
  j.Add("peak_rss_mib", JsonObject(rss));
}

// Checkpoints, federated rounds and the nodes that went down.
void RunReport::AddRecoveryMembers(JsonMembers& j) const {
  j.Add("resumed_from_clock", resumed_from_ >= 0 ? absl::StrCat(resumed_from_) : "null");
  if (checkpoints_ != nullptr) {
    const int64_t last = checkpoints_->last_clock();
    j.Add("checkpoints_written", absl::StrCat(checkpoints_->checkpoints_written()));
    j.Add("checkpoints_failed", absl::StrCat(checkpoints_->checkpoints_failed()));
    j.Add("last_checkpoint_clock", last >= 0 ? absl::StrCat(last) : "null");
    j.Add("checkpoint_pause_seconds", JsonNumber(checkpoint_pause_s_));
  }
  if (rounds_.rounds > 0) {
    std::vector<std::string> which;
    for (int64_t r : rounds_.which) which.push_back(absl::StrCat(r));
    j.Add("rounds", JsonObject({{"closed", absl::StrCat(rounds_.rounds)},
                                {"short", absl::StrCat(rounds_.short_rounds)},
                                {"clients_missing", absl::StrCat(rounds_.clients_missing)},
                                {"updates_late", absl::StrCat(rounds_.updates_late)},
                                {"short_rounds", JsonArray(which)}}));
  }
  std::vector<std::string> down;
  for (const std::string& reason : down_) down.push_back(JsonString(reason));
  j.Add("nodes_down", JsonArray(down));
}

// --dp: what the job spent, by the accountant of its plan (job/privacy_plan.h).
void RunReport::AddPrivacyMembers(JsonMembers& j, const WorkerTotals& t) const {
  if (!privacy_) return;
  const JobSpec::Privacy& p = job_.privacy;
  absl::StatusOr<PrivacyPlan> plan = PlanPrivacy(job_);
  if (!plan.ok()) return;
  // A client's clock is its rounds; the servers' count of closed rounds, where there is one.
  const int64_t done = p.level == DpLevel::kClient && rounds_.rounds > 0
                           ? static_cast<int64_t>(rounds_.rounds)
                           : t.max_steps;
  j.Add("privacy",
        JsonObject(
            {{"level", JsonString(DpLevelName(p.level))},
             {"epsilon", JsonNumber(privacy_->Spent(done).epsilon)},
             {"epsilon_planned", JsonNumber(privacy_->Spent(plan->steps).epsilon)},
             {"budget", p.epsilon > 0 ? JsonNumber(p.epsilon) : "null"},
             {"delta", JsonNumber(p.delta)},
             {"noise_multiplier", JsonNumber(p.noise_multiplier)},
             {"clip", JsonNumber(p.clip)},
             {"sampling_rate", JsonNumber(plan->sampling_rate)},
             {"steps", absl::StrCat(done)},
             {"steps_planned", absl::StrCat(plan->steps)},
             {"accountant", JsonString(RdpConversionDescription(p.accountant, plan->mechanism))},
             {"mechanism", JsonString(DpMechanismDescription(job_))},
             {"noise", JsonString(p.noise_seed != 0 ? "seeded by --dp-noise-seed: known to whoever "
                                                      "knows the seed"
                                                    : "fresh randomness")}}));
}

absl::Status RunReport::WriteSummary(absl::Duration wall, const std::string& failure,
                                     const std::string& status) {
  absl::MutexLock lock(&mu_);
  const WorkerTotals totals = SumWorkers();
  JsonMembers j;
  AddJobMembers(j, failure, status);
  AddProgressMembers(j, totals);
  AddResultMembers(j, wall, totals);
  AddTrafficMembers(j, totals);
  AddStepMembers(j);
  AddRecoveryMembers(j);
  AddPrivacyMembers(j, totals);
  const std::string path = (fs::path(out_) / "summary.json").string();
  std::ofstream out(path, std::ios::trunc);
  out << j.Text();
  if (!out) return absl::PermissionDeniedError(absl::StrFormat("cannot write %s", path));
  return absl::OkStatus();
}

std::string RunReport::SummaryText(absl::Duration wall) {
  absl::MutexLock lock(&mu_);
  const WorkerTotals t = SumWorkers();
  const int64_t steps = t.steps;
  const uint64_t pushed = t.pushed, pulled = t.pulled;
  std::string s = absl::StrFormat(
      "Syncline run finished: %s, %s, %s, %s\n"
      "  %d steps in %.2f s (%.0f steps/s)\n"
      "  pushed %s, pulled %s\n",
      SyncModeName(job_.sync), Count(job_.servers, "server"), Count(job_.workers, "worker"),
      job_.worker_command.empty()
          ? absl::StrCat("model ", ModelName(job_.model.kind))
          : absl::StrCat("workers running ", absl::StrJoin(job_.worker_command, " ")),
      steps, absl::ToDoubleSeconds(wall),
      steps / std::max(1e-9, absl::ToDoubleSeconds(wall) - evaluation_seconds_), HumanBytes(pushed),
      HumanBytes(pulled));
  if (evaluation_seconds_ > 0) {
    s += absl::StrFormat("  held-out evaluations: %.2f s, left out of the steps/s\n",
                         evaluation_seconds_);
  }
  if (have_evaluation_) {
    s += absl::StrFormat("  test: %d examples, loss %.4f", test_examples_, test_loss_);
    if (test_auc_ >= 0) s += absl::StrFormat(", AUC %.4f", test_auc_);
    if (test_accuracy_ >= 0) s += absl::StrFormat(", accuracy %.4f", test_accuracy_);
    s += "\n";
  }
  if (!restarted_.empty()) {
    std::vector<std::string> took;
    for (double t : recovery_seconds_) took.push_back(absl::StrFormat("%.2f s", t));
    s += absl::StrFormat(
        "  recovered in place: %d restart%s (%s), %d rollback%s (%s), %d iterations trained "
        "again\n",
        restarted_.size(), restarted_.size() == 1 ? "" : "s", absl::StrJoin(restarted_, ", "),
        rollbacks_, rollbacks_ == 1 ? "" : "s", absl::StrJoin(took, ", "), steps_undone_);
  }
  s += absl::StrFormat("  results: %s/summary.json, %s/metrics.csv\n", out_, out_);
  return s;
}

}  // namespace syncline
