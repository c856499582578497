// syncline._native: the worker session (include/syncline/worker_session.h) for Python.
//
// Arrays cross as buffers (the buffer protocol: numpy arrays, or CPU torch tensors through
// tensor.numpy(), which shares their memory), so the module links no libtorch and works with any
// torch version. A push reads the caller's contiguous float32 buffer in place and a pull writes
// into the caller's buffer: no copies. The buffers of a request are kept alive (the module holds
// a view of each) until its ticket is waited for. Every call that waits or touches the network
// releases the GIL.
//
// Errors: a non-OK absl::Status raises an exception of syncline.Error's family, one class per
// status code, with the status's message (the server's, when a server refused); a wrong dtype,
// size or layout of an argument raises TypeError or ValueError naming the argument.
//
// Thread-safety: a Session is thread-compatible, like the C++ session: one thread at a time.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/table_config.h"
#include "job/node_join.h"
#include "job/options.h"
#include "job/world.h"
#include "python/native/buffers.h"
#include "python/native/errors.h"
#include "python/native/peers.h"
#include "syncline/worker_session.h"

namespace py = pybind11;

namespace syncline::python {
namespace {

absl::Time Deadline(double seconds) {
  if (!(seconds >= 0)) throw py::value_error(absl::StrCat("timeout must be >= 0, not ", seconds));
  return std::isinf(seconds) ? absl::InfiniteFuture() : absl::Now() + absl::Seconds(seconds);
}

absl::StatusOr<OptimizerKind> OptimizerOf(const std::string& name) { return ParseOptimizer(name); }

// The job as a dict of plain values.
py::dict SpecDict(const JobSpec& spec) {
  py::dict d;
  d["sync"] = SyncModeName(spec.sync);
  d["servers"] = spec.servers;
  d["workers"] = spec.workers;
  d["staleness"] = spec.sync.kind == SyncKind::kAsp ? -1 : spec.sync.staleness;
  d["seed"] = spec.seed;
  d["epochs"] = spec.training.epochs;
  d["batch_size"] = spec.training.batch_size;
  d["optimizer"] = OptimizerName(spec.training.optimizer);
  d["lr"] = spec.training.learning_rate;
  d["l2"] = spec.training.l2;
  d["compress"] = CodecName(spec.training.codec);
  d["compress_pull"] = CodecName(spec.training.pull_codec);
  d["log_every"] = spec.training.log_every;
  d["read_ahead"] = spec.training.read_ahead;
  d["train"] = spec.data.train;
  d["test"] = spec.data.test;
  d["embedding_dim"] = spec.model.embedding_dim;
  d["checkpoint_every"] = spec.checkpoint.every;
  d["request_timeout"] = spec.timeouts.request_s;
  return d;
}

// How syncline-launch (or a cluster launcher) told this process to join: SYNCLINE_COORDINATOR,
// SYNCLINE_RANK (else a cluster launcher's world rank: Open MPI's, PMI's, Slurm's), and the
// other SYNCLINE_* settings, as syncline-worker reads them. `rank` is None when none is set.
py::dict Environment() {
  NodeOptions node;
  Check(NodeOptionsFromEnvironment(&node));
  py::dict d;
  d["coordinator"] = node.coordinator;
  d["bind"] = node.bind;
  d["interface"] = node.interface;
  d["port_range"] =
      node.ports.any() ? std::string() : absl::StrCat(node.ports.first, "-", node.ports.last);
  d["key_file"] = node.key_file;
  d["insecure"] = node.insecure;
  d["startup_timeout"] = absl::ToDoubleSeconds(node.startup_timeout);
  d["world_size"] = node.world_size;
  d["metrics_port"] = node.metrics_port;
  d["rank"] = py::none();
  d["rank_source"] = py::none();
  if (const char* r = std::getenv("SYNCLINE_RANK"); r != nullptr && *r != '\0') {
    d["rank"] = node.rank;
    d["rank_source"] = "SYNCLINE_RANK";
  } else {
    std::optional<WorldRank> world = Unwrap(WorldRankFromEnvironment());
    if (world.has_value()) {
      d["rank"] = world->rank;
      d["rank_source"] = world->source;
    }
  }
  return d;
}

// The values a sparse row of a table starts from on every server (core/table_config.h's
// InitialRow): for comparing a model with a plain PyTorch one that starts alike.
void InitialRows(uint32_t table, uint32_t dim, float init_scale, uint64_t seed, py::handle keys,
                 py::handle out) {
  Borrowed k = Keys(keys, "keys");
  Borrowed o = Floats(out, "out", /*writable=*/true);
  if (o.size() != k.size() * dim) {
    throw py::value_error(absl::StrCat("out: ", o.size(), " floats for ", k.size(), " keys of dim ",
                                       dim, " must be ", k.size() * dim));
  }
  TableConfig config;
  config.id = table;
  config.dim = dim;
  config.init_scale = init_scale;
  config.seed = seed;
  std::span<float> rows = o.mutable_floats();
  for (size_t i = 0; i < k.size(); ++i) InitialRow(config, k.keys()[i], rows.data() + i * dim);
}

// The MurmurHash3 finaliser: a bijection of 64-bit values (syncline/torch.py's _mix).
inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

// A batch's ids as the table's keys: the distinct keys (in ascending order when `sorted`, as a
// compressed pull needs them; else in the order they first occur) and, per id, the position of
// its key. An unbounded
// module's key is Mix(id ^ salt); a bounded one's (bound > 0) is the id itself, which must be
// in [0, bound). One pass with a hash map, then a sort of the distinct keys: the glue of a
// step, kept out of Python.
py::tuple UniqueKeys(py::handle ids, uint64_t salt, int64_t bound, const std::string& name,
                     bool sorted) {
  Borrowed b = Keys(ids, "ids");
  const std::span<const uint64_t> in = b.keys();
  const size_t n = in.size();
  py::array_t<int64_t> inverse(static_cast<py::ssize_t>(n));
  std::vector<uint64_t> keys;
  int64_t bad = -1;
  if (!sorted) {
    // The keys in the order they first occur: one pass with a hash map.
    py::gil_scoped_release release;
    absl::flat_hash_map<uint64_t, int64_t> slot;
    slot.reserve(n);
    int64_t* inv = inverse.mutable_data();
    for (size_t i = 0; i < n && bad < 0; ++i) {
      const uint64_t id = in[i];
      if (bound > 0 && id >= static_cast<uint64_t>(bound)) {
        bad = static_cast<int64_t>(id);
        break;
      }
      const uint64_t key = bound > 0 ? id : Mix(id ^ salt);
      auto [it, added] = slot.try_emplace(key, static_cast<int64_t>(keys.size()));
      if (added) keys.push_back(key);
      inv[i] = it->second;
    }
  } else {
    py::gil_scoped_release release;
    // (key, position) pairs sorted by key with an LSD radix sort of 11-bit digits (a pass is
    // skipped where every key has the same digit), then the runs of equal keys numbered.
    struct Pair {
      uint64_t key;
      uint64_t at;
    };
    std::vector<Pair> pairs(n), spare(n);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t id = in[i];
      if (bound > 0 && id >= static_cast<uint64_t>(bound)) {
        bad = static_cast<int64_t>(id);
        break;
      }
      pairs[i] = {bound > 0 ? id : Mix(id ^ salt), i};
    }
    if (bad < 0) {
      constexpr int kBits = 11;
      constexpr size_t kBuckets = size_t{1} << kBits;
      std::vector<uint32_t> count(kBuckets);
      for (int shift = 0; shift < 64; shift += kBits) {
        std::fill(count.begin(), count.end(), 0);
        for (const Pair& p : pairs) ++count[(p.key >> shift) & (kBuckets - 1)];
        if (count[(pairs.empty() ? 0 : pairs[0].key >> shift) & (kBuckets - 1)] == n) continue;
        uint32_t sum = 0;
        for (uint32_t& c : count) sum += std::exchange(c, sum);
        for (const Pair& p : pairs) spare[count[(p.key >> shift) & (kBuckets - 1)]++] = p;
        pairs.swap(spare);
      }
      int64_t* inv = inverse.mutable_data();
      for (const Pair& p : pairs) {
        if (keys.empty() || keys.back() != p.key) keys.push_back(p.key);
        inv[p.at] = static_cast<int64_t>(keys.size()) - 1;
      }
    }
  }
  if (bad >= 0) {
    throw py::index_error(
        absl::StrCat("ids: id ", bad, " is out of range for '", name, "', num_embeddings=", bound));
  }
  py::array_t<uint64_t> keys_out(static_cast<py::ssize_t>(keys.size()), keys.data());
  return py::make_tuple(keys_out, inverse);
}

// Multiplies a float32 buffer by `factor` in place and returns -1, or, when a value is not
// finite (NaN or infinite, before or after), returns its index (the buffer is then not to be
// sent). What a step does to its gradients before they are pushed as sums of examples.
int64_t ScaleFinite(py::handle buffer, float factor) {
  Borrowed b = Floats(buffer, "buffer", /*writable=*/true);
  std::span<float> v = b.mutable_floats();
  py::gil_scoped_release release;
  bool finite = true;
  for (float& x : v) {
    x *= factor;
    finite &= std::isfinite(x);
  }
  if (finite) return -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

// A WorkerSession and the buffers its requests borrow.
class Session {
 public:
  static std::unique_ptr<Session> Join(const std::string& coordinator, int rank,
                                       const std::string& bind, const std::string& interface,
                                       const std::string& port_range, int world_size,
                                       double startup_timeout, const std::string& key_file,
                                       bool insecure, int metrics_port) {
    if (!(startup_timeout > 0)) {
      throw py::value_error(absl::StrCat("startup_timeout must be > 0, not ", startup_timeout));
    }
    SessionOptions o;
    o.coordinator = coordinator;
    o.rank = rank;
    o.bind = bind;
    o.interface = interface;
    o.port_range = port_range;
    o.world_size = world_size;
    o.startup_timeout = absl::Seconds(startup_timeout);
    o.key_file = key_file;
    o.insecure = insecure;
    o.metrics_port = metrics_port;
    o.peers = CommunicatorPeers();
    absl::StatusOr<std::unique_ptr<WorkerSession>> session;
    {
      py::gil_scoped_release release;
      session = WorkerSession::Join(o);
    }
    return std::make_unique<Session>(Unwrap(std::move(session)));
  }

  explicit Session(std::unique_ptr<WorkerSession> session) : session_(std::move(session)) {}

  int rank() const { return session_->rank(); }
  int64_t iteration() const { return session_->clock(); }
  py::dict spec() const { return SpecDict(session_->spec()); }
  bool finished() const { return finished_; }

  void DeclareTable(uint32_t id, bool dense, uint64_t num_keys, uint32_t dim,
                    const std::string& optimizer, float lr, float l2, float eps, float beta1,
                    float beta2, float init_scale, uint64_t seed, py::object initial,
                    bool await_initial, double timeout) {
    CheckOpen("declare_table");
    TableOptions t;
    t.id = id;
    t.dense = dense;
    t.num_keys = num_keys;
    t.dim = dim;
    t.optimizer = Unwrap(OptimizerOf(optimizer));
    t.learning_rate = lr;
    t.l2 = l2;
    t.epsilon = eps;
    t.beta1 = beta1;
    t.beta2 = beta2;
    t.init_scale = init_scale;
    t.seed = seed;
    const absl::Time deadline = Deadline(timeout);
    std::optional<Borrowed> values;
    if (!initial.is_none()) {
      values = Floats(initial, "initial", /*writable=*/false);
      if (values->size() != num_keys * dim) {
        throw py::value_error(absl::StrCat("initial: ", values->size(), " floats; table ", id,
                                           " needs num_keys x dim = ", num_keys * dim));
      }
    }
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = values.has_value() || await_initial
                   ? session_->DeclareTableFrom(
                         t, values ? values->floats() : std::span<const float>(), deadline)
                   : session_->DeclareTable(t, deadline);
    }
    Check(status);
    dims_[id] = dim;
  }

  uint64_t Push(uint32_t table, py::handle keys, py::handle values, float weight) {
    CheckOpen("push");
    Borrowed k = Keys(keys, "keys");
    Borrowed v = Floats(values, "values", /*writable=*/false);
    CheckRows(table, k, v, "values");
    absl::StatusOr<WorkerSession::Ticket> t;
    {
      py::gil_scoped_release release;
      t = session_->Push(table, k.keys(), v.floats(), weight);
    }
    return Keep(Unwrap(std::move(t)), std::move(k), std::move(v));
  }

  uint64_t Pull(uint32_t table, py::handle keys, py::handle out) {
    CheckOpen("pull");
    Borrowed k = Keys(keys, "keys");
    Borrowed o = Floats(out, "out", /*writable=*/true);
    CheckRows(table, k, o, "out");
    absl::StatusOr<WorkerSession::Ticket> t;
    {
      py::gil_scoped_release release;
      t = session_->Pull(table, k.keys(), o.mutable_floats());
    }
    return Keep(Unwrap(std::move(t)), std::move(k), std::move(o));
  }

  uint64_t PushPull(uint32_t table, py::handle keys, py::handle values, py::handle out,
                    float weight) {
    CheckOpen("push_pull");
    Borrowed k = Keys(keys, "keys");
    Borrowed v = Floats(values, "values", /*writable=*/false);
    Borrowed o = Floats(out, "out", /*writable=*/true);
    CheckRows(table, k, v, "values");
    CheckRows(table, k, o, "out");
    absl::StatusOr<WorkerSession::Ticket> t;
    {
      py::gil_scoped_release release;
      t = session_->PushPull(table, k.keys(), v.floats(), o.mutable_floats(), weight);
    }
    return Keep(Unwrap(std::move(t)), std::move(k), std::move(v), std::move(o));
  }

  uint64_t PushDense(uint32_t table, uint64_t begin, py::handle values, float weight) {
    CheckOpen("push_dense");
    Borrowed v = Floats(values, "values", /*writable=*/false);
    CheckDense(table, v, "values");
    absl::StatusOr<WorkerSession::Ticket> t;
    {
      py::gil_scoped_release release;
      t = session_->PushDense(table, begin, v.floats(), weight);
    }
    return Keep(Unwrap(std::move(t)), std::move(v));
  }

  uint64_t PullDense(uint32_t table, uint64_t begin, py::handle out) {
    CheckOpen("pull_dense");
    Borrowed o = Floats(out, "out", /*writable=*/true);
    CheckDense(table, o, "out");
    absl::StatusOr<WorkerSession::Ticket> t;
    {
      py::gil_scoped_release release;
      t = session_->PullDense(table, begin, o.mutable_floats());
    }
    return Keep(Unwrap(std::move(t)), std::move(o));
  }

  void Abort(const std::string& why) {
    if (finished_) return;
    {
      py::gil_scoped_release release;
      session_->Abort(absl::AbortedError(why));
    }
    finished_ = true;
    borrowed_.clear();
  }

  // Collectives among the workers (all-reduce and hybrid jobs).
  void AllReduce(py::handle data, const std::string& op, bool compress, uint32_t residual) {
    CheckOpen("allreduce");
    if (op != "sum" && op != "mean") {
      throw py::value_error(absl::StrCat("op: '", op, "'; expected 'sum' or 'mean'"));
    }
    Borrowed d = Floats(data, "data", /*writable=*/true);
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = session_->AllReduce(d.mutable_floats(), compress, residual);
      if (status.ok() && op == "mean") {
        const float inv = 1.0f / static_cast<float>(session_->spec().workers);
        for (float& x : d.mutable_floats()) x *= inv;
      }
    }
    Check(status);
  }

