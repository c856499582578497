// Where a job's nodes run and what starts them: on this machine (local), one ssh per node
// (ssh), one `mpirun` for the whole world (mpirun), or one `srun` inside a Slurm allocation
// (slurm). Every launcher starts the same node programs with only the coordinator's address, a
// rank and the transport's settings; mpirun and srun start syncline-node, which takes its
// rank from their environment (job/world.h).
//
// Placement (ssh): the job's nodes in world order (servers, then workers) go round-robin over
// the hosts, one per host and turn, skipping a host whose slots are full, as `mpirun --map-by
// node` places ranks (and the mpirun launcher asks for exactly that, so both place alike).
// --servers-per-host K puts the servers K to a host instead, on the first hosts.
//
// Thread-safety: the functions are thread-safe.
#ifndef SYNCLINE_LAUNCH_CLUSTER_H_
#define SYNCLINE_LAUNCH_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/net.h"
#include "launch/process_group.h"
#include "syncline/job_spec.h"

namespace syncline {

enum class LauncherKind { kLocal, kSsh, kMpirun, kSlurm };
absl::StatusOr<LauncherKind> ParseLauncher(absl::string_view text);
const char* LauncherName(LauncherKind kind);

struct Host {
  std::string name;
  int slots = 1;
};

// "h1,h2:4" (slots after a colon, 1 by default).
absl::StatusOr<std::vector<Host>> ParseHosts(absl::string_view text);
// An Open MPI hostfile: one host per line, "NAME [slots=N] [max_slots=M]", '#' comments.
absl::StatusOr<std::vector<Host>> ReadHostfile(const std::string& path);

struct ClusterOptions {
  LauncherKind kind = LauncherKind::kLocal;
  std::vector<Host> hosts;
  int servers_per_host = 0;  // 0: round-robin with the workers
  // How to run a command on a host: called as RSH... HOST COMMAND-STRING.
  std::string rsh = "ssh -o BatchMode=yes";
  bool rsh_given = false;  // mpirun then uses it as its plm_rsh_agent
  std::string interface;   // nodes (and the coordinator) listen on this interface
  // The coordinator's interface when it differs from the nodes' (a launcher on a login node).
  std::string coordinator_interface;
  PortRange ports;
  // Extra arguments for mpirun or srun (split at spaces).
  std::string launcher_args;
  // The job key (core/job_key.h); empty: plaintext (off loopback only with `insecure`).
  std::string key_file;
  // Per-node keys (core/job_key.h): the folder of the nodes' own key files (OUT/keys), which
  // every node is given in place of the job's key; empty: each node gets `key_file`.
  std::string node_key_dir;
  bool node_keys = true;  // --node-keys
  bool insecure = false;
  // The folder the nodes start in (relative paths of the job are relative to it).
  std::string working_dir;
  // Where hostfiles are written (the run's OUT folder).
  std::string out;
  // Every node serves a /metrics page at a free port (SYNCLINE_METRICS_PORT=0).
  bool metrics = false;
};

// The host index of each node in world order (servers, then workers) under the ssh placement.
// InvalidArgument when the hosts' slots cannot hold the job, or with --servers-per-host, when
// there are too few hosts for the servers.
absl::StatusOr<std::vector<int>> PlaceNodes(int servers, int workers,
                                            const std::vector<Host>& hosts, int servers_per_host);

// The address the launcher's coordinator listens on: loopback for a local job; the
// interface's address with --coordinator-interface or --interface; else the address whose route
// reaches the first host (ssh, mpirun), or this host's own address (slurm: the launcher runs inside
// the allocation).
absl::StatusOr<std::string> CoordinatorBindIp(const ClusterOptions& options);

// Whether every address the job listens on is on loopback: the coordinator's (`coordinator_ip`)
// and the nodes' (--interface's, and those of a launcher that starts nodes on other hosts).
// Only then may it run without a key and without --insecure.
bool ListensOnlyOnLoopback(const ClusterOptions& options, const std::string& coordinator_ip);

// The child processes that start the job's nodes for `coordinator`: one per node (local,
// ssh), or one mpirun or srun for all of them. Labels are the nodes' ids ("w3") or the
// launcher's name.
absl::StatusOr<std::vector<ProcessSpec>> NodeProcesses(const JobSpec& spec,
                                                       const ClusterOptions& options,
                                                       const std::string& coordinator,
                                                       bool external_workers);

// `s` quoted for a POSIX shell.
std::string ShellQuote(absl::string_view s);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_CLUSTER_H_
