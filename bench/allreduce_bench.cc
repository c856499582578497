// syncline-bench-allreduce: all-reduce (float32 sum) time per op, algbw and busbw of Syncline's
// Communicator (collective/communicator.h) over ZmqTransport beside Gloo's TCP transport and
// Open MPI's MPI_Allreduce, measured in the same run by the same N separate processes over
// loopback TCP (bench/allreduce-bench.sh runs it for N = 2, 4, 8).
//
// Two ways to start it:
// - under mpirun (built with MPI): `mpirun -np N --mca btl self,tcp syncline-bench-allreduce`.
//   MPI gives rank and size, exchanges the ZeroMQ addresses and the Gloo rendezvous folder,
//   and is measured itself (MPI_Allreduce, MPI_FLOAT, MPI_SUM);
// - alone: `syncline-bench-allreduce --np N` forks N processes that meet through a shared
//   memory barrier (no MPI figures then).
// Syncline: every rank its own ZeroMQ endpoint bound to 127.0.0.1, connected from the lower
// rank to the higher only (as the product does), over plain ZeroMQ (syncline-*), the TCP plane
// (syncline-tcp-*), and a keyed job's planes under one job key: the sealed TCP plane
// (syncline-sealed-*, AES-256-GCM or with --no-aes XChaCha20-Poly1305) and ZeroMQ CURVE
// (syncline-curve-*); a second summary sets those two against the plaintext TCP plane. Gloo:
// gloo::AllreduceRing, AllreduceRingChunked, AllreduceHalvingDoubling and gloo::allreduce (the
// newer API PyTorch uses), a full mesh of tcp pairs on 127.0.0.1 met through a FileStore.
//
// For every size and implementation: one run on known inputs whose result is checked on every
// element of every rank (a wrong sum or an error fails the whole bench: it never reports a
// broken run), then untimed batches of 1, 2, 4, ... ops until one lasts --sample-ms (this
// warms up and sizes the batch), then samples of `batch` back-to-back ops after a barrier. A
// sample's time is the slowest rank's; the figure is the median sample. algbw = bytes / time,
// busbw = algbw * 2(N-1)/N (nccl-tests' definition). The summary's ratio = time of the faster
// of Gloo (its best algorithm) and MPI over Syncline's time: 1.0 is par, above is faster.
// "other" is the share of the machine's cores that other processes used during the samples
// (from /proc/stat less this bench's own CPU time); a figure taken above --max-other is taken
// again (--retries) and the quietest attempt kept. An implementation over 10x slower than the
// fastest at a size (and over 0.2 s per op) is dropped from the larger sizes.
//
// Between ops a rank waits in a barrier that sleeps rather than spins, so that ranks that are
// done do not take the CPU from those that are not (this machine may have fewer cores than N).
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/communicator.h"
#include "core/command_line.h"
#include "core/message.h"
#include "core/seal.h"
#include "core/tcp_transport.h"
#include "core/zmq_transport.h"

#if defined(SYNCLINE_BENCH_HAVE_GLOO)
#include "gloo/allreduce.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/config.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"
#endif
#if defined(SYNCLINE_BENCH_HAVE_MPI)
#include <mpi.h>
#endif

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr int kMaxBatch = 4096;  // ops in one sample, at most
// An implementation whose op takes over kDropSeconds and over kDropFactor times the fastest
// one's at a size is not run at the larger sizes.
constexpr double kDropSeconds = 0.2;
constexpr double kDropFactor = 10;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ---------------------------------------------------------------------------------------------
// The control plane: rank, size, a barrier, and small exchanges between the processes. It
// carries no measured traffic.

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Waits (sleeping, not spinning) until every rank has called it.
  virtual void Barrier() = 0;
  // Every rank's `mine` (at most kBlob - 1 bytes), by rank.
  virtual std::vector<std::string> AllGather(const std::string& mine) = 0;
  // Element-wise maximum over the ranks, in place (every rank passes the same length).
  virtual void Max(std::vector<double>& values) = 0;
  // Element-wise sum over the ranks, in place.
  virtual void Sum(std::vector<double>& values) = 0;
  static constexpr size_t kBlob = 512;
};

#if defined(SYNCLINE_BENCH_HAVE_MPI)
class MpiGroup : public Group {
 public:
  MpiGroup() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void Barrier() override {
    // MPI_Barrier busy-polls; with more ranks than cores that would steal the CPU from the
    // ranks still working on the op before it.
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    int done = 0;
    while (true) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) break;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  std::vector<std::string> AllGather(const std::string& mine) override {
    std::vector<char> in(kBlob, 0), out(kBlob * size_, 0);
    std::memcpy(in.data(), mine.data(), std::min(mine.size(), kBlob - 1));
    MPI_Allgather(in.data(), kBlob, MPI_CHAR, out.data(), kBlob, MPI_CHAR, MPI_COMM_WORLD);
    std::vector<std::string> all;
    for (int r = 0; r < size_; ++r) all.emplace_back(out.data() + r * kBlob);
    return all;
  }
  void Max(std::vector<double>& values) override { Reduce(values, MPI_MAX); }
  void Sum(std::vector<double>& values) override { Reduce(values, MPI_SUM); }