  void Broadcast(py::handle data, int root) {
    CheckOpen("broadcast");
    Borrowed d = Floats(data, "data", /*writable=*/true);
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = session_->Broadcast(d.mutable_floats(), root);
    }
    Check(status);
  }

  // `save()` returns bytes: this worker's part of each checkpoint. Called, with the GIL, from
  // clock(); an exception it raises is kept and raised again from clock().
  void SetCheckpointState(py::object save) {
    CheckOpen("set_checkpoint_state");
    if (save.is_none()) {
      session_->SetCheckpointState(nullptr);
      return;
    }
    session_->SetCheckpointState([this, save]() -> absl::StatusOr<std::string> {
      py::gil_scoped_acquire acquire;
      try {
        py::object state = save();
        if (!py::isinstance<py::bytes>(state)) {
          return absl::InvalidArgumentError("the checkpoint's save() must return bytes");
        }
        return std::string(state.cast<py::bytes>());
      } catch (py::error_already_set& e) {
        return absl::InternalError(absl::StrCat("the checkpoint's save() raised ", e.what()));
      }
    });
  }

  py::object RestoredState() const {
    const std::optional<std::string>& state = session_->restored_state();
    if (!state.has_value()) return py::none();
    return py::bytes(*state);
  }

  void Wait(uint64_t ticket, double timeout) {
    const absl::Time deadline = Deadline(timeout);
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = session_->Wait(ticket, deadline);
    }
    borrowed_.erase(ticket);  // with the GIL: releasing a buffer view may run Python code
    Check(status);
  }

  void Clock(double examples, double loss) {
    CheckOpen("clock");
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = session_->Clock(examples, loss);
    }
    Check(status);
  }

  void Finish(std::optional<py::function> evaluate, double timeout) {
    CheckOpen("finish");
    if (!(timeout >= 0)) throw py::value_error(absl::StrCat("timeout must be >= 0, not ", timeout));
    // An exception `evaluate` raises is kept, the job is told the worker failed, and the
    // exception is raised again, whole, when Finish returns.
    std::optional<py::error_already_set> raised;
    std::function<absl::StatusOr<EvaluationResult>()> eval;
    if (evaluate.has_value()) {
      eval = [&evaluate, &raised]() -> absl::StatusOr<EvaluationResult> {
        py::gil_scoped_acquire acquire;
        try {
          return Evaluation((*evaluate)());
        } catch (py::error_already_set& e) {
          raised.emplace(std::move(e));
          return absl::AbortedError(absl::StrCat("the evaluation raised ", raised->what()));
        }
      };
    }
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = session_->Finish(eval, absl::Seconds(timeout));
    }
    finished_ = true;
    borrowed_.clear();
    if (raised.has_value()) throw std::move(*raised);
    Check(status);
  }

 private:
  // A Python exception raised by `evaluate` is stored by pybind11 in error_already_set; it is
  // turned into a status here and raised again, whole, when Finish returns.
  static absl::StatusOr<EvaluationResult> Evaluation(py::object result) {
    if (!py::isinstance<py::dict>(result)) {
      return absl::InvalidArgumentError(
          "evaluate must return a dict of loss, auc or accuracy, and examples");
    }
    py::dict d = result.cast<py::dict>();
    EvaluationResult r;
    for (auto item : d) {
      const std::string key = py::str(item.first);
      const double value = py::cast<double>(item.second);
      if (key == "loss") {
        r.loss = value;
      } else if (key == "auc") {
        r.auc = value;
      } else if (key == "accuracy") {
        r.accuracy = value;
      } else if (key == "examples") {
        r.examples = static_cast<uint64_t>(value);
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "evaluate returned the key '", key, "': expected loss, auc, accuracy, examples"));
      }
    }
    return r;
  }

  void CheckOpen(const char* call) const {
    if (finished_) {
      Raise(absl::FailedPreconditionError(
          absl::StrCat(call, "() after finish(): the worker has left the job")));
    }
  }

  // The row width of a declared table (0 for an undeclared one, which the session refuses).
  uint32_t DimOf(uint32_t table) const {
    auto it = dims_.find(table);
    return it == dims_.end() ? 0 : it->second;
  }
  void CheckRows(uint32_t table, const Borrowed& keys, const Borrowed& rows,
                 const char* name) const {
    const uint32_t dim = DimOf(table);
    if (dim != 0 && rows.size() != keys.size() * dim) {
      throw py::value_error(absl::StrCat(name, ": ", rows.size(), " floats for ", keys.size(),
                                         " keys of table ", table, " (dim ", dim, ") must be ",
                                         keys.size() * dim));
    }
  }
  void CheckDense(uint32_t table, const Borrowed& values, const char* name) const {
    const uint32_t dim = DimOf(table);
    if (dim != 0 && values.size() % dim != 0) {
      throw py::value_error(absl::StrCat(name, ": ", values.size(),
                                         " floats are not whole rows of table ", table, " (dim ",
                                         dim, ")"));
    }
  }

  template <typename... B>
  uint64_t Keep(uint64_t ticket, B&&... buffers) {
    std::vector<Borrowed>& kept = borrowed_[ticket];
    (kept.push_back(std::forward<B>(buffers)), ...);
    return ticket;
  }

  std::unique_ptr<WorkerSession> session_;
  bool finished_ = false;
  absl::flat_hash_map<uint32_t, uint32_t> dims_;  // declared tables' row widths
  // Per pending ticket, the views of the buffers its requests read or write.
  absl::flat_hash_map<uint64_t, std::vector<Borrowed>> borrowed_;
};

}  // namespace
}  // namespace syncline::python

