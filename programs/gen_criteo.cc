// `syncline-gen criteo`: Criteo-format click data from a known model with field interactions.
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "programs/gen_common.h"
#include "tools/criteo_gen.h"

namespace syncline::gen {
namespace {

// Writes the training data to `out_path` (- : standard output) and the test data to
// `test_path` (none if empty); the exit code.
int WriteCriteoFiles(const CriteoGenOptions& options, const std::string& out_path,
                     const std::string& test_path) {
  std::unique_ptr<std::ofstream> file;
  if (out_path != "-") {
    file = OpenOutput(out_path);
    if (file == nullptr) return kExitWriteFailed;
  }
  std::ostream& train = file != nullptr ? *file : std::cout;
  std::unique_ptr<std::ofstream> test;
  if (!test_path.empty()) {
    test = OpenOutput(test_path);
    if (test == nullptr) return kExitWriteFailed;
  }
  absl::StatusOr<CriteoGenSummary> summary = WriteCriteoSynthetic(options, train, test.get());
  if (summary.ok()) {
    train.flush();
    if (file != nullptr) file->close();
    if (test != nullptr) test->close();
    if (!train || (file != nullptr && !*file) || (test != nullptr && !*test)) {
      summary = absl::DataLossError("closing an output file failed");
    }
  }
  if (!summary.ok()) {
    std::cerr << "syncline-gen criteo: " << summary.status().message() << "\n";
    return kExitWriteFailed;
  }
  // The data may be on standard output: the summary goes to standard error.
  std::cerr << absl::StrFormat("syncline-gen criteo: wrote %d train rows to %s",
                               summary->train_rows, out_path == "-" ? "standard output" : out_path);
  if (test != nullptr) {
    std::cerr << absl::StrFormat(" and %d test rows to %s", summary->test_rows, test_path);
  }
  std::cerr << absl::StrFormat(" (train positive rate %.4f)\n", summary->PositiveRate());
  return 0;
}

}  // namespace

int CriteoMain(int argc, char** argv) {
  CriteoGenOptions options;
  std::string out_path = "-";
  std::string test_path;
  CLI::App app(
      "Writes synthetic Criteo-format click data (label, 13 integer and 26 hexadecimal\n"
      "categorical tab-separated fields, some empty) drawn from a known random model: Zipf-\n"
      "distributed values per field (vocabularies from 3 to 1M), a bias and a latent vector per\n"
      "value, and labels ~ Bernoulli(sigmoid(biases + pairwise latent dot products among 12\n"
      "fields + a dense term)). Most of the signal is in the pairwise terms, which the ctr model\n"
      "learns and logistic regression cannot. The same flags and --seed give the same bytes.",
      "syncline-gen criteo");
  app.option_defaults()->always_capture_default();
  const CLI::Validator kNotNegative = NotNegative();
  app.add_option("--rows", options.rows, "Rows in the training file (>= 1)")->check(kNotNegative);
  app.add_option("--out", out_path, "Training data file to write; - is standard output");
  app.add_option("--test-out", test_path, "Test data file to write, from the same model");
  app.add_option("--test-rows", options.test_rows, "Rows in the test file")->check(kNotNegative);
  app.add_option("--seed", options.seed, "Random seed for the model and the rows")
      ->check(kNotNegative);
  app.add_option("--zipf", options.zipf, "Zipf exponent of value popularity, > 0 and not 1");
  app.add_option("--interaction", options.interaction,
                 "Scale of the pairwise terms; 0 leaves a first-order model");
  if (std::optional<int> exit = Parse(app, argc, argv, "syncline-gen criteo")) return *exit;
  if (absl::Status s = ValidateCriteoGenOptions(options); !s.ok()) {
    std::cerr << "syncline-gen criteo: " << s.message()
              << "\nRun with --help for more information.\n";
    return kExitUsage;
  }
  std::cerr << "syncline-gen criteo: seed " << options.seed << "\n";
  return WriteCriteoFiles(options, out_path, test_path);
}

}  // namespace syncline::gen
