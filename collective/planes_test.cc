#include "collective/planes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/inproc_transport.h"

namespace syncline {
namespace {

// What the coordinator does for a generation's workers: every one's address, once all have
// given theirs.
class AddressBoard {
 public:
  explicit AddressBoard(int n) : n_(n) {}
  absl::StatusOr<std::vector<std::string>> Trade(int rank, const std::string& address,
                                                 absl::Time deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    addresses_[rank] = address;
    cv_.notify_all();
    const auto until = absl::ToChronoTime(deadline);
    if (!cv_.wait_until(lock, until, [&] { return static_cast<int>(addresses_.size()) == n_; })) {
      return absl::DeadlineExceededError("not every rank traded");
    }
    // By rank; "" for a rank that is no member.
    std::vector<std::string> all(addresses_.rbegin()->first + 1);
    for (const auto& [r, a] : addresses_) all[r] = a;
    return all;
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::string> addresses_;
};

// A worker's rendezvous of `generation` over `transport` (in-process) and `board`; a wait
// ends once `stop` is set, as when the job rolls back.
class TestRendezvous : public PeerRendezvous {
 public:
  TestRendezvous(AddressBoard& board, Transport& transport, int rank, uint32_t generation,
                 const std::atomic<bool>& stop)
      : board_(board), transport_(transport), rank_(rank), generation_(generation), stop_(stop) {}
  uint32_t generation() const override { return generation_; }
  absl::Status Interrupted() const override {
    return stop_.load() ? absl::AbortedError("the job rolls back") : absl::OkStatus();
  }
  absl::StatusOr<Listening> Listen(const std::string& id,
                                   const std::vector<std::string>& peers) override {
    auto endpoint = transport_.CreateEndpoint(id);
    if (!endpoint.ok()) return endpoint.status();
    auto address = (*endpoint)->Bind("inproc://" + id);
    if (!address.ok()) return address.status();
    return Listening{*std::move(endpoint), *address};
  }
  uint64_t PlanEvents() const override { return 0; }
  absl::StatusOr<std::vector<std::string>> TradeAddresses(uint64_t plan_events,
                                                          const std::string& address,
                                                          absl::Time deadline) override {
    return board_.Trade(rank_, address, deadline);
  }