 private:
  void Reduce(std::vector<double>& values, MPI_Op op) {
    Barrier();  // the allreduce below would spin while slow ranks finish
    MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, op,
                  MPI_COMM_WORLD);
  }
  int rank_ = 0;
  int size_ = 1;
};
#endif

// N processes forked from one parent, meeting in a shared mapping made before the fork.
class ForkGroup : public Group {
 public:
  static constexpr int kMaxRanks = 64;
  static constexpr size_t kMaxValues = 4096;
  struct Shared {
    pthread_barrier_t barrier;
    char blobs[kMaxRanks][kBlob];
    double values[kMaxRanks][kMaxValues];
  };
  // The mapping, made in the parent; nullptr when it cannot be made.
  static Shared* Create(int n) {
    void* p =
        mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto* shared = static_cast<Shared*>(p);
    pthread_barrierattr_t attr;
    pthread_barrierattr_init(&attr);
    pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&shared->barrier, &attr, static_cast<unsigned>(n));
    pthread_barrierattr_destroy(&attr);
    return shared;
  }
  ForkGroup(Shared* shared, int rank, int size) : shared_(shared), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void Barrier() override { pthread_barrier_wait(&shared_->barrier); }
  std::vector<std::string> AllGather(const std::string& mine) override {
    std::memset(shared_->blobs[rank_], 0, kBlob);
    std::memcpy(shared_->blobs[rank_], mine.data(), std::min(mine.size(), kBlob - 1));
    Barrier();
    std::vector<std::string> all;
    for (int r = 0; r < size_; ++r) all.emplace_back(shared_->blobs[r]);
    Barrier();
    return all;
  }
  void Max(std::vector<double>& values) override {
    Reduce(values, [](double a, double b) { return std::max(a, b); });
  }
  void Sum(std::vector<double>& values) override {
    Reduce(values, [](double a, double b) { return a + b; });
  }

 private:
  void Reduce(std::vector<double>& values, double (*op)(double, double)) {
    for (size_t base = 0; base < values.size(); base += kMaxValues) {
      const size_t n = std::min(kMaxValues, values.size() - base);
      std::memcpy(shared_->values[rank_], values.data() + base, n * sizeof(double));
      Barrier();
      for (size_t i = 0; i < n; ++i) {
        double m = shared_->values[0][i];
        for (int r = 1; r < size_; ++r) m = op(m, shared_->values[r][i]);
        values[base + i] = m;
      }
      Barrier();
    }
  }

  Shared* shared_;
  int rank_;
  int size_;
};

// ---------------------------------------------------------------------------------------------
// The implementations under test. Each prepares for one buffer and returns the op to time.

struct Impl {
  std::string name;
  std::string family;  // "syncline", "gloo" or "mpi"
  // Prepares an all-reduce of `data` in place (collective: every rank calls it); the op
  // throws or returns an error on failure.
  std::function<std::function<absl::Status()>(std::span<float> data)> prepare;
};

class SynclineSide {
 public:
  SynclineSide(Group& group, std::unique_ptr<Transport> transport, absl::Duration timeout)
      : transport_(std::move(transport)) {
    const int rank = group.rank(), n = group.size();
    std::vector<std::string> ids;
    for (int r = 0; r < n; ++r) ids.push_back(absl::StrCat("r", r));
    transport_->AllowPeers(ids);  // a keyed transport accepts exactly these
    endpoint_ = *transport_->CreateEndpoint(ids[rank]);
    absl::StatusOr<std::string> address = endpoint_->Bind("tcp://127.0.0.1:0");
    if (!address.ok()) Fail(address.status());
    const std::vector<std::string> addresses = group.AllGather(*address);
    // One connection per pair, opened by the lower rank; the higher one answers over it.
    for (int q = rank + 1; q < n; ++q) {
      if (absl::Status s = endpoint_->Connect(ids[q], addresses[q]); !s.ok()) Fail(s);
    }
    // Every lower rank says hello over its connection, so that every connection is up (and
    // the higher rank has heard from the lower) before the first collective.
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (int q = rank + 1; q < n; ++q) {
      if (absl::Status s = endpoint_->Send(
              ids[q], MakeSimple(wire::MsgType::HEARTBEAT, wire::Role::WORKER, rank), deadline);
          !s.ok()) {
        Fail(s);
      }
    }
    for (int heard = 0; heard < rank; ++heard) {
      if (absl::StatusOr<Message> m = endpoint_->Receive(deadline); !m.ok()) Fail(m.status());
    }
    group.Barrier();
    CommunicatorOptions options;
    options.timeout = timeout;
    communicator_ = std::make_unique<Communicator>(endpoint_.get(), rank, ids, options);
  }
  Communicator& communicator() { return *communicator_; }
  uint64_t dropped() const { return communicator_->counters().messages_dropped; }

 private:
  [[noreturn]] static void Fail(const absl::Status& s) {
    std::cerr << "syncline-bench-allreduce: syncline setup: " << s << "\n";
    std::_Exit(1);
  }
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<Communicator> communicator_;
};

