// Helpers for the multi-process tests: run a binary to completion (or in the background),
// capture its output, read a run's summary.json.
#ifndef SYNCLINE_TESTING_TEST_UTIL_H_
#define SYNCLINE_TESTING_TEST_UTIL_H_

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "launch/process_group.h"
#include "launch/summary_json.h"

namespace syncline::testing_util {

struct RunResult {
  int exit_code = -1;
  int signal = 0;
  std::string output;  // stdout and stderr, interleaved by line
};

// Runs argv to completion (killed after `timeout`).
inline RunResult RunProcess(std::vector<std::string> argv,
                            absl::Duration timeout = absl::Seconds(120)) {
  RunResult result;
  ProcessGroup group([&](std::string_view, OutputStream, std::string_view line) {
    result.output.append(line.data(), line.size());
    result.output += '\n';
  });
  auto pid = group.Start(ProcessSpec{"child", std::move(argv)});
  if (!pid.ok()) {
    result.output = std::string(pid.status().message());
    return result;
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<ExitEvent> exited;
  while (exited.empty() && absl::Now() < deadline) {
    (void)group.Poll(absl::Milliseconds(100), &exited);
  }
  if (exited.empty()) group.TerminateAll(absl::Seconds(2), &exited);
  if (!exited.empty()) {
    result.exit_code = exited[0].exit_code;
    result.signal = exited[0].signal;
  }
  return result;
}

// A fresh empty directory under the test's temp dir.
// {"--servers", N} for a job whose --sync has parameter servers; nothing for the serverless
// gossip and all-reduce, for which the launcher refuses --servers.
inline std::vector<std::string> ServersFlag(const std::string& sync, int servers) {
  if (sync.starts_with("gossip") || sync.starts_with("allreduce")) return {};
  return {"--servers", std::to_string(servers)};
}

inline std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") /
                            ("syncline_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The number at `key` in a summary.json text, or at the one nested key of that last name
// (SummaryNumber); nullopt when there is none or the text is not JSON.
inline std::optional<double> JsonNumber(const std::string& json, const std::string& key) {
  absl::StatusOr<SummaryFields> fields = ParseSummaryJson(json);
  if (!fields.ok()) return std::nullopt;
  return SummaryNumber(*fields, key);
}

// Pids of the direct children of `parent`, with their command lines.
inline std::vector<std::pair<int, std::string>> Children(int parent) {
  std::vector<std::pair<int, std::string>> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    int ppid = 0;
    if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &ppid) || ppid != parent) continue;
    std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    out.emplace_back(pid, cmdline);
  }
  closedir(proc);
  return out;
}

// Sends `signal` (SIGKILL) to the child of `parent` running `binary` with `--rank <rank>`;
// returns its pid, or 0 when there is no such child.
inline int KillChildOfRank(int parent, const std::string& binary, int rank, int signal = SIGKILL) {
  const std::string rank_flag = "--rank " + std::to_string(rank) + " ";
  for (const auto& [pid, cmd] : Children(parent)) {
    if (cmd.find(binary) != std::string::npos && cmd.find(rank_flag) != std::string::npos) {
      return kill(pid, signal) == 0 ? pid : 0;
    }
  }
  return 0;
}

// Polls `group` until one of its children has exited (into *exited) or `wait` has passed.
inline void AwaitAnExit(ProcessGroup& group, absl::Duration wait, std::vector<ExitEvent>* exited) {
  const absl::Time end = absl::Now() + wait;
  while (exited->empty() && absl::Now() < end) (void)group.Poll(absl::Milliseconds(50), exited);
}

inline bool Alive(int pid) {
  // A zombie still has /proc/PID, so look at its state.
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

}  // namespace syncline::testing_util

#endif  // SYNCLINE_TESTING_TEST_UTIL_H_
