// DeviceModel: a Model whose steps run through a device_step executor E (device/device_step.h):
// the CUDA executor for GPU workers (device/cuda_model.h), the host executor in tests.
//
// A call packs the batch into pinned host memory, uploads it with the keys, the pulled rows and
// the dense table, runs the step there, downloads the gradients (ADDED into the caller's spans,
// as Model says) and the per-example losses (summed on the host in example order). BatchKeys
// finds the unique ids on the device (a radix sort and a unique pass), since the keys go to the
// servers before the rows come back. Given an encoder for a table (EncodeGradients: a backend
// that encodes dense gradients with error feedback), its gradients stay on the device (rows
// scattered by key into a dense gradient), the CUDA codecs encode them there, and only the
// blocks come down; given a row encoder (EncodeRows: parameter servers' sparse rows under top-K
// or sign1), each step's row gradients stay on the device, and so do the residual rows of the
// per-row error feedback (DeviceRowFeedback), so that a push brings down only what it sends.
// Its evaluator
// (NewEvaluator) keeps a test set's scores on the device and computes the metrics there, AUC
// included: only their sums come down.
//
// The shapes, initial scales and errors are the CPU reference model's, which it keeps: a device
// model trains the same model as the CPU one, to float rounding.
//
// Thread-safety: as Model; calls are serialised (one set of device buffers).
#ifndef SYNCLINE_DEVICE_DEVICE_MODEL_H_
#define SYNCLINE_DEVICE_DEVICE_MODEL_H_

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "data/criteo.h"
#include "device/device_step.h"
#include "device/pull_copy.h"
#include "device/row_feedback.h"
#include "models/ctr_model.h"
#include "models/example_metrics.h"
#include "models/mlp_model.h"
#include "models/model.h"
#include "models/model_internal.h"
#include "syncline/options.h"

namespace syncline {

// The device layout of a model made by Model::Create: logreg and softmax are one sparse layer,
// mlp its MlpLayout, ctr its CtrLayout. False for other models.
inline bool DeviceShapeOf(const Model& model, const ModelOptions& options,
                          device_step::Shape* shape) {
  if (model.name() == "logreg" || model.name() == "softmax") {
    *shape = device_step::Shape{.widths = {model.row_dim()},
                                .w = {0},
                                .b = {0},
                                .dense = static_cast<size_t>(model.bias_dim()),
                                .binary = model.binary()};
    return true;
  }
  if (model.name() == "mlp") {
    MlpLayout layout(options.hidden.empty() ? MlpDefaultHidden() : options.hidden,
                     model.num_classes());
    *shape = device_step::Shape{.widths = layout.widths,
                                .w = layout.w,
                                .b = layout.b,
                                .dense = layout.size,
                                .binary = false};
    return true;
  }
  if (model.name() == "ctr") {
    const CtrLayout layout(options.embedding_dim, options.hidden.empty()
                                                      ? DefaultHidden(ModelKind::kCtr)[0]
                                                      : options.hidden[0]);
    *shape = device_step::Shape{.widths = {model.row_dim()},
                                .w = {0},
                                .b = {0},
                                .dense = layout.size,
                                .binary = true,
                                .ctr_dim = layout.dim,
                                .ctr_hidden = layout.hidden,
                                .ctr_inputs = layout.inputs,
                                .bottom_w = layout.bottom_w,
                                .bottom_b = layout.bottom_b,
                                .top_w = layout.top_w,
                                .top_b = layout.top_b,
                                .out_w = layout.out_w,
                                .out_b = layout.out_b};
    return true;
  }
  return false;
}

template <class E>
class DeviceModel final : public Model {
 public:
  // prefetch: take the next batch early (WantsPrefetch), and stage it during the step before.
  DeviceModel(std::unique_ptr<Model> reference, device_step::Shape shape, E executor,
              bool prefetch = true)
      : reference_(std::move(reference)),
        shape_(std::move(shape)),
        prefetch_(prefetch),
        e_(std::move(executor)) {}

  std::string_view name() const override { return reference_->name(); }
  int row_dim() const override { return reference_->row_dim(); }
  int bias_dim() const override { return reference_->bias_dim(); }
  int num_classes() const override { return reference_->num_classes(); }
  bool binary() const override { return reference_->binary(); }
  float row_init_scale() const override { return reference_->row_init_scale(); }
  float bias_init_scale() const override { return reference_->bias_init_scale(); }