#if defined(SYNCLINE_BENCH_HAVE_GLOO)
class GlooSide {
 public:
  GlooSide(Group& group, const std::string& store_dir, std::chrono::milliseconds timeout) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    device_ = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(group.rank(), group.size());
    context->setTimeout(timeout);
    context->connectFullMesh(store, device_);
    context_ = context;
  }
  const std::shared_ptr<gloo::Context>& context() const { return context_; }
  uint32_t NextTag() { return tag_++; }

 private:
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 1;
};

// Wraps a Gloo algorithm object (they keep buffers and pairs for one pointer and count).
template <typename Algo>
std::function<absl::Status()> GlooAlgorithm(Group& group, const std::shared_ptr<gloo::Context>& c,
                                            std::span<float> data) {
  auto algo =
      std::make_shared<Algo>(c, std::vector<float*>{data.data()}, static_cast<int>(data.size()));
  group.Barrier();  // every rank's receive buffers exist before anyone sends
  return [algo] {
    algo->run();
    return absl::OkStatus();
  };
}
#endif

// ---------------------------------------------------------------------------------------------

struct Settings {
  size_t min_bytes = 4 * kKiB;
  size_t max_bytes = 256 * kMiB;
  int factor = 4;
  std::vector<std::string> impls;                                  // empty: every one available
  double spin_us = absl::ToDoubleMicroseconds(TcpOptions{}.spin);  // TcpOptions::spin
  double sample_ms = 50;  // a sample lasts at least this long (batching small ops)
  double budget_s = 4;    // per size and implementation: samples within this time
  int min_samples = 3;
  int max_samples = 15;
  double timeout_s = 300;
  int io_threads = 1;
  bool no_aes = false;  // the sealed plane without AES-GCM (XChaCha20-Poly1305)
  bool quick = false;
  int retries = 2;          // re-measure a figure taken while the machine was busy
  double max_other = 0.10;  // "busy": other processes used more than this share of the cores
};

struct Row {
  size_t bytes = 0;
  std::string impl;
  std::string family;
  double seconds = 0;  // median op time
  int samples = 0;
  int batch = 0;
  double other = 0;  // share of the machine other processes used meanwhile
};

// One job key for every rank: rank 0 makes it and hands it over in a file of mode 0600.
std::shared_ptr<const JobKey> SharedKey(Group& group) {
  std::string path;
  if (group.rank() == 0) {
    path = absl::StrCat("/tmp/syncline-bench-allreduce-", getpid(), ".key");
    if (absl::Status s = JobKey::Generate().Save(path); !s.ok()) {
      std::cerr << "syncline-bench-allreduce: " << s << "\n";
      std::_Exit(1);
    }
  }
  path = group.AllGather(path)[0];
  absl::StatusOr<JobKey> key = JobKey::Load(path);
  group.Barrier();
  if (group.rank() == 0) std::remove(path.c_str());
  if (!key.ok()) {
    std::cerr << "syncline-bench-allreduce: " << key.status() << "\n";
    std::_Exit(1);
  }
  return std::make_shared<const JobKey>(*std::move(key));
}

