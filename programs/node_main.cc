// syncline-node: the one command a cluster launcher starts on every rank of a job:
//   mpirun -np S+W syncline-node --servers S --coordinator tcp://HOST:PORT
//   srun -n S+W syncline-node --servers S --coordinator tcp://HOST:PORT
// It reads its world rank and size from the launcher's environment (job/world.h), picks its
// node by the job's one mapping (ranks 0..S-1 are the servers, the rest the workers), and
// becomes that node's program, syncline-ps or syncline-worker, with every other argument
// passed on. The node registers with the world size, so a world of the wrong size is refused
// by the coordinator at once, naming both sizes.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/node_table.h"
#include "job/node_join.h"
#include "job/world.h"
#include "launch/supervisor.h"

namespace syncline {
namespace {

constexpr char kHelp[] =
    "syncline-node: starts this rank's node of a Syncline job under a cluster launcher.\n"
    "Usage: syncline-node --servers S [syncline-ps/syncline-worker flags...]\n"
    "  --servers S   the job's number of servers: world ranks 0..S-1 become ps0..ps(S-1),\n"
    "                ranks S.. become w0, w1, ...\n"
    "The world rank and size come from the first of SYNCLINE_WORLD_RANK/_SIZE,\n"
    "OMPI_COMM_WORLD_RANK/_SIZE, PMIX_RANK, PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS.\n"
    "Every other flag (--coordinator, --interface, --port-range, --key-file, ...) is passed\n"
    "to the node's program; see syncline-worker --help.\n"
    "  -- COMMAND ARGS  the workers' ranks run COMMAND (a user's worker program, as\n"
    "                syncline-launch ... -- COMMAND starts it) instead of syncline-worker, with\n"
    "                SYNCLINE_COORDINATOR and SYNCLINE_RANK set.\n";

// Becomes the user's worker program (execvp: a bare name is searched in PATH), which joins through
// the worker session and reads these variables; the node's other flags are for syncline-worker.
int RunWorkerCommand(std::vector<std::string>& command, const std::string& coordinator,
                     const NodeRank& node, const WorldRank& world) {
  if (!coordinator.empty()) setenv("SYNCLINE_COORDINATOR", coordinator.c_str(), 1);
  setenv("SYNCLINE_RANK", absl::StrCat(node.rank).c_str(), 1);
  setenv("SYNCLINE_WORLD_SIZE", absl::StrCat(world.size).c_str(), 1);
  std::vector<char*> args;
  for (std::string& a : command) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::cerr << "syncline-node: cannot run the workers' command '" << command[0] << "' (world rank "
            << world.rank << " from " << world.source << " is "
            << DataEndpointId(node.role, node.rank) << "): " << std::strerror(errno) << "\n";
  return 1;
}

int Main(int argc, char** argv) {
  int servers = -1;
  std::vector<std::string> rest, command;
  std::string coordinator;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      command.assign(argv + i + 1, argv + argc);
      if (command.empty()) {
        std::cerr << "syncline-node: -- must be followed by the workers' command\n";
        return kExitBadInput;
      }
      break;
    }
    if (arg == "--coordinator" && i + 1 < argc) coordinator = argv[i + 1];
    if (arg.rfind("--coordinator=", 0) == 0) coordinator = arg.substr(14);
    if (arg == "-h" || arg == "--help") {
      std::cout << kHelp;
      return 0;
    }
    std::string value;
    if (arg == "--servers" && i + 1 < argc) {
      value = argv[++i];
    } else if (arg.rfind("--servers=", 0) == 0) {
      value = arg.substr(10);
    } else {
      rest.push_back(arg);
      continue;
    }
    if (!absl::SimpleAtoi(value, &servers) || servers < 0) {
      std::cerr << "syncline-node: --servers " << value << ": not a count (an integer >= 0)\n";
      return kExitBadInput;
    }
  }
  if (servers < 0) {
    std::cerr << "syncline-node: give --servers (the job's number of servers)\n" << kHelp;
    return kExitBadInput;
  }
  auto world = WorldRankFromEnvironment();
  if (!world.ok()) {
    std::cerr << "syncline-node: " << world.status().message() << "\n";
    return kExitBadInput;
  }
  if (!world->has_value()) {
    std::cerr << "syncline-node: no world rank in the environment: start it with mpirun or "
                 "srun, or set SYNCLINE_WORLD_RANK and SYNCLINE_WORLD_SIZE\n";
    return kExitBadInput;
  }
  const NodeRank node = NodeOfWorldRank((*world)->rank, servers);
  const bool server = node.role == wire::Role::SERVER;
  if (!server && !command.empty()) return RunWorkerCommand(command, coordinator, node, **world);
  const std::string program = FindBinary(server ? "syncline-ps" : "syncline-worker");
  setenv("SYNCLINE_RANK", absl::StrCat(node.rank).c_str(), 1);
  setenv("SYNCLINE_WORLD_SIZE", absl::StrCat((*world)->size).c_str(), 1);
  std::vector<char*> args;
  args.push_back(const_cast<char*>(program.c_str()));
  for (std::string& a : rest) args.push_back(a.data());
  args.push_back(nullptr);
  execv(program.c_str(), args.data());
  std::cerr << "syncline-node: cannot run " << program << " (world rank " << (*world)->rank
            << " from " << (*world)->source << " is " << DataEndpointId(node.role, node.rank)
            << "): " << std::strerror(errno) << "\n";
  return 1;
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) { return syncline::Main(argc, argv); }