  std::vector<uint64_t> BatchKeys(const Dataset& data,
                                  absl::Span<const uint32_t> examples) const override {
    absl::MutexLock lock(&mu_);
    e_.Activate();
    if (Resident(data)) return ResidentBatchKeys(data, examples);
    // ctr: the categorical ids (the dense entries' are values, not keys).
    const size_t skip = ctr() ? kCriteoDenseFields : 0;
    const size_t nnz = BatchFeatures(data, examples);
    host_ids_.Reserve(nnz);
    uint64_t* ids = host_ids_.data();
    for (const uint32_t example : examples) {
      ids = std::copy(data.ids.begin() + data.row_offsets[example] + skip,
                      data.ids.begin() + data.row_offsets[example + 1], ids);
    }
    ids_.Reserve(nnz);
    unique_.Reserve(nnz);
    e_.Upload(ids_.data(), host_ids_.data(), nnz);
    e_.Fence();
    return UniqueIds(nnz);
  }

  double LossAndGradient(const Dataset& data, absl::Span<const uint32_t> examples,
                         absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                         absl::Span<const float> bias, absl::Span<float> row_grads,
                         absl::Span<float> bias_grad) const override {
    model_internal::CheckShapes(row_dim(), bias_dim(), keys, rows, bias, row_grads, bias_grad);
    absl::MutexLock lock(&mu_);
    e_.Activate();
    row_grads_.Reserve(rows.size());
    dense_grads_.Reserve(bias.size());
    // A read whose compressed replies were decoded here: its rows are here already.
    const float* pulled = pull_copy_ != nullptr ? pull_copy_->Take(rows) : nullptr;
    const float* step_rows = UploadStep(data, examples, keys, rows, bias, pulled);
    if (ctr()) {
      device_step::CtrLossAndGradient(e_, shape_, batch_, step_rows, dense_.data(), &ctr_,
                                      row_grads_.data(), dense_grads_.data());
    } else {
      device_step::LossAndGradient(e_, shape_, batch_, step_rows, dense_.data(), &act_,
                                   row_grads_.data(), dense_grads_.data());
    }
    StageNext();
    // Gradients kept for an encoder stay here (rows scattered by key into its dense gradient);
    // the others and the losses go down.
    KeptGradients* kept_rows = kept(GradientTable::kRows);
    KeptGradients* kept_dense = kept(GradientTable::kDense);
    // Row gradients kept by key (a row encoder's) stay in row_grads_ until the next step.
    const bool rows_stay = kept_rows != nullptr || row_encoder_ != nullptr;
    step_rows_ = row_encoder_ != nullptr ? keys.size() : 0;
    if (kept_rows != nullptr) {
      e_.ForEach(rows.size(), device_step::ScatterByKey{batch_.keys(), row_dim(), kept_rows->rows(),
                                                        row_grads_.data(), kept_rows->gradient()});
    }
    if (kept_dense != nullptr) {
      e_.ForEach(bias.size(), device_step::AddInto{dense_grads_.data(), kept_dense->gradient()});
    }
    host_grads_.Reserve(rows.size() + bias.size());
    host_loss_.Reserve(examples.size());
    e_.MarkDownloadsBegin();
    if (!rows_stay) e_.Download(host_grads_.data(), row_grads_.data(), rows.size());
    if (kept_dense == nullptr) {
      e_.Download(host_grads_.data() + rows.size(), dense_grads_.data(), bias.size());
    }
    e_.Download(host_loss_.data(), ctr() ? ctr_.loss.data() : act_.loss.data(), examples.size());
    e_.MarkDownloadsEnd();
    e_.Finish();
    upload_ += e_.UploadTime();
    download_ += e_.DownloadTime();
    const float* grads = host_grads_.data();
    if (!rows_stay) {
      for (size_t i = 0; i < rows.size(); ++i) row_grads[i] += grads[i];
    }
    if (kept_dense == nullptr) {
      for (size_t i = 0; i < bias.size(); ++i) bias_grad[i] += grads[rows.size() + i];
    }
    double loss = 0;
    for (size_t i = 0; i < examples.size(); ++i) loss += host_loss_.data()[i];
    return loss;
  }

  void Predict(const Dataset& data, absl::Span<const uint32_t> examples,
               absl::Span<const uint64_t> keys, absl::Span<const float> rows,
               absl::Span<const float> bias, std::vector<float>* scores) const override {
    model_internal::CheckShapes(row_dim(), bias_dim(), keys, rows, bias);
    absl::MutexLock lock(&mu_);
    e_.Activate();
    const float* device_scores = Score(data, examples, keys, rows, bias);
    scores->resize(examples.size() * (binary() ? 1 : shape_.outputs()));
    e_.Download(scores->data(), device_scores, scores->size());
    e_.Finish();
  }

  // Scores, loss, hits and the AUC stay on the device; only their sums come down.
  std::unique_ptr<ModelEvaluator> NewEvaluator() const override {
    return std::make_unique<Evaluator>(*this);
  }

