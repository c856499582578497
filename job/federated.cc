#include "job/federated.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "privacy/dp_random.h"

namespace syncline {
namespace {

// An engine for one (seed, round, stream) triple; std::seed_seq's mixing and mt19937_64's
// output are fully specified, so every node draws the same numbers.
std::mt19937_64 EngineFor(uint64_t seed, int64_t round, uint32_t stream) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(round), static_cast<uint32_t>(round >> 32), stream};
  return std::mt19937_64(seq);
}

// In [0, 1) from 53 bits of one draw (not std::uniform_real_distribution, which differs
// between standard libraries).
double Uniform(std::mt19937_64& engine) { return static_cast<double>(engine() >> 11) * 0x1.0p-53; }

constexpr uint32_t kPickStream = 0x70696b;  // "pik"
constexpr uint32_t kDropStream = 0x64726f;  // "dro"

absl::StatusOr<AttackSpec> ParseAttack(absl::string_view text) {
  AttackSpec a;
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  const absl::string_view kind = parts[0];
  auto number = [&](double* out) -> bool {
    return parts.size() == 2 && absl::SimpleAtod(parts[1], out) && std::isfinite(*out);
  };
  if (kind == "signflip" && parts.size() == 1) {
    a.kind = AttackKind::kSignFlip;
  } else if (kind == "labelflip" && parts.size() == 1) {
    a.kind = AttackKind::kLabelFlip;
  } else if (kind == "gaussian" && number(&a.sigma) && a.sigma > 0) {
    a.kind = AttackKind::kGaussian;
  } else if (kind == "scale" && number(&a.factor)) {
    a.kind = AttackKind::kScale;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown attack '", text,
                     "' (signflip, gaussian:SIGMA with SIGMA > 0, scale:K, labelflip)"));
  }
  return a;
}

}  // namespace

std::vector<int> RoundPicker::Pick(int64_t round) const {
  if (poisson_key.empty()) return PickClients(seed, round, workers, participation);
  absl::StatusOr<DpKey> key = ParseDpKeyHex(poisson_key);
  if (!key.ok()) return {};  // ValidateJobSpec refuses such a key; no picks rather than a guess
  DpRandom random(*key, DpStream::kClientPicks, {static_cast<uint64_t>(round)});
  std::vector<int> picked;
  for (uint32_t c : random.PoissonSample(static_cast<uint32_t>(workers), participation)) {
    picked.push_back(static_cast<int>(c));
  }
  return picked;
}

RoundPicker RoundPickerFor(const JobSpec& spec) {
  return RoundPicker{
      .seed = spec.seed,
      .workers = spec.workers,
      .participation = spec.federated.participation,
      .poisson_key = spec.privacy.level == DpLevel::kClient ? spec.privacy.key : std::string()};
}

int ClientsPerRound(int workers, double participation) {
  const double n = std::round(participation * workers);
  return std::clamp(static_cast<int>(n), 1, std::max(1, workers));
}

std::vector<int> PickClients(uint64_t seed, int64_t round, int workers, double participation) {
  std::vector<int> all(std::max(0, workers));
  for (int i = 0; i < workers; ++i) all[i] = i;
  const int m = std::min(workers, ClientsPerRound(workers, participation));
  if (m >= workers) return all;
  // A partial Fisher-Yates shuffle with our own index draws.
  std::mt19937_64 engine = EngineFor(seed, round, kPickStream);
  for (int i = 0; i < m; ++i) {
    const int left = workers - i;
    const int j = i + std::min(left - 1, static_cast<int>(Uniform(engine) * left));
    std::swap(all[i], all[j]);
  }
  all.resize(m);
  std::sort(all.begin(), all.end());
  return all;
}

bool ClientDropsOut(uint64_t seed, int64_t round, int rank, double dropout) {
  if (dropout <= 0) return false;
  std::mt19937_64 engine = EngineFor(seed, round, kDropStream + static_cast<uint32_t>(rank) * 8);
  return Uniform(engine) < dropout;
}

int SecAggStagesBeforeDropout(uint64_t seed, int64_t round, int rank) {
  std::mt19937_64 engine =
      EngineFor(seed, round, kDropStream + static_cast<uint32_t>(rank) * 8 + 1);
  constexpr int kStages[] = {0, 2, 3};
  return kStages[engine() % 3];
}

absl::StatusOr<JobSpec::Byzantine> ParseByzantine(const std::string& full) {
  const absl::string_view text = full;
  JobSpec::Byzantine b;
  if (text.empty() || text == "none") return b;
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not RANKS:ATTACK (e.g. 1,2:signflip or 0:gaussian:10)"));
  }
  for (absl::string_view r : absl::StrSplit(text.substr(0, colon), ',')) {
    int rank = 0;
    if (!absl::SimpleAtoi(r, &rank) || rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", r, "' in '", text, "' is not a worker rank (an integer >= 0)"));
    }
    if (std::find(b.ranks.begin(), b.ranks.end(), rank) != b.ranks.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is listed twice in '", text, "'"));
    }
    b.ranks.push_back(rank);
  }
  std::sort(b.ranks.begin(), b.ranks.end());
  absl::StatusOr<AttackSpec> attack = ParseAttack(text.substr(colon + 1));
  if (!attack.ok()) return attack.status();
  b.attack = *attack;
  return b;
}

std::string AttackName(const AttackSpec& a) {
  switch (a.kind) {
    case AttackKind::kNone:
      return "none";
    case AttackKind::kSignFlip:
      return "signflip";
    case AttackKind::kGaussian:
      return absl::StrFormat("gaussian:%g", a.sigma);
    case AttackKind::kScale:
      return absl::StrFormat("scale:%g", a.factor);
    case AttackKind::kLabelFlip:
      return "labelflip";
  }
  return "none";
}

std::string ByzantineName(const JobSpec::Byzantine& b) {
  if (b.ranks.empty() || b.attack.kind == AttackKind::kNone) return "none";
  return absl::StrCat(absl::StrJoin(b.ranks, ","), ":", AttackName(b.attack));
}

bool IsByzantine(const JobSpec::Byzantine& b, int rank) {
  return b.attack.kind != AttackKind::kNone &&
         std::find(b.ranks.begin(), b.ranks.end(), rank) != b.ranks.end();
}

}  // namespace syncline
