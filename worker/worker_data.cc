#include "worker/worker_data.h"

#include <algorithm>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "data/criteo.h"
#include "data/partition.h"
#include "data/prefetching_source.h"
#include "job/federated.h"
#include "job/options.h"
#include "models/metrics.h"
#include "worker/attack.h"
#include "worker/trainer.h"

namespace syncline {
namespace {

// Writes the parameters of `keys` and the bias, one key per line, for comparing runs.
absl::Status DumpParameters(const std::string& path, std::span<const uint64_t> keys,
                            std::span<const float> rows, std::span<const float> bias, int row_dim) {
  std::ofstream out(path);
  if (!out) return absl::PermissionDeniedError(absl::StrFormat("cannot write %s", path));
  out.precision(9);
  out << "bias";
  for (float b : bias) out << '\t' << b;
  out << '\n';
  for (size_t i = 0; i < keys.size(); ++i) {
    out << keys[i];
    for (int j = 0; j < row_dim; ++j) out << '\t' << rows[i * row_dim + j];
    out << '\n';
  }
  return out.good() ? absl::OkStatus()
                    : absl::DataLossError(absl::StrFormat("write to %s failed", path));
}

absl::StatusOr<std::unique_ptr<CriteoReader>> OpenCriteo(const std::string& path, int partition,
                                                         int partitions) {
  CriteoOptions options;
  options.partition = partition;
  options.num_partitions = partitions;
  return CriteoReader::Open(path, options);
}

// Criteo files are streamed; their hashed ids have no bound, which dense rows need.
absl::Status OpenCriteoData(const JobSpec& spec, int rank, bool hand_over, WorkerData& d) {
  auto train = OpenCriteo(spec.data.train, rank, spec.workers);
  if (!train.ok()) return train.status();
  // Parse the next batches while training on this one (or scoring, for the test set), on
  // several threads where the machine has the cores: a GPU worker's step is shorter than one
  // core's parsing of its batch. A quarter of the hardware threads (a machine may run several
  // nodes), 1 to 4.
  const int parsers = std::clamp(static_cast<int>(std::thread::hardware_concurrency() / 4), 1, 4);
  if (!spec.data.test.empty() && !hand_over) {
    auto test = OpenCriteo(spec.data.test, 0, 1);
    if (!test.ok()) return test.status();
    d.test_source = std::make_unique<PrefetchingSource>(std::move(*test), /*depth=*/4, parsers);
  }
  d.source = std::make_unique<PrefetchingSource>(std::move(*train), /*depth=*/4, parsers);
  if (!hand_over) {
    SYNCLINE_LOG(INFO) << absl::StrFormat("w%d parses its Criteo partition on %d thread%s", rank,
                                          parsers, parsers == 1 ? "" : "s");
  }
  return absl::OkStatus();
}

// By label: every worker has read the whole file and takes its part of the same split; worker
// 0 writes the split's label histograms where the job asks for them.
absl::Status TakeLabelPartition(const JobSpec& spec, int rank, bool hand_over, Dataset& train) {
  const PartitionSpec& partition = spec.data.partition;
  auto parts =
      PartitionByLabel(train.labels, spec.model.classes, spec.workers, partition, spec.seed);
  if (!parts.ok()) return parts.status();
  if (rank == 0 && !spec.data.histograms_out.empty() && !hand_over) {
    const std::string tsv =
        LabelHistogramsTsv(LabelHistograms(train.labels, spec.model.classes, *parts));
    std::ofstream out(spec.data.histograms_out, std::ios::trunc);
    out << tsv;
    if (!out) {
      return absl::PermissionDeniedError(
          absl::StrFormat("cannot write %s", spec.data.histograms_out));
    }
    SYNCLINE_LOG(INFO) << "label histograms (--partition " << PartitionName(partition) << ", seed "
                       << spec.seed << ") in " << spec.data.histograms_out;
  }
  Dataset mine = SelectExamples(train, (*parts)[rank]);
  train = std::move(mine);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerData>> ReadWorkerData(const JobSpec& spec, int rank,
                                                           bool hand_over) {
  auto data = std::make_unique<WorkerData>();
  WorkerData& d = *data;
  ReadOptions o;
  o.format = spec.data.format;
  o.index_base = spec.data.index_base;
  o.partition = rank;
  o.num_partitions = spec.workers;
  o.num_classes = spec.model.classes;
  d.criteo = ResolveFormat(spec.data.train, o.format) == DataFormat::kCriteo;
  if (d.criteo) {
    if (auto s = OpenCriteoData(spec, rank, hand_over, d); !s.ok()) return s;
    return data;
  }
  const bool strided = spec.data.partition.kind == PartitionKind::kStrided;
  if (!strided) {
    o.partition = 0;
    o.num_partitions = 1;
  }
  auto train = ReadDataset(spec.data.train, o);
  if (!train.ok()) return train.status();
  d.train = std::move(*train);
  if (!strided) {
    if (auto s = TakeLabelPartition(spec, rank, hand_over, d.train); !s.ok()) return s;
  }
  if (IsByzantine(spec.byzantine, rank) && spec.byzantine.attack.kind == AttackKind::kLabelFlip &&
      !hand_over) {
    FlipLabels(d.train, spec.model.classes);
    SYNCLINE_LOG(WARNING) << "byzantine worker: training on flipped labels (--byzantine "
                          << ByzantineName(spec.byzantine) << ")";
  }
  if (!spec.data.test.empty() && !hand_over) {
    ReadOptions t = o;
    t.partition = 0;
    t.num_partitions = 1;
    t.index_base = d.train.index_base;  // number the test set's features as the train set's
    auto test = ReadDataset(spec.data.test, t);
    if (!test.ok()) return test.status();
    d.test = std::move(*test);
  }
  d.source = std::make_unique<InMemorySource>(d.train);
  return data;
}

absl::StatusOr<EvaluationReport> EvaluateModel(const JobSpec& spec, const Model& model,
                                               const ParameterLayout& layout, SyncBackend& backend,
                                               WorkerData& data, bool write_params) {
  Evaluation eval;
  if (data.test_source != nullptr) {
    // Streamed: the test file need not fit in memory, so no parameters are written.
    auto e = EvaluateSource(model, backend, *data.test_source);
    if (!e.ok()) return e.status();
    eval = *e;
  } else if (data.test.size() > 0) {
    std::vector<uint32_t> all(data.test.size());
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    std::vector<uint64_t> keys = UniqueKeys(data.test, all);
    if (layout.num_features > 0) {
      // The training file bounds the model's features (its tables have no rows past them):
      // a test feature it never had counts as a zero row, as a feature no example trained.
      const size_t seen = keys.size();
      std::erase_if(keys, [&](uint64_t k) { return k >= layout.num_features; });
      if (keys.size() < seen) {
        SYNCLINE_LOG(INFO) << absl::StrFormat(
            "%s: %d feature%s past the training file's %d count as zero weights", spec.data.test,
            seen - keys.size(), seen - keys.size() == 1 ? "" : "s", layout.num_features);
      }
    }
    std::vector<float> rows(keys.size() * model.row_dim());
    std::vector<float> bias(model.bias_dim());
    if (auto s = backend.Read(-1, keys, rows, bias); !s.ok()) return s;
    eval = Evaluate(model, data.test, keys, rows, bias);
    if (write_params && !spec.data.params_out.empty()) {
      if (auto s = DumpParameters(spec.data.params_out, keys, rows, bias, model.row_dim());
          !s.ok()) {
        return s;
      }
    }
  }
  return EvaluationReport{.loss = eval.loss,
                          .auc = model.binary() ? eval.auc : -1,
                          .accuracy = eval.accuracy,
                          .examples = eval.examples};
}

}  // namespace syncline