  // Gradients encoded on the device (E::FeedbackEncoder: the CUDA codecs, or on the host
  // executor the CPU's). Null where the codec cannot be made here, or the sizes are not the
  // model's.
  GradientEncoder* EncodeGradients(const GradientCompression& want) const override {
    absl::MutexLock lock(&mu_);
    e_.Activate();
    std::unique_ptr<KeptGradients>& slot = encoders_[want.table == GradientTable::kRows ? 0 : 1];
    slot.reset();
    if (want.table == GradientTable::kRows) row_encoder_.reset();
    if (want.table == GradientTable::kDense ? want.floats != static_cast<size_t>(bias_dim())
                                            : want.floats % static_cast<size_t>(row_dim()) != 0) {
      return nullptr;
    }
    auto encoder = std::make_unique<KeptGradients>(*this, want);
    if (!encoder->Make()) return nullptr;
    slot = std::move(encoder);
    return slot.get();
  }

  // Sparse rows' error feedback on the device (DeviceRowFeedback on E). Null where a shard's
  // table cannot be made here (a codec other than topk or sign1, rows of another width).
  RowGradientEncoder* EncodeRows(const RowCompression& want) const override {
    absl::MutexLock lock(&mu_);
    e_.Activate();
    row_encoder_.reset();
    encoders_[0].reset();
    if (want.dim != static_cast<uint32_t>(row_dim()) || want.shards == 0) return nullptr;
    auto encoder = std::make_unique<KeptRows>(*this);
    for (size_t s = 0; s < want.shards; ++s) {
      auto made = DeviceRowFeedback<E>::Create(e_, want.codec, want.dim, want.residual_rows);
      if (!made.ok()) return nullptr;
      encoder->shards.push_back(std::move(*made));
    }
    row_encoder_ = std::move(encoder);
    return row_encoder_.get();
  }

  // The copy of compressed pulls' rows on the device (DevicePullCopy on E), and the reads'
  // rows decoded there. Null for rows of another width, or a codec that cannot be made here.
  PulledRowDecoder* DecodePulls(const PullDecoding& want) const override {
    absl::MutexLock lock(&mu_);
    e_.Activate();
    pull_copy_.reset();
    if (want.dim != static_cast<uint32_t>(row_dim())) return nullptr;
    auto made = DevicePullCopy<E>::Create(e_, want.codec, want.dim);
    if (!made.ok()) return nullptr;
    pull_copy_ = std::make_unique<PullCopy>(*this, std::move(*made));
    return pull_copy_.get();
  }
  // Rows of training reads decoded here so far (for tests).
  int64_t rows_decoded() const {
    absl::MutexLock lock(&mu_);
    return pull_copy_ != nullptr ? pull_copy_->rows_decoded() : 0;
  }

  // The dataset's features go up once (when they fit in half the device's free memory), and
  // a batch of it is gathered there: only its offsets, labels and example indices go up. Not
  // for ctr (its partitions are streamed). Null forgets it.
  bool KeepData(const Dataset* data) const override {
    absl::MutexLock lock(&mu_);
    e_.Activate();
    // No batch announced or staged from the data kept so far outlives it, nor does its copy
    // (freed before a new one is measured against the free memory).
    staged_.valid = false;
    announced_.valid = false;
    resident_host_ = nullptr;
    e_.Finish();
    resident_ = device_step::ResidentData<E>{};
    if (data == nullptr || ctr() || data->size() == 0) return false;
    if (device_step::ResidentData<E>::BytesFor(*data) > e_.FreeBytes() / 2) return false;
    if (data->ids.size() > 0xFFFFFFFFu) return false;  // a batch's offsets are 32-bit
    resident_.Upload(e_, *data);
    e_.Finish();
    resident_host_ = data;
    return true;
  }

  // Steps' batches (staged ones included; not BatchKeys) gathered from kept data so far (for
  // tests).
  int64_t batches_gathered() const {
    absl::MutexLock lock(&mu_);
    return batches_gathered_;
  }

  bool WantsPrefetch() const override { return prefetch_; }
  void Prefetch(const Dataset& data, absl::Span<const uint32_t> examples,
                absl::Span<const uint64_t> keys) const override {
    if (!prefetch_) return;
    absl::MutexLock lock(&mu_);
    announced_.valid = true;
    announced_.data = &data;
    announced_.examples.assign(examples.begin(), examples.end());
    announced_.keys.assign(keys.begin(), keys.end());
  }
  // Steps whose batch had been staged during the step before (for tests).
  int64_t prefetched() const {
    absl::MutexLock lock(&mu_);
    return prefetched_;
  }

