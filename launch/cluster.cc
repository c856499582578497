#include "launch/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/node_table.h"
#include "launch/supervisor.h"

namespace syncline {
namespace {

std::vector<std::string> SplitWords(absl::string_view text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

// The variables every node gets on top of the launcher's environment.
std::vector<std::pair<std::string, std::string>> NodeEnvironment(const ClusterOptions& o) {
  std::vector<std::pair<std::string, std::string>> env;
  if (!o.interface.empty()) env.emplace_back("SYNCLINE_INTERFACE", o.interface);
  if (!o.ports.any()) {
    env.emplace_back("SYNCLINE_PORT_RANGE", absl::StrCat(o.ports.first, "-", o.ports.last));
  }
  if (!o.node_key_dir.empty()) {
    env.emplace_back("SYNCLINE_KEY_FILE", o.node_key_dir);
  } else if (!o.key_file.empty()) {
    env.emplace_back("SYNCLINE_KEY_FILE", o.key_file);
  }
  if (o.key_file.empty() && o.insecure) env.emplace_back("SYNCLINE_INSECURE", "1");
  // Any free port (in the port range): the coordinator lists each for Prometheus.
  if (o.metrics) env.emplace_back("SYNCLINE_METRICS_PORT", "0");
  // The ctr model's matrix products run on one thread (models/gemm.h); without this, OpenBLAS
  // starts a pool of a thread per core in every node process at load, only to leave it idle.
  // A value of the launcher's own environment is passed on.
  const char* blas_threads = std::getenv("OPENBLAS_NUM_THREADS");
  env.emplace_back("OPENBLAS_NUM_THREADS", blas_threads != nullptr ? blas_threads : "1");
  return env;
}

// syncline-node runs the job's worker command, after "--", on the workers' ranks.
void AppendWorkerCommand(const JobSpec& spec, std::vector<std::string>* argv) {
  if (spec.worker_command.empty()) return;
  argv->push_back("--");
  argv->insert(argv->end(), spec.worker_command.begin(), spec.worker_command.end());
}

absl::Status CheckHostName(absl::string_view name) {
  if (name.empty() || name.front() == '-' ||
      name.find_first_of(" \t'\"\\$`;&|<>()") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a host name"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LauncherKind> ParseLauncher(absl::string_view text) {
  if (text == "local") return LauncherKind::kLocal;
  if (text == "ssh") return LauncherKind::kSsh;
  if (text == "mpirun") return LauncherKind::kMpirun;
  if (text == "slurm") return LauncherKind::kSlurm;
  return absl::InvalidArgumentError(
      absl::StrCat("--launcher=", text, ": expected local, ssh, mpirun or slurm"));
}

const char* LauncherName(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::kLocal:
      return "local";
    case LauncherKind::kSsh:
      return "ssh";
    case LauncherKind::kMpirun:
      return "mpirun";
    case LauncherKind::kSlurm:
      return "slurm";
  }
  return "?";
}

absl::StatusOr<std::vector<Host>> ParseHosts(absl::string_view text) {
  std::vector<Host> hosts;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    Host h;
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    h.name = std::string(parts[0]);
    if (auto s = CheckHostName(h.name); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--hosts: ", s.message()));
    }
    if (parts.size() > 2 ||
        (parts.size() == 2 && (!absl::SimpleAtoi(parts[1], &h.slots) || h.slots < 1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hosts: '", item, "' is not HOST or HOST:SLOTS (SLOTS >= 1)"));
    }
    hosts.push_back(std::move(h));
  }
  if (hosts.empty()) return absl::InvalidArgumentError("--hosts: no host given");
  return hosts;
}

absl::StatusOr<std::vector<Host>> ReadHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the hostfile ", path));
  std::vector<Host> hosts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = line;
    if (size_t hash = text.find('#'); hash != absl::string_view::npos) text = text.substr(0, hash);
    std::vector<std::string> words = SplitWords(text);
    if (words.empty()) continue;
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", why));
    };
    Host h;
    h.name = words[0];
    if (auto s = CheckHostName(h.name); !s.ok()) return bad(s.message());
    for (size_t i = 1; i < words.size(); ++i) {
      absl::string_view w = words[i];
      if (absl::ConsumePrefix(&w, "slots=")) {
        if (!absl::SimpleAtoi(w, &h.slots) || h.slots < 1) return bad("slots must be >= 1");
      } else if (!absl::StartsWith(w, "max_slots=") && !absl::StartsWith(w, "max-slots=")) {
        return bad(absl::StrCat("unknown field '", words[i], "' (expected slots=N)"));
      }
    }
    hosts.push_back(std::move(h));
  }
  if (hosts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no hosts"));
  return hosts;
}

absl::StatusOr<std::vector<int>> PlaceNodes(int servers, int workers,
                                            const std::vector<Host>& hosts, int servers_per_host) {
  const int n = servers + workers;
  int slots = 0;
  for (const Host& h : hosts) slots += h.slots;
  if (hosts.empty() || slots < n) {
    return absl::InvalidArgumentError(absl::StrCat("the hosts have ", slots, " slots for ", n,
                                                   " nodes (", servers, " servers + ", workers,
                                                   " workers): add hosts or slots (HOST:SLOTS)"));
  }
  std::vector<int> used(hosts.size(), 0);
  std::vector<int> place;
  place.reserve(n);
  if (servers_per_host > 0) {
    for (int s = 0; s < servers; ++s) {
      const size_t h = s / servers_per_host;
      if (h >= hosts.size() || used[h] >= hosts[h].slots) {
        return absl::InvalidArgumentError(
            absl::StrCat("--servers-per-host=", servers_per_host, ": ", servers, " servers need ",
                         (servers + servers_per_host - 1) / servers_per_host,
                         " hosts with that many slots; there are ", hosts.size(), " hosts"));
      }
      ++used[h];
      place.push_back(static_cast<int>(h));
    }
  }
  size_t next = 0;
  while (static_cast<int>(place.size()) < n) {
    // Some host has room (the slots were counted above).
    while (used[next] >= hosts[next].slots) next = (next + 1) % hosts.size();
    ++used[next];
    place.push_back(static_cast<int>(next));
    next = (next + 1) % hosts.size();
  }
  return place;
}

absl::StatusOr<std::string> CoordinatorBindIp(const ClusterOptions& options) {
  if (!options.coordinator_interface.empty())
    return InterfaceAddress(options.coordinator_interface);
  if (!options.interface.empty()) return InterfaceAddress(options.interface);
  switch (options.kind) {
    case LauncherKind::kLocal:
      return std::string("127.0.0.1");
    case LauncherKind::kSsh:
    case LauncherKind::kMpirun: {
      if (options.hosts.empty()) return absl::InvalidArgumentError("no hosts given");
      auto ip = LocalAddressToward(options.hosts.front().name);
      if (!ip.ok()) {
        return absl::UnavailableError(
            absl::StrCat("cannot choose the coordinator's address: ", ip.status().message(),
                         "; give --interface (the interface the hosts reach this machine on)"));
      }
      return ip;
    }
    case LauncherKind::kSlurm: {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      auto ip = LocalAddressToward(host);
      if (!ip.ok()) return ip.status();
      const char* nodes = std::getenv("SLURM_JOB_NUM_NODES");
      if (IsLoopbackHost(*ip) && nodes != nullptr && std::string(nodes) != "1") {
        return absl::UnavailableError(absl::StrCat(
            "this host's name ", host, " resolves to loopback (", *ip, "), which the other ",
            "nodes of the allocation cannot reach: give --interface"));
      }
      return ip;
    }
  }
  return absl::InternalError("unknown launcher");
}

bool ListensOnlyOnLoopback(const ClusterOptions& options, const std::string& coordinator_ip) {
  if (!IsLoopbackHost(coordinator_ip)) return false;
  // A node listens on --interface's address; one on another host listens where its route to
  // the coordinator leaves it, which a loopback coordinator cannot be reached by anyway.
  if (!options.interface.empty()) {
    auto ip = InterfaceAddress(options.interface);
    if (!ip.ok() || !IsLoopbackHost(*ip)) return false;
  }
  return options.kind == LauncherKind::kLocal ||
         std::all_of(options.hosts.begin(), options.hosts.end(),
                     [](const Host& h) { return IsLoopbackHost(h.name); });
}

std::string ShellQuote(absl::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

absl::StatusOr<std::vector<ProcessSpec>> NodeProcesses(const JobSpec& spec,
                                                       const ClusterOptions& options,
                                                       const std::string& coordinator,
                                                       bool external_workers) {
  const int workers = external_workers ? 0 : spec.workers;
  auto env = NodeEnvironment(options);
  // A worker command finds its Python package where the launcher's does (a shared folder).
  if (const char* path = std::getenv("PYTHONPATH");
      !spec.worker_command.empty() && path != nullptr && *path != '\0') {
    env.emplace_back("PYTHONPATH", path);
  }
  std::vector<ProcessSpec> out;
  switch (options.kind) {
    case LauncherKind::kLocal:
      for (wire::Role role : {wire::Role::SERVER, wire::Role::WORKER}) {
        const int n = role == wire::Role::SERVER ? spec.servers : workers;
        for (int r = 0; r < n; ++r) {
          ProcessSpec p = NodeProcess(role, r, coordinator, spec.worker_command);
          p.env.insert(p.env.begin(), env.begin(), env.end());
          out.push_back(std::move(p));
        }
      }
      return out;
    case LauncherKind::kSsh: {
      auto place = PlaceNodes(spec.servers, workers, options.hosts, options.servers_per_host);
      if (!place.ok()) return place.status();
      const std::vector<std::string> rsh = SplitWords(options.rsh);
      if (rsh.empty()) return absl::InvalidArgumentError("--rsh is empty");
      for (int g = 0; g < static_cast<int>(place->size()); ++g) {
        const wire::Role role = g < spec.servers ? wire::Role::SERVER : wire::Role::WORKER;
        const int rank = g < spec.servers ? g : g - spec.servers;
        const ProcessSpec local = NodeProcess(role, rank, coordinator, spec.worker_command);
        // The remote shell runs the node in the same folder, with the transport's settings,
        // and becomes it (exec), so that the node's exit code is ssh's.
        std::string command = absl::StrCat("cd ", ShellQuote(options.working_dir), " && exec env");
        for (const auto& [k, v] : env) absl::StrAppend(&command, " ", k, "=", ShellQuote(v));
        for (const auto& [k, v] : local.env) absl::StrAppend(&command, " ", k, "=", ShellQuote(v));
        for (const std::string& a : local.argv) absl::StrAppend(&command, " ", ShellQuote(a));
        ProcessSpec p;
        p.label = local.label;
        p.argv = rsh;
        p.argv.push_back(options.hosts[(*place)[g]].name);
        p.argv.push_back(std::move(command));
        out.push_back(std::move(p));
      }
      return out;
    }
    case LauncherKind::kMpirun: {
      if (external_workers) {
        return absl::InvalidArgumentError("--external-workers needs --launcher local or ssh");
      }
      // Checked as ssh would place them; mpirun --map-by node places them the same way.
      auto place = PlaceNodes(spec.servers, workers, options.hosts, options.servers_per_host);
      if (!place.ok()) return place.status();
      if (options.servers_per_host > 0) {
        return absl::InvalidArgumentError(
            "--servers-per-host needs --launcher ssh (mpirun places ranks by node)");
      }
      const std::string hostfile = absl::StrCat(options.out, "/hostfile");
      {
        std::ofstream f(hostfile, std::ios::trunc);
        for (const Host& h : options.hosts) f << h.name << " slots=" << h.slots << "\n";
        if (!f) return absl::InternalError(absl::StrCat("cannot write ", hostfile));
      }
      ProcessSpec p;
      p.label = "mpirun";
      p.argv = {"mpirun",
                "--hostfile",
                hostfile,
                "-np",
                absl::StrCat(spec.servers + workers),
                "--map-by",
                "node",
                "--wdir",
                options.working_dir};
      if (options.rsh_given) {
        p.argv.insert(p.argv.end(), {"--mca", "plm_rsh_agent", options.rsh, "--mca",
                                     "plm_rsh_no_tree_spawn", "1"});
      }
      for (const auto& [k, v] : env) p.argv.insert(p.argv.end(), {"-x", absl::StrCat(k, "=", v)});
      for (std::string& w : SplitWords(options.launcher_args)) p.argv.push_back(std::move(w));
      p.argv.insert(p.argv.end(), {FindBinary("syncline-node"), "--servers",
                                   absl::StrCat(spec.servers), "--coordinator", coordinator});
      AppendWorkerCommand(spec, &p.argv);
      out.push_back(std::move(p));
      return out;
    }
    case LauncherKind::kSlurm: {
      if (external_workers) {
        return absl::InvalidArgumentError("--external-workers needs --launcher local or ssh");
      }
      if (std::getenv("SLURM_JOB_ID") == nullptr) {
        return absl::FailedPreconditionError(
            "--launcher slurm runs inside a Slurm allocation (salloc or sbatch); outside one, "
            "add --sbatch to submit the job");
      }
      ProcessSpec p;
      p.label = "srun";
      p.env = env;
      p.argv = {"srun",
                "-n",
                absl::StrCat(spec.servers + workers),
                "--distribution=cyclic",
                "--kill-on-bad-exit=1",
                absl::StrCat("--chdir=", options.working_dir)};
      for (std::string& w : SplitWords(options.launcher_args)) p.argv.push_back(std::move(w));
      p.argv.insert(p.argv.end(), {FindBinary("syncline-node"), "--servers",
                                   absl::StrCat(spec.servers), "--coordinator", coordinator});
      AppendWorkerCommand(spec, &p.argv);
      out.push_back(std::move(p));
      return out;
    }
  }
  return absl::InternalError("unknown launcher");
}

}  // namespace syncline
