#include "launch/cluster.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "core/net.h"
#include "core/zmq_transport.h"
#include "job/world.h"
#include "testing/scoped_temp_dir.h"

namespace syncline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::ScopedTempDir;

TEST(ClusterTest, ParsesHostsWithSlots) {
  auto hosts = ParseHosts("h1, h2:4,h3");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[1].name, "h2");
  EXPECT_EQ((*hosts)[1].slots, 4);
  EXPECT_EQ((*hosts)[2].slots, 1);
  EXPECT_THAT(ParseHosts("h1:0").status().message(), HasSubstr("HOST:SLOTS"));
  EXPECT_THAT(ParseHosts("h1;rm -rf /").status().message(), HasSubstr("not a host name"));
  EXPECT_FALSE(ParseHosts("").ok());
}

TEST(ClusterTest, ReadsAnOpenMpiHostfile) {
  ScopedTempDir dir("cluster");
  const std::string path = dir.path() + "/hosts";
  std::ofstream(path) << "# cluster\nnode1 slots=2\n\nnode2 slots=3 max_slots=3  # big\nnode3\n";
  auto hosts = ReadHostfile(path);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].slots, 2);
  EXPECT_EQ((*hosts)[1].slots, 3);
  EXPECT_EQ((*hosts)[2].slots, 1);
  std::ofstream(path) << "node1 cores=2\n";
  EXPECT_THAT(ReadHostfile(path).status().message(), HasSubstr(":1: unknown field 'cores=2'"));
  EXPECT_THAT(ReadHostfile(dir.path() + "/none").status().message(), HasSubstr("cannot read"));
}

TEST(ClusterTest, PlacesNodesRoundRobinByHostLikeMpirunMapByNode) {
  const std::vector<Host> hosts = {{"a", 2}, {"b", 2}, {"c", 1}};
  // World order: ps0 ps1 w0 w1 w2.
  auto place = PlaceNodes(2, 3, hosts, 0);
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_THAT(*place, ElementsAre(0, 1, 2, 0, 1));
  // A full host is skipped.
  auto full = PlaceNodes(1, 4, hosts, 0);
  ASSERT_TRUE(full.ok());
  EXPECT_THAT(*full, ElementsAre(0, 1, 2, 0, 1));
  EXPECT_THAT(PlaceNodes(3, 3, hosts, 0).status().message(), HasSubstr("5 slots for 6 nodes"));
}

TEST(ClusterTest, ServersPerHostPacksTheServersOnTheFirstHosts) {
  const std::vector<Host> hosts = {{"a", 3}, {"b", 3}};
  auto place = PlaceNodes(2, 2, hosts, 2);
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_THAT(*place, ElementsAre(0, 0, 0, 1));
  EXPECT_THAT(PlaceNodes(3, 0, {{"a", 4}}, 2).status().message(), HasSubstr("servers-per-host"));
}

TEST(ClusterTest, SshRunsEachNodeInTheSameFolderThroughTheRemoteShell) {
  JobSpec spec;
  spec.servers = 1;
  spec.workers = 2;
  ClusterOptions o;
  o.kind = LauncherKind::kSsh;
  o.hosts = {{"h1", 1}, {"h2", 2}};
  o.rsh = "/x/rsh -o BatchMode=yes";
  o.working_dir = "/data/it's here";
  o.key_file = "/keys/job.key";
  auto p = NodeProcesses(spec, o, "tcp://10.0.0.1:7000", false);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].label, "ps0");
  EXPECT_EQ((*p)[2].label, "w1");
  EXPECT_THAT((*p)[1].argv, ElementsAre("/x/rsh", "-o", "BatchMode=yes", "h2", ::testing::_));
  const std::string& command = (*p)[2].argv.back();
  EXPECT_THAT(command, HasSubstr("cd '/data/it'\\''s here' && exec env "
                                 "SYNCLINE_KEY_FILE='/keys/job.key' "));
  EXPECT_THAT(command, HasSubstr("'--coordinator' 'tcp://10.0.0.1:7000' '--rank' '1'"));
}

TEST(ClusterTest, MpirunStartsTheWholeWorldThroughSyncline_node) {
  ScopedTempDir dir("cluster");
  JobSpec spec;
  spec.servers = 2;
  spec.workers = 2;
  ClusterOptions o;
  o.kind = LauncherKind::kMpirun;
  o.hosts = {{"h1", 2}, {"h2", 2}};
  o.out = dir.path();
  o.working_dir = "/w";
  o.launcher_args = "--mca btl_tcp_if_include eth0";
  auto p = NodeProcesses(spec, o, "tcp://10.0.0.1:7000", false);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 1u);
  const std::vector<std::string>& argv = (*p)[0].argv;
  EXPECT_EQ(argv[0], "mpirun");
  EXPECT_THAT(argv, ::testing::Contains("node"));
  EXPECT_THAT(argv, ::testing::Contains("btl_tcp_if_include"));
  EXPECT_THAT(argv[argv.size() - 5], HasSubstr("syncline-node"));
  EXPECT_EQ(argv[argv.size() - 3], "2");
  std::ifstream hostfile(dir.path() + "/hostfile");
  std::string all((std::istreambuf_iterator<char>(hostfile)), {});
  EXPECT_EQ(all, "h1 slots=2\nh2 slots=2\n");
  // Three nodes cannot fit a hostfile of two slots.
  o.hosts = {{"h1", 1}, {"h2", 1}};
  EXPECT_FALSE(NodeProcesses(spec, o, "tcp://10.0.0.1:7000", false).ok());
}

