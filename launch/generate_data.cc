#include "launch/generate_data.h"

#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/str_format.h"
#include "job/job_spec.h"
#include "tools/criteo_gen.h"
#include "tools/synthetic.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

// Points the spec's data at DATA/train.EXT (and DATA/test.EXT when test rows are asked for)
// and opens them for writing.
absl::Status OpenGeneratedFiles(const JobConfig& config, JobSpec* spec, const fs::path& data,
                                const std::string& ext, std::ofstream& train, std::ofstream& test) {
  spec->data.train = (data / ("train." + ext)).string();
  train.open(spec->data.train);
  if (config.gen_test_rows > 0) {
    spec->data.test = (data / ("test." + ext)).string();
    spec->data.params_out = (fs::path(config.out) / "params.tsv").string();
    test.open(spec->data.test);
  }
  if (!train || (config.gen_test_rows > 0 && !test)) {
    return absl::PermissionDeniedError(absl::StrFormat("cannot write data into %s", data.string()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GenerateData(const JobConfig& config, JobSpec* spec) {
  const fs::path data = fs::path(config.out) / "data";
  std::error_code ec;
  fs::create_directories(data, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrFormat("cannot create %s", data.string()));
  std::ofstream train, test;
  std::ofstream* test_out = config.gen_test_rows > 0 ? &test : nullptr;
  if (UsesCriteoData(*spec)) {
    if (spec->model.kind == ModelKind::kCtr && config.gen_rows < 100000) {
      std::cerr << "syncline-launch: note: --model ctr learns little from " << config.gen_rows
                << " generated rows (test AUC about 0.6); --gen-rows 200000 --lr 0.05 "
                   "--epochs 2 reaches about 0.83 (examples/ctr)\n";
    }
    CriteoGenOptions o;
    o.rows = config.gen_rows;
    o.test_rows = config.gen_test_rows;
    o.seed = config.seed;
    if (auto s = OpenGeneratedFiles(config, spec, data, "tsv", train, test); !s.ok()) return s;
    auto summary = WriteCriteoSynthetic(o, train, test_out);
    if (!summary.ok()) return summary.status();
    std::cerr << absl::StrFormat(
        "generated %d training and %d test examples (Criteo format, seed %d) in %s\n",
        summary->train_rows, summary->test_rows, o.seed, data.string());
    return absl::OkStatus();
  }
  SyntheticOptions o;
  o.rows = config.gen_rows;
  o.test_rows = config.gen_test_rows;
  o.features = config.gen_features;
  o.nnz = config.gen_nnz;
  o.classes = config.classes;
  o.seed = config.seed;
  if (auto s = OpenGeneratedFiles(config, spec, data, "libsvm", train, test); !s.ok()) return s;
  auto summary = WriteSynthetic(o, train, test_out);
  if (!summary.ok()) return summary.status();
  std::cerr << absl::StrFormat(
      "generated %d training and %d test examples (%d features, seed %d) in %s\n",
      summary->train_rows, summary->test_rows, o.features, o.seed, data.string());
  return absl::OkStatus();
}

}  // namespace syncline