 private:
  AddressBoard& board_;
  Transport& transport_;
  const int rank_;
  const uint32_t generation_;
  const std::atomic<bool>& stop_;
};

NodeTable Table(int n) {
  NodeTable table;
  table.num_workers = n;
  for (int r = 0; r < n; ++r) {
    table.nodes.push_back({wire::Role::WORKER, r, DataEndpointId(wire::Role::WORKER, r),
                           absl::StrCat("tcp://127.0.0.1:", 40000 + r)});
  }
  return table;
}

// n workers of generation 1 meet on endpoints of the generation (in-process, or a TCP plane
// of their own), and all-reduce: every rank gets the sum. `stale`, sent to w0's endpoint of
// generation 1 by an endpoint of generation 0, must not count.
void MeetAndAllReduce(bool tcp) {
  constexpr int n = 3;
  InprocTransport transport;
  AddressBoard board(n);
  std::atomic<bool> stop{false};
  JobSpec spec;
  const NodeTable table = Table(n);
  std::vector<std::unique_ptr<Endpoint>> data;  // generation 0's: never used here
  for (int r = 0; r < n; ++r) data.push_back(*transport.CreateEndpoint(absl::StrCat("w", r)));
  std::vector<std::vector<float>> values(n);
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      TestRendezvous rendezvous(board, transport, r, 1, stop);
      auto communicator = ConnectWorkersOfGeneration(spec, table, r, *data[r],
                                                     CollectivePlane{.tcp = tcp}, rendezvous);
      if (!communicator.ok()) {
        status[r] = communicator.status();
        return;
      }
      if (r == 0 && !tcp) {
        // A message of the undone generation, as a survivor's old endpoint would send it.
        MessageBuilder b(wire::MsgType::COLLECTIVE);
        b.header().setRank(1);
        b.header().setValueCount(4);
        b.AddFrame(Frame::Own(std::vector<float>(4, 1e30f)));
        (void)data[1]->Connect("w0@g1", "inproc://w0@g1");
        (void)data[1]->Send("w0@g1", b.Finish(), absl::Now() + absl::Seconds(1));
      }
      values[r] = std::vector<float>(4, static_cast<float>(r + 1));
      status[r] = (*communicator)->AllReduce(std::span<float>(values[r]), Algorithm::kRing);
      // In-process delivery is immediate: the stale message was first in w0's queue.
      if (r == 0 && !tcp) {
        EXPECT_EQ((*communicator)->counters().messages_dropped, 1u);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(status[r].ok()) << "w" << r << ": " << status[r];
    EXPECT_EQ(values[r], std::vector<float>(4, 6.0f)) << "w" << r;
  }
}

TEST(ConnectWorkersOfGenerationTest, MeetOnTheNodesTransportAfterARollback) {
  MeetAndAllReduce(/*tcp=*/false);
}

TEST(ConnectWorkersOfGenerationTest, MeetOnATcpPlaneOfTheirOwnAfterARollback) {
  MeetAndAllReduce(/*tcp=*/true);
}

// An elastic all-reduce after w2 of 4 left: the other three meet on endpoints of the meeting
// (named by its plan events), ranks renumbered densely in rank order, and all-reduce among
// themselves only.
TEST(MeetPeersTest, TheWorkersStillInTheJobMeetRenumberedDensely) {
  InprocTransport transport;
  AddressBoard board(3);
  std::atomic<bool> stop{false};
  JobSpec spec;
  const NodeTable table = Table(4);
  const std::vector<int> members = {0, 1, 3};
  std::vector<std::vector<float>> values(4);
  std::vector<absl::Status> status(4);
  std::vector<std::vector<int>> met(4);
  std::vector<int> ranks(4, -1);
  std::vector<std::thread> threads;
  for (int w : members) {
    threads.emplace_back([&, w] {
      TestRendezvous rendezvous(board, transport, w, 0, stop);
      absl::StatusOr<PeerMeeting> meeting =
          MeetPeers(spec, table, w, CollectivePlane{}, rendezvous, /*plan_events=*/1);
      if (!meeting.ok()) {
        status[w] = meeting.status();
        return;
      }
      met[w] = meeting->members;
      ranks[w] = meeting->communicator->rank();
      values[w] = std::vector<float>(4, static_cast<float>(w + 1));
      status[w] = meeting->communicator->AllReduce(std::span<float>(values[w]), Algorithm::kRing);
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < members.size(); ++i) {
    const int w = members[i];
    ASSERT_TRUE(status[w].ok()) << "w" << w << ": " << status[w];
    EXPECT_EQ(met[w], members) << "w" << w;
    EXPECT_EQ(ranks[w], static_cast<int>(i)) << "w" << w;
    EXPECT_EQ(values[w], std::vector<float>(4, 1.0f + 2.0f + 4.0f)) << "w" << w;
  }
  EXPECT_EQ(PeerEndpointId(3, 0, 1), "w3@g0.1");
  EXPECT_EQ(PeerEndpointId(3, 2), "w3@g2");
}

// A rank waiting for a peer that never comes (dead, as the rollback that interrupts it says)
// stops waiting when the job rolls back, long before the peer timeout, and says why.
TEST(ConnectWorkersOfGenerationTest, AWaitForAPeerEndsWhenTheJobRollsBack) {
  constexpr int n = 2;
  InprocTransport transport;
  AddressBoard board(n);
  std::atomic<bool> stop{false};
  JobSpec spec;
  spec.timeouts.peer_s = 60;
  spec.timeouts.request_s = 60;
  const NodeTable table = Table(n);
  std::vector<std::unique_ptr<Endpoint>> data;
  for (int r = 0; r < n; ++r) data.push_back(*transport.CreateEndpoint(absl::StrCat("w", r)));
  std::vector<std::unique_ptr<TestRendezvous>> rendezvous;
  std::vector<std::unique_ptr<Communicator>> communicators(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    rendezvous.push_back(std::make_unique<TestRendezvous>(board, transport, r, 2, stop));
  }
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto c =
          ConnectWorkersOfGeneration(spec, table, r, *data[r], CollectivePlane{}, *rendezvous[r]);
      ASSERT_TRUE(c.ok()) << c.status();
      communicators[r] = *std::move(c);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(communicators[0] != nullptr && communicators[1] != nullptr);
  // w1 never takes part; the job rolls back 200 ms in.
  std::thread rollback([&] {
    absl::SleepFor(absl::Milliseconds(200));
    stop.store(true);
  });
  std::vector<float> v(1000, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status s = communicators[0]->AllReduce(std::span<float>(v), Algorithm::kRing);
  rollback.join();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_NE(s.message().find("the job rolls back"), std::string::npos) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace syncline
