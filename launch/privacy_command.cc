#include "launch/privacy_command.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/command_line.h"
#include "job/privacy_accountant.h"
#include "launch/flag_help.h"

namespace syncline {
namespace {

constexpr char kMe[] = "syncline-launch privacy";

constexpr char kHelp[] =
    "syncline-launch privacy: what differentially private training spends (RDP accountant of\n"
    "the Poisson-sampled Gaussian mechanism, docs/PRIVACY.md). Prints one JSON line.\n\n"
    "Examples:\n"
    "  syncline-launch privacy --noise-multiplier 1.1 --sampling-rate 0.00427 --steps 14062\n"
    "      # the epsilon of 60 epochs of batches of 256 of 60,000 examples\n"
    "  syncline-launch privacy --epsilon 3 --sampling-rate 0.00427 --steps 14062\n"
    "      # the noise multiplier that keeps them within epsilon 3\n";

struct PrivacyFlags {
  std::optional<double> noise_multiplier;
  std::optional<double> epsilon;
  double sampling_rate = 0;
  int64_t steps = 0;
  double delta = 1e-5;
  std::string accountant = "rdp";
};

void AddPrivacyFlags(CLI::App& app, PrivacyFlags& f) {
  auto* z = app.add_option("--noise-multiplier", f.noise_multiplier,
                           "The noise's standard deviation over the clipping norm: prints the "
                           "epsilon spent");
  auto* e = app.add_option("--epsilon", f.epsilon,
                           "The budget instead: prints the smallest noise multiplier within it");
  z->excludes(e);
  app.add_option("--sampling-rate", f.sampling_rate,
                 "Probability that a step samples an example (a round a client), in (0, 1]")
      ->required();
  app.add_option("--steps", f.steps, "Steps (rounds) composed")->required();
  app.add_option("--delta", f.delta, "The delta of (epsilon, delta)")->capture_default_str();
  app.add_option("--accountant", f.accountant,
                 "rdp (Canonne-Kamath-Steinke 2020's conversion, as Google's dp-accounting) or "
                 "rdp-classic (Mironov 2017's)")
      ->capture_default_str();
}

int Usage(const std::string& message) {
  std::cerr << kMe << ": " << message << "\nRun with --help for usage.\n";
  return 2;
}

}  // namespace

std::string PrivacyFlagsMarkdown() {
  CLI::App app;
  PrivacyFlags flags;
  AddPrivacyFlags(app, flags);
  const CLI::App& view = app;
  return OptionsMarkdownTable(
      view.get_options([](const CLI::Option* option) { return option->nonpositional(); }),
      /*job_file_keys=*/false);
}

int RunPrivacyCommand(int argc, char** argv) {
  CLI::App app(kHelp, kMe);
  PrivacyFlags f;
  AddPrivacyFlags(app, f);
  if (std::optional<int> exit = ParseCommandLine(app, argc, argv, kMe)) return *exit;
  absl::StatusOr<RdpConversion> conversion = ParseRdpConversion(f.accountant);
  if (!conversion.ok()) return Usage(absl::StrCat("--accountant: ", conversion.status().message()));
  if (!f.noise_multiplier && !f.epsilon) {
    return Usage("give --noise-multiplier Z (prints epsilon) or --epsilon E (prints the noise)");
  }
  DpSgdParameters p{.sampling_rate = f.sampling_rate,
                    .noise_multiplier = f.noise_multiplier.value_or(0),
                    .steps = f.steps,
                    .delta = f.delta};
  if (f.epsilon) {
    absl::StatusOr<double> z = CalibrateNoiseMultiplier(p, *f.epsilon, *conversion);
    if (!z.ok()) return Usage(std::string(z.status().message()));
    p.noise_multiplier = *z;
  }
  absl::StatusOr<EpsilonAtOrder> spent = ComputeEpsilon(p, *conversion);
  if (!spent.ok()) return Usage(std::string(spent.status().message()));
  std::cout << absl::StrFormat(
      "{\"epsilon\":%.10g,\"delta\":%.10g,\"noise_multiplier\":%.10g,\"sampling_rate\":%.10g,"
      "\"steps\":%d,\"order\":%g,\"accountant\":\"%s\"}\n",
      spent->epsilon, p.delta, p.noise_multiplier, p.sampling_rate, p.steps, spent->order,
      RdpConversionName(*conversion));
  return 0;
}

}  // namespace syncline
