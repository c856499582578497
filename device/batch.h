// A batch on its way to the device and there: HostBatch (packed by the host in pinned memory),
// ResidentData (a dataset kept on the device, whose batches go up as example indices) and
// SparseBatch (a batch's features on the device, indexed by the rows of its keys, with the
// gather and scatter of the sparse layer). Written once for an executor E (device/device_step.h).
//
// Thread-safety: thread-compatible; a batch uses its executor alone.
#ifndef SYNCLINE_DEVICE_BATCH_H_
#define SYNCLINE_DEVICE_BATCH_H_

#include <cstddef>
#include <cstdint>

#include "device/ctr_kernels.h"
#include "device/kernels.h"
#include "device/scatter.h"

namespace syncline::device_step {

// A batch as the host packs it for the device, in pinned memory: examples' features (CSR,
// offsets relative to the batch) and labels as class indices (0/1 when binary). A batch of a
// dataset kept on the device (resident) has its offsets, labels and example indices only: its
// features are gathered there.
template <class E>
struct HostBatch {
  typename E::template PinnedArray<uint32_t> offsets;   // n + 1
  typename E::template PinnedArray<uint64_t> ids;       // nnz
  typename E::template PinnedArray<float> values;       // nnz
  typename E::template PinnedArray<int32_t> labels;     // n
  typename E::template PinnedArray<float> dense;        // ctr: [n][13]
  typename E::template PinnedArray<uint32_t> examples;  // resident: n
  size_t n = 0, nnz = 0;
  bool resident = false;

  void Reserve(size_t examples_, size_t features, bool ctr) {
    n = examples_;
    nnz = features;
    resident = false;
    offsets.Reserve(n + 1);
    ids.Reserve(nnz);
    values.Reserve(nnz);
    labels.Reserve(n);
    if (ctr) dense.Reserve(n * kCtrDense);
  }
  void ReserveResident(size_t examples_, size_t features) {
    n = examples_;
    nnz = features;
    resident = true;
    offsets.Reserve(n + 1);
    labels.Reserve(n);
    examples.Reserve(n + 1);
  }
};

// A dataset's examples on the device (DeviceModel's kept partition): its row offsets, ids and
// values as the Dataset holds them.
template <class E>
struct ResidentData {
  size_t examples = 0, nnz = 0;
  typename E::template Array<uint64_t> row_offsets, ids;
  typename E::template Array<float> values;

  // Uploads `data`'s features (on the copy stream: a Fence() before they are read).
  template <class Data>
  void Upload(E& e, const Data& data) {
    examples = data.size();
    nnz = data.ids.size();
    row_offsets.Reserve(examples + 1);
    ids.Reserve(nnz + 1);
    values.Reserve(nnz + 1);
    e.Upload(row_offsets.data(), data.row_offsets.data(), examples + 1);
    e.Upload(ids.data(), data.ids.data(), nnz);
    e.Upload(values.data(), data.values.data(), nnz);
  }
  // The ids (and values) of a batch's features, from its offsets and examples on the device.
  void Gather(E& e, const uint32_t* offsets, size_t n, const uint32_t* batch_examples,
              size_t batch_nnz, uint64_t* out_ids, float* out_values) const {
    e.ForEach(batch_nnz, GatherResident{offsets, n, batch_examples, row_offsets.data(), ids.data(),
                                        values.data(), out_ids, out_values});
  }
  // Bytes it takes for `data`.
  template <class Data>
  static size_t BytesFor(const Data& data) {
    return (data.size() + 1) * sizeof(uint64_t) +
           data.ids.size() * (sizeof(uint64_t) + sizeof(float));
  }
};

// A batch's features on the device, indexed by the rows of its keys.
template <class E>
class SparseBatch {
 public:
  // Uploads `batch` and `keys` (sorted unique: the rows the model reads, in this order); Index
  // needs a Fence() after it.
  void Upload(E& e, const HostBatch<E>& batch, const uint64_t* keys, size_t num_keys) {
    UploadCommon(e, batch, keys, num_keys);
    gather_from_ = nullptr;
    e.Upload(ids_.data(), batch.ids.data(), nnz_);
    e.Upload(values_.data(), batch.values.data(), nnz_);
  }

  // The same for a batch of a dataset kept on the device: its offsets, labels and example
  // indices go up, and Index gathers its features from `data` (which must stay until then).
  void UploadResident(E& e, const HostBatch<E>& batch, const ResidentData<E>& data,
                      const uint64_t* keys, size_t num_keys) {
    UploadCommon(e, batch, keys, num_keys);
    gather_from_ = &data;
    examples_.Reserve(n_ + 1);
    e.Upload(examples_.data(), batch.examples.data(), n_);
  }