// Busy and total time of the whole machine, in clock ticks (/proc/stat's cpu line).
struct MachineCpu {
  double busy = 0;
  double total = 0;
};
MachineCpu ReadMachineCpu() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  MachineCpu m;
  m.busy = user + nice + system + irq + softirq + steal;
  m.total = m.busy + idle + iowait;
  return m;
}
// User and system time of this process (all its threads), in clock ticks.
double OwnCpuTicks() {
  std::ifstream in("/proc/self/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = all.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(all.substr(close + 2), ' ');
  // Fields 14 and 15 of proc(5), utime and stime; fields[0] is field 3.
  if (fields.size() < 13) return 0;
  return std::atof(fields[11].c_str()) + std::atof(fields[12].c_str());
}

// Rank r's input: exact in float, different per rank and per element, so that a sum that
// misses a rank, adds one twice or misplaces a chunk shows.
float Input(int rank, size_t i) {
  return static_cast<float>(rank + 1) + 0.25f * static_cast<float>(i % 251);
}
float Expected(int n, size_t i) {
  return static_cast<float>(n * (n + 1) / 2) + 0.25f * static_cast<float>(n * (i % 251));
}

size_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

std::string Bytes(size_t b) {
  if (b >= kMiB) return absl::StrCat(b / kMiB, "M");
  return absl::StrCat(b / kKiB, "K");
}

std::string Time(double s) {
  if (s < 1e-3) return absl::StrFormat("%.1f us", s * 1e6);
  if (s < 1) return absl::StrFormat("%.2f ms", s * 1e3);
  return absl::StrFormat("%.3f s", s);
}

// The keyed planes against the plaintext TCP plane: time per op (the faster of ring and
// doubling) and plaintext's time over theirs (1.0 is par, 0.7 is 70% of its speed).
void KeyedSummary(const std::vector<Row>& rows, bool aes) {
  std::map<size_t, std::map<std::string, double>> best;  // bytes -> plane -> seconds
  for (const Row& r : rows) {
    for (const char* plane : {"syncline-tcp-", "syncline-sealed-", "syncline-curve-"}) {
      if (!r.impl.starts_with(plane)) continue;
      auto [it, fresh] = best[r.bytes].try_emplace(plane, r.seconds);
      if (!fresh) it->second = std::min(it->second, r.seconds);
    }
  }
  if (best.empty()) return;
  const auto cipher =
      static_cast<SealCipher>(ChooseSealCipher(LocalSealCiphers(aes), LocalSealCiphers(aes)));
  std::printf(
      "\nKeyed planes (one job key) against the plaintext TCP plane, best of ring and doubling; "
      "sealed: %s%s%s\n",
      SealCipherName(cipher), cipher == SealCipher::kAes256Gcm ? " with " : "",
      cipher == SealCipher::kAes256Gcm ? SealAesImplementation() : "");
  std::printf("%8s  %10s %10s %12s %10s %12s\n", "bytes", "tcp", "sealed", "sealed/tcp", "curve",
              "curve/tcp");
  for (const auto& [bytes, planes] : best) {
    auto time = [&](const char* plane) {
      auto it = planes.find(plane);
      return it == planes.end() ? std::string("-") : Time(it->second);
    };
    auto ratio = [&](const char* plane) {
      auto it = planes.find(plane), base = planes.find("syncline-tcp-");
      if (it == planes.end() || base == planes.end()) return std::string("-");
      return absl::StrFormat("%.2f", base->second / it->second);
    };
    std::printf("%8s  %10s %10s %12s %10s %12s\n", Bytes(bytes).c_str(),
                time("syncline-tcp-").c_str(), time("syncline-sealed-").c_str(),
                ratio("syncline-sealed-").c_str(), time("syncline-curve-").c_str(),
                ratio("syncline-curve-").c_str());
  }
}

int Run(Group& group, const Settings& settings, const std::string& gloo_dir,
        const std::string& launch) {
  const int rank = group.rank(), n = group.size();
  const bool leader = rank == 0;
  const unsigned cores = std::thread::hardware_concurrency();
  if (leader) {
    std::printf(
        "syncline-bench-allreduce: N=%d processes (%s), %u CPU cores%s, loopback TCP, "
        "float32 sum\n",
        n, launch.c_str(), cores,
        static_cast<unsigned>(n) > cores ? absl::StrFormat(" (OVERSUBSCRIBED: %.1f ranks per core)",
                                                           static_cast<double>(n) / cores)
                                               .c_str()
                                         : "");
  }

  std::vector<Impl> impls;
  ZmqOptions zmq;
  zmq.io_threads = settings.io_threads;
  SynclineSide syncline(group, std::make_unique<ZmqTransport>(zmq),
                        absl::Seconds(settings.timeout_s));
  TcpOptions tcp;
  tcp.spin = absl::Microseconds(settings.spin_us);
  SynclineSide syncline_tcp(group, std::make_unique<TcpTransport>(tcp),
                            absl::Seconds(settings.timeout_s));
  // A keyed job's planes, under one job key: the sealed TCP plane, and ZeroMQ CURVE (where
  // keyed collectives ran before it).
  const std::shared_ptr<const JobKey> key = SharedKey(group);
  TcpOptions sealed = tcp;
  sealed.key = key;
  sealed.seal_with_aes = !settings.no_aes;
  SynclineSide syncline_sealed(group, std::make_unique<TcpTransport>(sealed),
                               absl::Seconds(settings.timeout_s));
  ZmqOptions curve = zmq;
  curve.key = key;
  SynclineSide syncline_curve(group, std::make_unique<ZmqTransport>(curve),
                              absl::Seconds(settings.timeout_s));
  for (auto [side, prefix] : {std::pair{&syncline, "syncline-"},
                              {&syncline_tcp, "syncline-tcp-"},
                              {&syncline_sealed, "syncline-sealed-"},
                              {&syncline_curve, "syncline-curve-"}}) {
    for (Algorithm a :
         {Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kHalvingDoubling}) {
      impls.push_back(
          {absl::StrCat(prefix, AlgorithmName(a)), "syncline", [side, a](std::span<float> data) {
             return std::function<absl::Status()>(
                 [side, a, data] { return side->communicator().AllReduce(data, a); });
           }});
    }
  }
  std::string gloo_note = "not built with Gloo";
#if defined(SYNCLINE_BENCH_HAVE_GLOO)
  std::unique_ptr<GlooSide> gloo;
  if (!gloo_dir.empty()) {
    gloo = std::make_unique<GlooSide>(
        group, gloo_dir,
        std::chrono::milliseconds(static_cast<int64_t>(settings.timeout_s * 1000)));
    gloo_note = absl::StrFormat("Gloo %d.%d.%d, tcp transport on 127.0.0.1", GLOO_VERSION_MAJOR,
                                GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
    GlooSide* g = gloo.get();
    impls.push_back({"gloo-ring", "gloo", [&group, g](std::span<float> data) {
                       return GlooAlgorithm<gloo::AllreduceRing<float>>(group, g->context(), data);
                     }});
    impls.push_back({"gloo-ring-chunked", "gloo", [&group, g](std::span<float> data) {
                       return GlooAlgorithm<gloo::AllreduceRingChunked<float>>(group, g->context(),
                                                                               data);
                     }});
    impls.push_back({"gloo-halving-doubling", "gloo", [&group, g](std::span<float> data) {
                       return GlooAlgorithm<gloo::AllreduceHalvingDoubling<float>>(
                           group, g->context(), data);
                     }});
    impls.push_back(
        {"gloo-allreduce", "gloo", [g](std::span<float> data) {
           return std::function<absl::Status()>([g, data] {
             gloo::AllreduceOptions opts(g->context());
             opts.setOutput(data.data(), data.size());
             opts.setReduceFunction(
                 static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
             opts.setTag(g->NextTag());
             gloo::allreduce(opts);
             return absl::OkStatus();
           });
         }});
  }
#endif
  std::string mpi_note = "MPI: not measured (not built with MPI)";
#if defined(SYNCLINE_BENCH_HAVE_MPI)
  if (launch.starts_with("mpirun")) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, len);
    v = v.substr(0, v.find_first_of(",\n"));
    const char* btl = std::getenv("OMPI_MCA_btl");
    const char* pml = std::getenv("OMPI_MCA_pml");
    mpi_note = absl::StrCat("MPI: ", v, ", btl=", btl != nullptr ? btl : "(default)",
                            ", pml=", pml != nullptr ? pml : "(default)");
    impls.push_back({"mpi", "mpi", [](std::span<float> data) {
                       return std::function<absl::Status()>([data] {
                         const int rc =
                             MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                           MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                         if (rc != MPI_SUCCESS) return absl::InternalError("MPI_Allreduce failed");
                         return absl::OkStatus();
                       });
                     }});
  } else {
    mpi_note = "MPI: not measured (not started under mpirun)";
  }
#endif
  if (!settings.impls.empty()) {
    std::vector<Impl> chosen;
    for (const std::string& want : settings.impls) {
      auto it =
          std::find_if(impls.begin(), impls.end(), [&](const Impl& i) { return i.name == want; });
      if (it == impls.end()) {
        if (leader)
          std::fprintf(stderr, "syncline-bench-allreduce: no implementation %s here\n",
                       want.c_str());
        return 2;
      }
      chosen.push_back(*it);
    }
    impls = chosen;
  }
  if (leader) {
    std::printf(
        "Syncline: Communicator over ZmqTransport (syncline-*, %d I/O thread%s) and over "
        "TcpTransport (syncline-tcp-*, polled by the caller, spin %.0f us), segment %zu KiB\n",
        settings.io_threads, settings.io_threads == 1 ? "" : "s", settings.spin_us,
        CommunicatorOptions{}.segment_bytes / kKiB);
    std::printf("%s\n%s\n", gloo_note.c_str(), mpi_note.c_str());
    std::printf(
        "time = median over samples of the slowest rank; algbw = bytes/time; busbw = "
        "algbw*2(N-1)/N; GB = 1e9 B;\nother = share of the machine's cores that other processes "
        "used during the samples (above --max-other: measured again, the quietest kept)\n\n");
    std::printf("%8s  %-22s %12s %10s %10s %13s %6s\n", "bytes", "implementation", "time/op",
                "algbw GB/s", "busbw GB/s", "samples x ops", "other");
    std::fflush(stdout);
  }

  std::vector<size_t> sizes;
  for (size_t b = settings.min_bytes; b <= settings.max_bytes; b *= settings.factor) {
    sizes.push_back(b);
  }
  std::vector<Row> rows;
  std::set<std::string> dropped;
  const double bus = 2.0 * (n - 1) / n;
  for (size_t bytes : sizes) {
    // A rank holds the buffer and, at worst, about four more of its size (Gloo's ring keeps
    // an inbox and an outbox, recursive doubling a copy, ZeroMQ the messages in flight).
    std::vector<double> fits = {
        leader ? static_cast<double>(MemAvailableBytes() * 0.85 >= 5.0 * n * bytes) : 0.0};
    group.Max(fits);
    if (fits[0] == 0) {
      if (leader)
        std::printf("%8s  skipped: %d ranks x ~5 x %s do not fit in memory\n", Bytes(bytes).c_str(),
                    n, Bytes(bytes).c_str());
      continue;
    }
    const size_t count = bytes / sizeof(float);
    std::vector<float> buffer(count);
    std::span<float> data(buffer);
    double fastest = 0;  // the fastest median at this size so far
    for (const Impl& impl : impls) {
      if (dropped.contains(impl.name)) continue;
      // 1. Prepare, run once on known inputs, check every element on every rank.
      for (size_t i = 0; i < count; ++i) buffer[i] = Input(rank, i);
      std::string error;
      std::function<absl::Status()> op;
      try {
        op = impl.prepare(data);
        group.Barrier();
        if (absl::Status s = op(); !s.ok()) error = s.ToString();
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (error.empty()) {
        for (size_t i = 0; i < count; ++i) {
          if (buffer[i] != Expected(n, i)) {
            error = absl::StrFormat("element %zu is %g, expected %g", i, buffer[i], Expected(n, i));
            break;
          }
        }
      }
      std::vector<double> failed = {error.empty() ? 0.0 : 1.0};
      if (!error.empty()) {
        std::fprintf(stderr, "syncline-bench-allreduce: rank %d: %s on %s: %s\n", rank,
                     impl.name.c_str(), Bytes(bytes).c_str(), error.c_str());
      }
      group.Max(failed);
      if (failed[0] != 0) {
        if (leader) {
          std::printf(
              "FAILED: %s on %s bytes gave a wrong result or an error (see stderr); "
              "no figures reported\n",
              impl.name.c_str(), Bytes(bytes).c_str());
        }
        return 1;
      }
      // Zeros from now on: the values do not matter to the timing, and repeated in-place sums
      // of them never overflow or turn denormal.
      std::fill(buffer.begin(), buffer.end(), 0.0f);
      // 2. Untimed for the figure: batches of 1, 2, 4, ... ops until one lasts --sample-ms on
      // the slowest rank size the batch and the number of samples (one op for large sizes).
      Clock::time_point t0;
      absl::Status s;
      double t = 0;  // seconds per op
      for (int trial = 1;; trial *= 2) {
        group.Barrier();
        t0 = Clock::now();
        for (int b = 0; b < trial && s.ok(); ++b) s = op();
        std::vector<double> warm = {Seconds(t0, Clock::now()), s.ok() ? 0.0 : 1.0};
        group.Max(warm);
        if (warm[1] != 0) {
          if (leader) {
            std::printf("FAILED: %s on %s: %s\n", impl.name.c_str(), Bytes(bytes).c_str(),
                        s.ToString().c_str());
          }
          return 1;
        }
        t = std::max(warm[0], 1e-7) / trial;
        if (warm[0] >= settings.sample_ms * 1e-3 || trial >= kMaxBatch) break;
      }
      const int batch =
          std::clamp(static_cast<int>(std::lround(settings.sample_ms * 1e-3 / t)), 1, kMaxBatch);
      const int samples = std::clamp(static_cast<int>(settings.budget_s / (t * batch)),
                                     settings.min_samples, settings.max_samples);
      // 3. The samples; again (up to --retries times) when other processes used more than
      // --max-other of the machine meanwhile, keeping the quietest attempt.
      double median = 0, other = 2;  // other < 0: unknown
      for (int attempt = 0; attempt <= settings.retries; ++attempt) {
        if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(2));
        std::vector<double> times(samples + 1, 0.0);
        group.Barrier();
        const MachineCpu m0 = leader ? ReadMachineCpu() : MachineCpu{};
        const double own0 = OwnCpuTicks();
        for (int k = 0; k < samples && s.ok(); ++k) {
          group.Barrier();
          t0 = Clock::now();
          for (int b = 0; b < batch && s.ok(); ++b) s = op();
          times[k] = Seconds(t0, Clock::now()) / batch;
        }
        group.Barrier();
        const MachineCpu m1 = leader ? ReadMachineCpu() : MachineCpu{};
        std::vector<double> own = {OwnCpuTicks() - own0};
        group.Sum(own);
        times[samples] = s.ok() ? 0.0 : 1.0;
        group.Max(times);
        if (times[samples] != 0) {
          if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
          if (leader) {
            std::printf("FAILED: %s on %s during the samples\n", impl.name.c_str(),
                        Bytes(bytes).c_str());
          }
          return 1;
        }
        times.pop_back();
        std::sort(times.begin(), times.end());
        const double m = samples % 2 == 1 ? times[samples / 2]
                                          : 0.5 * (times[samples / 2 - 1] + times[samples / 2]);
        // The share of the machine's cores that other processes used during the samples; the
        // kernel counts in ticks (10 ms), so a window of fewer than kMinTicks says nothing
        // (-1: unknown, never measured again).
        constexpr double kMinTicks = 40;
        std::vector<double> o = {
            !leader ? -2.0  // below anything rank 0 says: the maximum is its figure
            : m1.total - m0.total < kMinTicks
                ? -1.0
                : std::clamp((m1.busy - m0.busy - own[0]) / (m1.total - m0.total), 0.0, 1.0)};
        group.Max(o);
        if (o[0] < other) {
          other = o[0];
          median = m;
        }
        if (other <= settings.max_other) break;
      }
      op = nullptr;     // releases the algorithm's buffers
      group.Barrier();  // before anyone prepares the next
      rows.push_back({bytes, impl.name, impl.family, median, samples, batch, other});
      // An implementation far slower than the rest would take the run past any reasonable
      // length at the larger sizes (its figures there add nothing): drop it from them. Every
      // rank decides alike, on the same medians.
      const bool drop = fastest > 0 && median > kDropSeconds && median > kDropFactor * fastest;
      if (drop) dropped.insert(impl.name);
      fastest = fastest == 0 ? median : std::min(fastest, median);
      if (leader) {
        const double algbw = bytes / median / 1e9;
        std::printf("%8s  %-22s %12s %10.3f %10.3f %7d x %-5d %6s%s\n", Bytes(bytes).c_str(),
                    impl.name.c_str(), Time(median).c_str(), algbw, algbw * bus, samples, batch,
                    other < 0 ? std::string("    ?").c_str()
                              : absl::StrFormat("%5.0f%%", 100 * other).c_str(),
                    other > settings.max_other ? " (busy machine)" : "");
        if (drop) {
          std::printf("%8s  %-22s dropped from the larger sizes: over %.0fx the fastest here\n", "",
                      impl.name.c_str(), kDropFactor);
        }
        std::fflush(stdout);
      }
    }
  }

  if (leader) {
    // Per size: the best of each family, and Syncline against the better of Gloo and MPI.
    std::printf(
        "\nSummary, N=%d (ratio = time of the better of Gloo and MPI / Syncline's; "
        ">= 1 is at par or faster)\n",
        n);
    std::printf("%8s  %-26s %-38s %-32s %-22s %9s %9s %9s %-20s\n", "bytes", "zmq: ring / doubling",
                "tcp: ring / doubling / halving", "best Gloo", "MPI", "zmq best", "tcp ring",
                "tcp best", "tcp auto (choice)");
    std::map<size_t, std::vector<const Row*>> by_size;
    for (const Row& r : rows) by_size[r.bytes].push_back(&r);
    for (const auto& [bytes, list] : by_size) {
      const Row *ring = nullptr, *doubling = nullptr, *gloo = nullptr, *mpi = nullptr;
      const Row *tcp_ring = nullptr, *tcp_doubling = nullptr, *tcp_halving = nullptr;
      for (const Row* r : list) {
        if (r->impl == "syncline-ring") ring = r;
        if (r->impl == "syncline-doubling") doubling = r;
        if (r->impl == "syncline-tcp-ring") tcp_ring = r;
        if (r->impl == "syncline-tcp-doubling") tcp_doubling = r;
        if (r->impl == "syncline-tcp-halving") tcp_halving = r;
        if (r->family == "gloo" && (gloo == nullptr || r->seconds < gloo->seconds)) gloo = r;
        if (r->family == "mpi") mpi = r;
      }
      const Row* base = gloo;
      if (mpi != nullptr && (base == nullptr || mpi->seconds < base->seconds)) base = mpi;
      auto t = [](const Row* r) { return r == nullptr ? std::string("-") : Time(r->seconds); };
      auto ratio = [&](const Row* r) {
        if (r == nullptr || base == nullptr) return std::string("-");
        return absl::StrFormat("%.2f", base->seconds / r->seconds);
      };
      auto faster = [](const Row* a, const Row* b) {
        return a == nullptr || (b != nullptr && b->seconds < a->seconds) ? b : a;
      };
      // What kAuto would take at this size, and its time (from that algorithm's row).
      const Algorithm choice = syncline_tcp.communicator().Choose(bytes);
      const Row* tcp_auto = choice == Algorithm::kRecursiveDoubling ? tcp_doubling
                            : choice == Algorithm::kHalvingDoubling ? tcp_halving
                                                                    : tcp_ring;
      std::printf(
          "%8s  %-26s %-38s %-32s %-22s %9s %9s %9s %-20s\n", Bytes(bytes).c_str(),
          absl::StrCat(t(ring), " / ", t(doubling)).c_str(),
          absl::StrCat(t(tcp_ring), " / ", t(tcp_doubling), " / ", t(tcp_halving)).c_str(),
          gloo == nullptr ? "-" : absl::StrCat(t(gloo), " (", gloo->impl.substr(5), ")").c_str(),
          t(mpi).c_str(), ratio(faster(ring, doubling)).c_str(), ratio(tcp_ring).c_str(),
          ratio(faster(faster(tcp_ring, tcp_doubling), tcp_halving)).c_str(),
          absl::StrCat(ratio(tcp_auto), " (", AlgorithmName(choice), ")").c_str());
    }
    std::printf("(small-message latency vs MPI: see the 4K row, MPI time / Syncline's best)\n");
    KeyedSummary(rows, sealed.seal_with_aes);
    if (syncline.dropped() != 0) {
      std::printf("note: rank 0's communicator dropped %llu stray messages\n",
                  static_cast<unsigned long long>(syncline.dropped()));
    }
    std::fflush(stdout);
  }
  group.Barrier();
  return 0;
}

bool UnderMpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

[[maybe_unused]] std::string MakeGlooDir() {
  char templ[] = "/tmp/syncline-bench-gloo-XXXXXX";
  const char* dir = mkdtemp(templ);
  return dir != nullptr ? std::string(dir) : std::string();
}

int Main(int argc, char** argv) {
  CLI::App app{"syncline-bench-allreduce: all-reduce of Syncline beside Gloo and MPI"};
  Settings settings;
  int np = 2;
  size_t min_kib = 4, max_mib = 256;
  std::string impls;
  app.add_option("--np", np, "processes to fork when not started under mpirun")
      ->check(CLI::Range(1, ForkGroup::kMaxRanks));
  app.add_option("--min-kib", min_kib, "smallest buffer, KiB")->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-mib", max_mib, "largest buffer, MiB (sizes step by --factor)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--factor", settings.factor, "size step")->check(CLI::Range(2, 1024));
  app.add_option("--impls", impls,
                 "comma-separated: syncline-ring, syncline-doubling, syncline-halving (and "
                 "syncline-tcp-*, syncline-sealed-*, syncline-curve-* of each), gloo-ring, "
                 "gloo-ring-chunked, gloo-halving-doubling, gloo-allreduce, mpi (default: all "
                 "available)");
  app.add_option("--sample-ms", settings.sample_ms, "small ops are batched up to this per sample")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--budget-s", settings.budget_s, "per size and implementation")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--max-samples", settings.max_samples)->check(CLI::Range(1, 1000));
  app.add_option("--min-samples", settings.min_samples)->check(CLI::Range(1, 1000));
  app.add_option("--timeout-s", settings.timeout_s, "one op's timeout (Syncline, Gloo)")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option(
         "--spin-us", settings.spin_us,
         "TcpTransport: poll without sleeping (yielding the core) this long before sleeping in a "
         "receive; the default is the product's")
      ->check(CLI::Range(0.0, 1e6));
  app.add_flag("--no-aes", settings.no_aes,
               "seal the keyed TCP plane with XChaCha20-Poly1305 even where AES-GCM runs");
  app.add_option("--io-threads", settings.io_threads, "ZeroMQ I/O threads per Syncline rank")
      ->check(CLI::Range(1, 16));
  app.add_option("--retries", settings.retries,
                 "re-measure a figure taken while other processes used more than --max-other")
      ->check(CLI::Range(0, 100));
  app.add_option("--max-other", settings.max_other,
                 "share of the machine's cores other processes may use during a figure")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--quick", settings.quick, "4 KiB and 1 MiB, one sample each (a smoke run)");
  if (auto code = ParseCommandLine(app, argc, argv, "syncline-bench-allreduce")) return *code;
  settings.min_bytes = min_kib * kKiB;
  settings.max_bytes = max_mib * kMiB;
  if (settings.min_samples > settings.max_samples) settings.max_samples = settings.min_samples;
  if (!impls.empty()) settings.impls = absl::StrSplit(impls, ',', absl::SkipEmpty());
  if (settings.quick) {
    settings.min_bytes = 4 * kKiB;
    settings.max_bytes = 1 * kMiB;
    settings.factor = 256;
    settings.min_samples = settings.max_samples = 1;
    settings.sample_ms = 1;
  }

  if (UnderMpirun()) {
#if defined(SYNCLINE_BENCH_HAVE_MPI)
    MPI_Init(&argc, &argv);
    int code = 0;
    {
      MpiGroup group;
      std::string gloo_dir;
#if defined(SYNCLINE_BENCH_HAVE_GLOO)
      gloo_dir = group.AllGather(group.rank() == 0 ? MakeGlooDir() : std::string())[0];
      if (gloo_dir.empty()) {
        std::cerr << "syncline-bench-allreduce: cannot make a folder for Gloo's rendezvous\n";
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
#endif
      code = Run(group, settings, gloo_dir, "mpirun");
      std::vector<double> worst = {static_cast<double>(code)};
      group.Max(worst);
      code = static_cast<int>(worst[0]);
      if (group.rank() == 0 && !gloo_dir.empty()) std::filesystem::remove_all(gloo_dir);
    }
    std::fflush(stdout);
    // A failed rank's peers may still wait on it: abort the job instead of hanging in
    // MPI_Finalize.
    if (code != 0) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Finalize();
    return code;
#else
    std::cerr << "syncline-bench-allreduce: started under mpirun but not built with MPI; "
                 "run it alone with --np N instead\n";
    return 2;
#endif
  }

  // Forked ranks. Nothing here has started a thread yet, so fork is safe.
  ForkGroup::Shared* shared = ForkGroup::Create(np);
  if (shared == nullptr) {
    std::perror("syncline-bench-allreduce: mmap");
    return 1;
  }
  std::string gloo_dir;
#if defined(SYNCLINE_BENCH_HAVE_GLOO)
  gloo_dir = MakeGlooDir();
  if (gloo_dir.empty()) {
    std::perror("syncline-bench-allreduce: mkdtemp");
    return 1;
  }
#endif
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int r = 0; r < np; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("syncline-bench-allreduce: fork");
      for (pid_t c : children) kill(c, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      ForkGroup group(shared, r, np);
      const int code = Run(group, settings, gloo_dir, absl::StrCat("forked with --np ", np));
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(code);
    }
    children.push_back(pid);
  }
  int code = 0;
  for (size_t left = children.size(); left > 0; --left) {
    int status = 0;
    const pid_t pid = wait(&status);
    if (pid < 0) break;
    const int child = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (child != 0 && code == 0) {
      code = child;
      // The others would wait for it in a barrier forever.
      for (pid_t c : children) {
        if (c != pid) kill(c, SIGKILL);
      }
    }
  }
  if (!gloo_dir.empty()) std::filesystem::remove_all(gloo_dir);
  return code;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