TEST(ClusterTest, SlurmNeedsAnAllocation) {
  unsetenv("SLURM_JOB_ID");
  JobSpec spec;
  ClusterOptions o;
  o.kind = LauncherKind::kSlurm;
  EXPECT_THAT(NodeProcesses(spec, o, "tcp://10.0.0.1:7000", false).status().message(),
              HasSubstr("--sbatch"));
}

TEST(WorldTest, OpenMpiComesBeforeSlurmAndSynclineBeforeBoth) {
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "2", 1);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  auto w = WorldRankFromEnvironment();
  ASSERT_TRUE(w.ok() && w->has_value());
  EXPECT_EQ((*w)->rank, 3);
  EXPECT_EQ((*w)->size, 4);
  EXPECT_EQ((*w)->source, "OMPI_COMM_WORLD_RANK");
  setenv("SYNCLINE_WORLD_RANK", "1", 1);
  setenv("SYNCLINE_WORLD_SIZE", "2", 1);
  EXPECT_EQ((*WorldRankFromEnvironment())->source, "SYNCLINE_WORLD_RANK");
  setenv("SYNCLINE_WORLD_RANK", "2", 1);
  EXPECT_THAT(WorldRankFromEnvironment().status().message(), HasSubstr("is not below"));
  for (const char* v : {"SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE", "SYNCLINE_WORLD_RANK", "SYNCLINE_WORLD_SIZE"}) {
    unsetenv(v);
  }
  auto none = WorldRankFromEnvironment();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(WorldTest, ServersComeFirst) {
  EXPECT_EQ(NodeOfWorldRank(1, 2).role, wire::Role::SERVER);
  EXPECT_EQ(NodeOfWorldRank(1, 2).rank, 1);
  EXPECT_EQ(NodeOfWorldRank(2, 2).role, wire::Role::WORKER);
  EXPECT_EQ(NodeOfWorldRank(5, 2).rank, 3);
}

TEST(NetTest, ParsesPortRangesAndAddresses) {
  auto r = ParsePortRange("7000-7010");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first, 7000);
  EXPECT_EQ(r->last, 7010);
  EXPECT_EQ(ParsePortRange("7000")->last, 7000);
  EXPECT_FALSE(ParsePortRange("7010-7000").ok());
  EXPECT_FALSE(ParsePortRange("0-10").ok());
  EXPECT_FALSE(ParsePortRange("a-b").ok());
  auto hp = ParseTcpAddress("tcp://10.1.2.3:7000");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "10.1.2.3");
  EXPECT_EQ(hp->port, 7000);
  EXPECT_FALSE(ParseTcpAddress("ipc:///tmp/x").ok());
  EXPECT_TRUE(IsLoopbackAddress("tcp://127.0.0.1:1"));
  EXPECT_TRUE(IsLoopbackAddress("tcp://localhost:1"));
  EXPECT_FALSE(IsLoopbackAddress("tcp://10.0.0.1:1"));
  EXPECT_EQ(*LocalAddressToward("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(*InterfaceAddress("lo"), "127.0.0.1");
  EXPECT_THAT(InterfaceAddress("nosuch0").status().message(), HasSubstr("interfaces with one"));
}

TEST(NetTest, BindsTheFirstFreePortOfARangeAndProbesIt) {
  ZmqTransport transport;
  auto a = transport.CreateEndpoint("a");
  auto b = transport.CreateEndpoint("b");
  ASSERT_TRUE(a.ok() && b.ok());
  // A port the kernel just handed out and released is very likely free for a moment.
  auto first = BindInRange(**a, "127.0.0.1", PortRange{});
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = ParseTcpAddress(*first)->port;
  EXPECT_TRUE(ProbeTcp(*first, absl::Seconds(2)).ok());
  // b cannot have a's port, so with the range [port, port + 1] it takes the next one or fails
  // naming the range.
  auto second = BindInRange(**b, "127.0.0.1", PortRange{port, port});
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat("no free port in ", port)));
}

TEST(NetTest, ProbeNamesARefusedPort) {
  // Bind a socket without listening: connecting to it is refused.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string address = absl::StrCat("tcp://127.0.0.1:", ntohs(addr.sin_port));
  EXPECT_THAT(ProbeTcp(address, absl::Seconds(2)).message(), HasSubstr("refused"));
  close(fd);
}

}  // namespace
}  // namespace syncline