  // Finds each feature's row, and the features of each row in order (gathering them first
  // for a batch of resident data).
  void Index(E& e) {
    if (gather_from_ != nullptr) {
      gather_from_->Gather(e, offsets_.data(), n_, examples_.data(), nnz_, ids_.data(),
                           values_.data());
      gather_from_ = nullptr;
    }
    slots_.Reserve(nnz_);
    sorted_slots_.Reserve(nnz_);
    order_.Reserve(nnz_);
    example_of_.Reserve(nnz_);
    begins_.Reserve(num_keys_ + 1);
    e.ForEach(nnz_, FindSlots{keys_.data(), num_keys_, ids_.data(), slots_.data()});
    e.ForEach(n_, ExampleOfFeature{offsets_.data(), example_of_.data()});
    // The sort looks at the low BitsFor(num_keys) bits only: kNoSlot's are all ones, at least
    // num_keys, so missing features still sort after every row's.
    e.SortBySlot(slots_.data(), sorted_slots_.data(), order_.data(), nnz_, BitsFor(num_keys_));
    e.ForEach(num_keys_ + 1, SegmentBegins{sorted_slots_.data(), nnz_, begins_.data()});
    pieces_.Reserve(num_keys_ + 1);
    first_.Reserve(num_keys_ + 1);
    several_.Reserve(num_keys_ + 1);
    several_at_.Reserve(num_keys_ + 1);
    e.ForEach(num_keys_ + 1,
              CountPieces{begins_.data(), num_keys_, pieces_.data(), several_.data()});
    e.ExclusiveSum(pieces_.data(), first_.data(), num_keys_ + 1);
    e.ExclusiveSum(several_.data(), several_at_.data(), num_keys_ + 1);
    spans_.Reserve(PiecesBound());
    multi_.Reserve(MultiBound());
    e.ForEach(num_keys_, PieceSpans{begins_.data(), first_.data(), several_at_.data(),
                                    spans_.data(), multi_.data()});
  }

  // out [n][dim] = bias + the gather-sum of rows [num_keys][dim].
  void Gather(E& e, const float* rows, const float* bias, int dim, float* out) const {
    e.ForEach(n_ * dim,
              SparseForward{offsets_.data(), slots_.data(), values_.data(), rows, bias, dim, out});
  }
  // grads [num_keys][dim] = the scatter of dout [n][dim].
  void Scatter(E& e, const float* dout, int dim, float* grads) const {
    ScatterTerms(e, SparseTerm{example_of_.data(), values_.data(), dout, dim}, dim, grads);
  }
  // grads [num_keys][width] = each row's sum of term(j, k) over its features (see SumPieces).
  template <class Term>
  void ScatterTerms(E& e, const Term& term, int width, float* grads) const {
    partial_.Reserve(PiecesBound() * width);
    if (ScatterColumns(width) == 1) {
      e.ForEach(PiecesBound() * width,
                SumPieces<Term, 1>{spans_.data(), first_.data(), order_.data(), num_keys_, width,
                                   width, term, partial_.data(), grads});
    } else {
      const int lanes = (width + kScatterColumns - 1) / kScatterColumns;
      e.ForEach(PiecesBound() * lanes, SumPieces<Term, kScatterColumns>{
                                           spans_.data(), first_.data(), order_.data(), num_keys_,
                                           width, lanes, term, partial_.data(), grads});
    }
    e.ForEach(MultiBound() * width, AddPieces{first_.data(), several_at_.data(), multi_.data(),
                                              num_keys_, partial_.data(), width, grads});
  }

  // The columns a scatter's thread sums at this width: kScatterColumns, or 1 where that would
  // leave fewer than kScatterFewThreads threads. set_scatter_columns(1 or kScatterColumns)
  // forces one (tests and benchmarks; 0: choose).
  int ScatterColumns(int width) const {
    if (scatter_columns_ != 0) return scatter_columns_;
    const size_t lanes = (static_cast<size_t>(width) + kScatterColumns - 1) / kScatterColumns;
    return PiecesBound() * lanes < kScatterFewThreads ? 1 : kScatterColumns;
  }
  void set_scatter_columns(int columns) { scatter_columns_ = columns; }

  size_t n() const { return n_; }
  size_t num_keys() const { return num_keys_; }
  // Bounds on the pieces (each row's features / kPiece, rounded up, and one for a row without
  // any) and on the rows with several (more than kPiece features each).
  size_t PiecesBound() const { return nnz_ / kPiece + num_keys_ + 1; }
  size_t MultiBound() const { return nnz_ / (kPiece + 1) + 1; }
  const uint64_t* keys() const { return keys_.data(); }
  const int32_t* labels() const { return labels_.data(); }
  const uint32_t* slots() const { return slots_.data(); }
  const uint32_t* order() const { return order_.data(); }
  const uint32_t* begins() const { return begins_.data(); }

 private:
  // What both uploads do: the sizes, room for the features, and the offsets, labels and keys.
  void UploadCommon(E& e, const HostBatch<E>& batch, const uint64_t* keys, size_t num_keys) {
    n_ = batch.n;
    nnz_ = batch.nnz;
    num_keys_ = num_keys;
    offsets_.Reserve(n_ + 1);
    ids_.Reserve(nnz_);
    values_.Reserve(nnz_);
    labels_.Reserve(n_);
    keys_.Reserve(num_keys_);
    e.Upload(offsets_.data(), batch.offsets.data(), n_ + 1);
    e.Upload(labels_.data(), batch.labels.data(), n_);
    e.Upload(keys_.data(), keys, num_keys_);
  }

  size_t n_ = 0, nnz_ = 0, num_keys_ = 0;
  int scatter_columns_ = 0;
  typename E::template Array<uint32_t> offsets_, slots_, sorted_slots_, order_, example_of_,
      begins_, pieces_, first_, several_, several_at_, multi_, examples_;
  const ResidentData<E>* gather_from_ = nullptr;  // UploadResident's, until Index
  typename E::template Array<PieceSpan> spans_;
  mutable typename E::template Array<float> partial_;  // SumPieces' partial sums
  typename E::template Array<uint64_t> ids_, keys_;
  typename E::template Array<float> values_;
  typename E::template Array<int32_t> labels_;
};

}  // namespace syncline::device_step

#endif  // SYNCLINE_DEVICE_BATCH_H_