PYBIND11_MODULE(_native, m) {
  using syncline::python::Session;
  m.doc() =
      "Syncline's worker session for Python (no libtorch: arrays cross as buffers). "
      "Use syncline.torch for PyTorch models.";
  syncline::python::RegisterErrors(m);
  m.def("unique_keys", &syncline::python::UniqueKeys, py::arg("ids"), py::arg("salt"),
        py::arg("bound"), py::arg("name"), py::arg("sorted") = true,
        "(keys, inverse): a batch's ids as a table's distinct keys (ascending when `sorted`, "
        "else in the order they first occur) and each id's position among them.");
  m.def("scale_finite", &syncline::python::ScaleFinite, py::arg("buffer"), py::arg("factor"),
        "Multiplies a float32 buffer in place; -1, or the index of a value that is not finite.");
  m.def("initial_rows", &syncline::python::InitialRows, py::arg("table"), py::arg("dim"),
        py::arg("init_scale"), py::arg("seed"), py::arg("keys"), py::arg("out"),
        "Writes into `out` the values the sparse rows `keys` of a table start from.");
  m.def("environment", &syncline::python::Environment,
        "How the launcher told this process to join (SYNCLINE_COORDINATOR, SYNCLINE_RANK or a "
        "cluster launcher's rank, SYNCLINE_KEY_FILE, ...), as a dict; rank is None if unset.");
  py::class_<Session>(m, "Session",
                      "A worker of a running Syncline job: tables on the parameter servers, "
                      "pushes and pulls by ticket, iterations, and the end of the worker.")
      .def_static("join", &Session::Join, py::arg("coordinator"), py::arg("rank"),
                  py::arg("bind") = "", py::arg("interface") = "", py::arg("port_range") = "",
                  py::arg("world_size") = 0, py::arg("startup_timeout") = 120.0,
                  py::arg("key_file") = "", py::arg("insecure") = false,
                  py::arg("metrics_port") = -1,
                  "Joins the job whose coordinator is at `coordinator` as worker `rank`, and "
                  "waits until every node has joined and the job starts.")
      .def_property_readonly("rank", &Session::rank)
      .def_property_readonly("iteration", &Session::iteration,
                             "Iterations this worker has ended with clock().")
      .def_property_readonly("spec", &Session::spec, "The job's settings, as a dict.")
      .def_property_readonly("finished", &Session::finished)
      .def_property_readonly("restored_state", &Session::RestoredState,
                             "What this worker saved in the checkpoint the job resumed from "
                             "(bytes), or None.")
      .def("set_checkpoint_state", &Session::SetCheckpointState, py::arg("save"),
           "save() -> bytes: this worker's own state, written as its part of each checkpoint "
           "(--checkpoint-every) at the clock it is taken; None: the clock alone.")
      .def("declare_table", &Session::DeclareTable, py::arg("id"), py::arg("dense"),
           py::arg("num_keys"), py::arg("dim"), py::arg("optimizer") = "sgd", py::arg("lr") = 0.1f,
           py::arg("l2") = 0.0f, py::arg("eps") = 1e-8f, py::arg("beta1") = 0.9f,
           py::arg("beta2") = 0.999f, py::arg("init_scale") = 0.0f, py::arg("seed") = 1,
           py::arg("initial") = py::none(), py::arg("await_initial") = false,
           py::arg("timeout") = 60.0,
           "Declares a table on every server (every worker declares the same tables). A dense "
           "table may start from `initial` (num_keys * dim float32) held by one worker, while "
           "the others pass await_initial=True and wait for it; a table that exists already "
           "(a resumed job) keeps its values.")
      .def("push", &Session::Push, py::arg("table"), py::arg("keys"), py::arg("values"),
           py::arg("weight"),
           "Pushes gradient sums of sparse rows (int64/uint64 keys; float32 values of "
           "len(keys) * dim) behind `weight` examples. Returns a ticket.")
      .def("pull", &Session::Pull, py::arg("table"), py::arg("keys"), py::arg("out"),
           "Pulls sparse rows into `out` (float32, len(keys) * dim). Returns a ticket.")
      .def("push_pull", &Session::PushPull, py::arg("table"), py::arg("keys"), py::arg("values"),
           py::arg("out"), py::arg("weight"))
      .def("push_dense", &Session::PushDense, py::arg("table"), py::arg("begin"), py::arg("values"),
           py::arg("weight"))
      .def("pull_dense", &Session::PullDense, py::arg("table"), py::arg("begin"), py::arg("out"))
      .def("wait", &Session::Wait, py::arg("ticket"), py::arg("timeout") = 60.0,
           "Completes a ticket; raises the first error a server answered, or "
           "DeadlineExceededError.")
      .def("clock", &Session::Clock, py::arg("examples"), py::arg("loss") = NAN,
           "Ends this worker's iteration, which trained `examples` examples with mean loss "
           "`loss` (for the job's progress and metrics).")
      .def("allreduce", &Session::AllReduce, py::arg("data"), py::arg("op") = "sum",
           py::arg("compress") = false, py::arg("residual") = 0,
           "Sums (op='sum') or averages (op='mean') a float32 buffer over every worker, in place, "
           "with the job's algorithm; compress=True: with the job's --compress codec (fp16, or "
           "top-K and sign1 with an error-feedback residual per `residual` id). All-reduce and "
           "hybrid jobs only.")
      .def("broadcast", &Session::Broadcast, py::arg("data"), py::arg("root") = 0,
           "Every worker's float32 buffer becomes worker `root`'s (all-reduce and hybrid jobs).")
      .def("abort", &Session::Abort, py::arg("why"),
           "Tells the job that this worker failed, and why (the job ends with that reason).")
      .def("finish", &Session::Finish, py::arg("evaluate") = py::none(), py::arg("timeout") = 600.0,
           "Leaves the job; `evaluate()` (a dict of loss, auc or accuracy, examples) runs when "
           "the coordinator asks for the final model's evaluation.");
}