  void StopEncoding() const override {
    absl::MutexLock lock(&mu_);
    e_.Activate();
    for (std::unique_ptr<KeptGradients>& encoder : encoders_) encoder.reset();
    row_encoder_.reset();
    pull_copy_.reset();
  }

  TransferTimes TakeTransferTimes() const override {
    absl::MutexLock lock(&mu_);
    return TransferTimes{.upload = std::exchange(upload_, absl::ZeroDuration()),
                         .download = std::exchange(download_, absl::ZeroDuration())};
  }

 private:
  class KeptGradients;
  KeptGradients* kept(GradientTable table) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return encoders_[table == GradientTable::kRows ? 0 : 1].get();
  }

  // A table's kept gradients (a dense gradient on the device) and each part's error feedback.
  class KeptGradients final : public GradientEncoder {
   public:
    KeptGradients(const DeviceModel& model, GradientCompression want)
        : model_(model), want_(std::move(want)) {
      if (want_.parts.empty()) want_.parts.push_back({0, want_.floats});
    }
    ~KeptGradients() override {
      // Destroyed with the model's lock held (EncodeGradients) or at the model's end.
      model_.e_.Activate();
    }
    // The device buffers and the parts' codecs; false where a codec cannot be made here.
    bool Make() ABSL_EXCLUSIVE_LOCKS_REQUIRED(model_.mu_) {
      gradient_.Reserve(want_.floats);
      model_.e_.Zero(gradient_.data(), want_.floats);
      for (const GradientCompression::Part& part : want_.parts) {
        if (part.begin > part.end || part.end > want_.floats) return false;
        if (part.size() == 0) {  // a shard without rows: it holds nothing and encodes nothing
          parts_.push_back(nullptr);
          continue;
        }
        // 32-bit top-K indices on the device: a larger part stays with the CPU path.
        if (want_.codec.kind == CodecKind::kTopK && part.size() >= (size_t{1} << 32)) return false;
        auto made = E::FeedbackEncoder::Create(model_.e_, want_.codec, part.size());
        if (!made.ok()) return false;
        parts_.push_back(std::move(*made));
      }
      model_.e_.Finish();
      return true;
    }

    absl::Status Compress(size_t part, std::vector<std::byte>* block) override {
      if (auto s = CheckPart(part); !s.ok()) return s;
      if (parts_[part] == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("part ", part, " of the gradient is empty: nothing to encode"));
      }
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      return parts_[part]->Compress(gradient_.data() + want_.parts[part].begin, block);
    }
    absl::Status Drain(size_t part, std::vector<float>* values) override {
      if (auto s = CheckPart(part); !s.ok()) return s;
      if (parts_[part] == nullptr) {
        values->clear();
        return absl::OkStatus();
      }
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      return parts_[part]->Drain(gradient_.data() + want_.parts[part].begin, values);
    }
    absl::StatusOr<std::vector<float>> Residual(size_t part) const override {
      if (auto s = CheckPart(part); !s.ok()) return s;
      if (parts_[part] == nullptr) return std::vector<float>();
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      return parts_[part]->Residual();
    }
    absl::Status SetResidual(size_t part, std::span<const float> residual) override {
      if (auto s = CheckPart(part); !s.ok()) return s;
      if (!residual.empty() && residual.size() != want_.parts[part].size()) {
        return absl::InvalidArgumentError(absl::StrCat("a residual of ", residual.size(),
                                                       " floats for a part of the gradient of ",
                                                       want_.parts[part].size()));
      }
      if (parts_[part] == nullptr) return absl::OkStatus();
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      return parts_[part]->SetResidual(residual);
    }

    float* gradient() { return gradient_.data(); }
    // Keys below this have their row in the dense gradient.
    uint64_t rows() const { return want_.floats / static_cast<size_t>(model_.row_dim()); }

   private:
    absl::Status CheckPart(size_t part) const {
      if (part < parts_.size()) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat("no part ", part, " of the gradient: it has ", parts_.size()));
    }

    const DeviceModel& model_;
    GradientCompression want_;
    typename E::template Array<float> gradient_;
    std::vector<std::unique_ptr<typename E::FeedbackEncoder>> parts_;
  };

  // The row encoder: a residual table on the device per shard, over the last step's row
  // gradients (row_grads_, step_rows_ rows of row_dim).
  class KeptRows final : public RowGradientEncoder {
   public:
    explicit KeptRows(const DeviceModel& model) : model_(model) {}
    ~KeptRows() override {
      // Destroyed with the model's lock held (EncodeRows, StopEncoding) or at the model's end.
      model_.e_.Activate();
    }

    absl::Status Compress(size_t shard, std::span<const uint64_t> keys,
                          std::span<const uint32_t> positions, float examples,
                          SparsePush* out) override {
      if (auto s = CheckShard(shard); !s.ok()) return s;
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      return shards[shard]->Compress(keys, positions, model_.row_grads_.data(), model_.step_rows_,
                                     out, examples);
    }
    absl::Status Drain(size_t shard, float examples, SparsePush* out) override {
      if (auto s = CheckShard(shard); !s.ok()) return s;
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      return shards[shard]->Drain(out, examples);
    }
    absl::Status CopyResiduals(size_t shard, RowTable* table, uint64_t* pushes) const override {
      if (auto s = CheckShard(shard); !s.ok()) return s;
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      *pushes = shards[shard]->pushes();
      return shards[shard]->CopyResiduals(table);
    }
    absl::Status SetResiduals(size_t shard, const RowTable& table, uint64_t pushes) override {
      if (auto s = CheckShard(shard); !s.ok()) return s;
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      return shards[shard]->SetResiduals(table, pushes);
    }
    Counts counts() const override {
      absl::MutexLock lock(&model_.mu_);
      Counts c;
      for (const auto& shard : shards) {
        c.held += shard->size();
        c.flushed += shard->rows_flushed();
        c.drained += shard->rows_drained();
      }
      return c;
    }

    std::vector<std::unique_ptr<DeviceRowFeedback<E>>> shards;

   private:
    absl::Status CheckShard(size_t shard) const {
      if (shard < shards.size()) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat("no shard ", shard, " of the sparse rows: there are ", shards.size()));
    }
    const DeviceModel& model_;
  };

  // The pull decoder: the copy, and the reads open (a read and a read-ahead), each with its
  // rows on the device.
  class PullCopy final : public PulledRowDecoder {
   public:
    PullCopy(const DeviceModel& model, std::unique_ptr<DevicePullCopy<E>> copy)
        : model_(model), copy_(std::move(copy)) {}
    ~PullCopy() override {
      // Destroyed with the model's lock held (DecodePulls, StopEncoding) or at the model's end.
      model_.e_.Activate();
    }

    void BeginRead(std::span<float> rows) override {
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      Read* read = Find(rows.data());
      if (read == nullptr) {
        for (Read& r : reads_) {
          if (!r.open) {
            read = &r;
            break;
          }
        }
      }
      // A third read while two are open would drop one whose step is still to come, and that
      // step would read the caller's rows, which no reply wrote.
      model_internal::CheckOrDie(read != nullptr,
                                 "a third compressed-pull read begun while two are open");
      read->host = rows.data();
      read->floats = rows.size();
      read->rows_done = 0;
      read->open = true;
      read->rows.Reserve(rows.size() + 1);
    }

    absl::Status Decode(std::span<const uint64_t> keys, std::span<const uint32_t> places,
                        std::span<const std::byte> fresh, std::span<const std::byte> block,
                        std::span<const uint64_t> evicted, const float* rows) override {
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      Read* read = Find(rows);
      if (read == nullptr) {
        return absl::FailedPreconditionError(
            "a compressed pull's reply for rows no read was begun for (PulledRowDecoder)");
      }
      const size_t out_rows = read->floats / copy_->dim();
      if (auto s = copy_->Apply(keys, places, fresh, block, evicted, read->rows.data(), out_rows);
          !s.ok()) {
        return s;
      }
      read->rows_done += keys.size();
      rows_decoded_ += static_cast<int64_t>(keys.size());
      return absl::OkStatus();
    }

    size_t size() const override {
      absl::MutexLock lock(&model_.mu_);
      return copy_->size();
    }

    // The device rows of the open read of `rows`, which it closes; null when none is open (the
    // rows are the caller's). A read whose replies did not cover every row is a caller's bug.
    const float* Take(absl::Span<const float> rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(model_.mu_) {
      Read* read = Find(rows.data());
      if (read == nullptr) return nullptr;
      model_internal::CheckOrDie(
          read->floats == rows.size() && read->rows_done * copy_->dim() == rows.size(),
          "a step on a read whose compressed replies did not cover its rows");
      read->open = false;
      return read->rows.data();
    }
    int64_t rows_decoded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(model_.mu_) { return rows_decoded_; }
    const DevicePullCopy<E>& copy() const { return *copy_; }

   private:
    struct Read {
      bool open = false;
      const float* host = nullptr;
      size_t floats = 0;
      size_t rows_done = 0;
      typename E::template Array<float> rows;
    };
    Read* Find(const float* host) ABSL_EXCLUSIVE_LOCKS_REQUIRED(model_.mu_) {
      for (Read& r : reads_) {
        if (r.open && r.host == host) return &r;
      }
      return nullptr;
    }

    const DeviceModel& model_;
    std::unique_ptr<DevicePullCopy<E>> copy_;
    Read reads_[2] ABSL_GUARDED_BY(model_.mu_);
    int64_t rows_decoded_ ABSL_GUARDED_BY(model_.mu_) = 0;
  };

  class Evaluator final : public ModelEvaluator {
   public:
    explicit Evaluator(const DeviceModel& model)
        : model_(model), sums_(model.num_classes(), model.binary()) {}
    ~Evaluator() override {
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();  // the device whose memory the sums free
    }

    void Add(const Dataset& data, absl::Span<const uint32_t> examples,
             absl::Span<const uint64_t> keys, absl::Span<const float> rows,
             absl::Span<const float> bias) override {
      model_internal::CheckShapes(model_.row_dim(), model_.bias_dim(), keys, rows, bias);
      labels_.resize(examples.size());
      for (size_t i = 0; i < examples.size(); ++i) {
        const float label = data.labels[examples[i]];
        labels_[i] =
            model_.binary()
                ? (label > 0.5f ? 1 : 0)
                : static_cast<int32_t>(example_metrics::ClassOf(label, model_.num_classes()));
      }
      absl::MutexLock lock(&model_.mu_);
      model_.e_.Activate();
      const float* scores = model_.Score(data, examples, keys, rows, bias);
      sums_.Add(model_.e_, scores, labels_.data(), examples.size());
    }

    Evaluation Finish() override {
      Evaluation eval;
      eval.examples = sums_.count();
      if (eval.examples == 0) return eval;
      eval.loss = sums_.loss_sum() / static_cast<double>(eval.examples);
      eval.accuracy = static_cast<double>(sums_.hits()) / static_cast<double>(eval.examples);
      if (model_.binary()) {
        absl::MutexLock lock(&model_.mu_);
        model_.e_.Activate();
        eval.auc = sums_.Auc(model_.e_);
      }
      return eval;
    }

   private:
    const DeviceModel& model_;
    device_step::DeviceEvaluation<E> sums_;
    std::vector<int32_t> labels_;
  };

  bool ctr() const { return shape_.ctr_dim > 0; }

  // The batch's scores on the device, as Predict returns them: P(y=1), or the class
  // probabilities.
  const float* Score(const Dataset& data, absl::Span<const uint32_t> examples,
                     absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                     absl::Span<const float> bias) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const float* step_rows = UploadStep(data, examples, keys, rows, bias);
    const float* logits;
    if (ctr()) {
      device_step::CtrForward(e_, shape_, batch_, step_rows, dense_.data(), &ctr_);
      logits = ctr_.logit.data();
    } else {
      device_step::Forward(e_, shape_, batch_, step_rows, dense_.data(), &act_);
      logits = act_.pre.back().data();
    }
    act_.dh.Reserve(examples.size() * (binary() ? 1 : shape_.outputs()));
    e_.ForEach(examples.size(), device_step::Probabilities{logits, binary() ? 1 : shape_.outputs(),
                                                           binary(), act_.dh.data()});
    return act_.dh.data();
  }

  // The features of the examples that go to the device: every one, or ctr's categorical ids
  // (its examples checked for the Criteo layout, as the CPU model checks them).
  size_t BatchFeatures(const Dataset& data, absl::Span<const uint32_t> examples) const {
    if (!ctr()) return model_internal::CountFeatures(data, examples);
    for (const uint32_t example : examples) {
      model_internal::CheckOrDie(example < data.size(), "example index out of range");
      model_internal::CheckOrDie(
          data.row_offsets[example + 1] - data.row_offsets[example] == kCriteoEntries,
          "the ctr model needs Criteo-layout examples (39 entries each)");
    }
    return examples.size() * device_step::kCtrFields;
  }

  // Whether `data` is the dataset kept on the device (KeepData).
  bool Resident(const Dataset& data) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return resident_host_ == &data && data.size() == resident_.examples &&
           data.ids.size() == resident_.nnz;
  }

  // A batch of the kept dataset: its offsets (from the dataset's), labels and example indices
  // into pinned memory; its features are gathered on the device.
  void FillResident(const Dataset& data, absl::Span<const uint32_t> examples,
                    device_step::HostBatch<E>& host) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t nnz = model_internal::CountFeatures(data, examples);
    host.ReserveResident(examples.size(), nnz);
    uint32_t* offsets = host.offsets.data();
    uint32_t at = 0;
    for (size_t e = 0; e < examples.size(); ++e) {
      const uint32_t example = examples[e];
      offsets[e] = at;
      host.examples.data()[e] = example;
      at += static_cast<uint32_t>(data.row_offsets[example + 1] - data.row_offsets[example]);
      host.labels.data()[e] = Label(data.labels[example]);
    }
    offsets[examples.size()] = at;
  }

  // The batch's keys from the kept dataset: the ids gathered and sorted unique on the device.
  std::vector<uint64_t> ResidentBatchKeys(const Dataset& data,
                                          absl::Span<const uint32_t> examples) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    FillResident(data, examples, host_keys_);
    const size_t n = host_keys_.n, nnz = host_keys_.nnz;
    key_offsets_.Reserve(n + 1);
    key_examples_.Reserve(n + 1);
    ids_.Reserve(nnz);
    unique_.Reserve(nnz);
    e_.Upload(key_offsets_.data(), host_keys_.offsets.data(), n + 1);
    e_.Upload(key_examples_.data(), host_keys_.examples.data(), n);
    e_.Fence();
    resident_.Gather(e_, key_offsets_.data(), n, key_examples_.data(), nnz, ids_.data(), nullptr);
    return UniqueIds(nnz);
  }

  // The sorted unique values of ids_[0, nnz), brought down (BatchKeys' last part).
  std::vector<uint64_t> UniqueIds(size_t nnz) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t count = e_.SortUnique(ids_.data(), nnz, unique_.data());
    std::vector<uint64_t> keys(count);
    e_.Download(keys.data(), unique_.data(), count);
    e_.Finish();
    return keys;
  }

  int32_t Label(float label) const {
    return binary() ? (label > 0.5f ? 1 : 0)
                    : static_cast<int32_t>(model_internal::ClassLabel(label, num_classes()));
  }

  // The batch into pinned memory: packed (Pack), or its indices for a gather from the kept
  // dataset (FillResident).
  void Fill(const Dataset& data, absl::Span<const uint32_t> examples,
            device_step::HostBatch<E>& host) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (Resident(data)) {
      FillResident(data, examples, host);
      ++batches_gathered_;
    } else {
      Pack(data, examples, host);
    }
  }
  // Uploads what Fill wrote, with the keys.
  void UploadBatch(const device_step::HostBatch<E>& host, device_step::SparseBatch<E>& batch,
                   const uint64_t* keys, size_t num_keys) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (host.resident) {
      batch.UploadResident(e_, host, resident_, keys, num_keys);
    } else {
      batch.Upload(e_, host, keys, num_keys);
    }
  }

  // The batch's CSR and labels into pinned memory (ctr: its categorical ids as the features,
  // and its dense values apart).
  void Pack(const Dataset& data, absl::Span<const uint32_t> examples,
            device_step::HostBatch<E>& host) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    host.Reserve(examples.size(), BatchFeatures(data, examples), ctr());
    uint32_t* offsets = host.offsets.data();
    uint64_t* ids = host.ids.data();
    float* values = host.values.data();
    int32_t* labels = host.labels.data();
    uint32_t at = 0;
    for (size_t e = 0; e < examples.size(); ++e) {
      const uint32_t example = examples[e];
      offsets[e] = at;
      uint64_t j = data.row_offsets[example];
      if (ctr()) {
        std::copy(data.values.begin() + j, data.values.begin() + j + kCriteoDenseFields,
                  host.dense.data() + e * kCriteoDenseFields);
        j += kCriteoDenseFields;
      }
      for (; j < data.row_offsets[example + 1]; ++j, ++at) {
        ids[at] = data.ids[j];
        values[at] = ctr() ? 1.0f : data.values[j];
      }
      labels[e] = Label(data.labels[example]);
    }
    offsets[examples.size()] = at;
  }

  // Packs the batch and uploads it (unless it was staged while the last step computed) and
  // indexes it, while the rows and the dense table are still on their way up; the step may
  // start once this returns.
  // Returns where the step reads the rows: `pulled` (rows decoded here already), or where
  // `rows` went up.
  const float* UploadStep(const Dataset& data, absl::Span<const uint32_t> examples,
                          absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                          absl::Span<const float> bias, const float* pulled = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool staged = TakeStaged(data, examples, keys);
    if (!staged) Fill(data, examples, host_);
    if (pulled == nullptr) rows_.Reserve(rows.size());
    dense_.Reserve(bias.size());
    if (ctr()) ctr_.dense.Reserve(host_.n * kCriteoDenseFields);
    e_.MarkUploadsBegin();
    if (!staged) UploadBatch(host_, batch_, keys.data(), keys.size());
    e_.Fence();
    batch_.Index(e_);
    if (ctr()) e_.Upload(ctr_.dense.data(), host_.dense.data(), host_.n * kCriteoDenseFields);
    if (pulled == nullptr) e_.Upload(rows_.data(), rows.data(), rows.size());
    e_.Upload(dense_.data(), bias.data(), bias.size());
    e_.MarkUploadsEnd();
    e_.Fence();
    return pulled != nullptr ? pulled : rows_.data();
  }

  // The batch Prefetch announced, packed and uploaded on the copy stream while the current
  // step computes (the host packs it meanwhile too): called once the step's kernels are issued.
  void StageNext() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!announced_.valid) return;
    Fill(*announced_.data, announced_.examples, host_next_);
    UploadBatch(host_next_, batch_next_, announced_.keys.data(), announced_.keys.size());
    std::swap(staged_, announced_);
    announced_.valid = false;
  }
  // Whether the staged batch is this one; if so it becomes the current one. Either way nothing
  // stays staged.
  bool TakeStaged(const Dataset& data, absl::Span<const uint32_t> examples,
                  absl::Span<const uint64_t> keys) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool hit = staged_.valid && staged_.data == &data &&
                     std::equal(examples.begin(), examples.end(), staged_.examples.begin(),
                                staged_.examples.end()) &&
                     std::equal(keys.begin(), keys.end(), staged_.keys.begin(), staged_.keys.end());
    staged_.valid = false;
    if (!hit) return false;
    std::swap(host_, host_next_);
    std::swap(batch_, batch_next_);
    ++prefetched_;
    return true;
  }

  const std::unique_ptr<Model> reference_;
  const device_step::Shape shape_;
  const bool prefetch_;
  mutable absl::Mutex mu_;
  mutable E e_ ABSL_GUARDED_BY(mu_);
  mutable device_step::HostBatch<E> host_ ABSL_GUARDED_BY(mu_);
  // A batch to come: announced by Prefetch (the trainer announces the one after next before the
  // staged one is taken), then staged in host_next_ and batch_next_.
  struct Batch {
    bool valid = false;
    const Dataset* data = nullptr;
    std::vector<uint32_t> examples;
    std::vector<uint64_t> keys;
  };
  mutable Batch announced_ ABSL_GUARDED_BY(mu_), staged_ ABSL_GUARDED_BY(mu_);
  mutable device_step::HostBatch<E> host_next_ ABSL_GUARDED_BY(mu_);
  mutable device_step::SparseBatch<E> batch_next_ ABSL_GUARDED_BY(mu_);
  mutable int64_t prefetched_ ABSL_GUARDED_BY(mu_) = 0;
  mutable device_step::SparseBatch<E> batch_ ABSL_GUARDED_BY(mu_);
  // The dataset kept on the device (KeepData), and what BatchKeys gathers its ids with.
  mutable const Dataset* resident_host_ ABSL_GUARDED_BY(mu_) = nullptr;
  mutable device_step::ResidentData<E> resident_ ABSL_GUARDED_BY(mu_);
  mutable int64_t batches_gathered_ ABSL_GUARDED_BY(mu_) = 0;
  mutable device_step::HostBatch<E> host_keys_ ABSL_GUARDED_BY(mu_);
  mutable typename E::template Array<uint32_t> key_offsets_ ABSL_GUARDED_BY(mu_), key_examples_
      ABSL_GUARDED_BY(mu_);
  mutable device_step::Activations<E> act_ ABSL_GUARDED_BY(mu_);
  mutable device_step::CtrActivations<E> ctr_ ABSL_GUARDED_BY(mu_);
  mutable typename E::template Array<float> rows_ ABSL_GUARDED_BY(mu_), dense_ ABSL_GUARDED_BY(mu_),
      row_grads_ ABSL_GUARDED_BY(mu_), dense_grads_ ABSL_GUARDED_BY(mu_);
  mutable typename E::template Array<uint64_t> ids_ ABSL_GUARDED_BY(mu_), unique_
      ABSL_GUARDED_BY(mu_);
  mutable typename E::template PinnedArray<uint64_t> host_ids_ ABSL_GUARDED_BY(mu_);
  mutable typename E::template PinnedArray<float> host_grads_ ABSL_GUARDED_BY(mu_);
  mutable typename E::template PinnedArray<double> host_loss_ ABSL_GUARDED_BY(mu_);
  mutable absl::Duration upload_ ABSL_GUARDED_BY(mu_), download_ ABSL_GUARDED_BY(mu_);
  // The rows' and the dense table's encoders (EncodeGradients). Declared last, so that they go
  // first (their end makes the device current).
  mutable std::unique_ptr<KeptGradients> encoders_[2] ABSL_GUARDED_BY(mu_);
  mutable std::unique_ptr<KeptRows> row_encoder_ ABSL_GUARDED_BY(mu_);
  mutable std::unique_ptr<PullCopy> pull_copy_ ABSL_GUARDED_BY(mu_);
  mutable size_t step_rows_ ABSL_GUARDED_BY(mu_) = 0;  // rows of row_grads_ a row encoder reads
};

}  // namespace syncline

#endif  // SYNCLINE_DEVICE_DEVICE_MODEL_H_
