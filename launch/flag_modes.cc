#include "launch/flag_modes.h"

#include <array>
#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace syncline {
namespace {

constexpr uint32_t Bit(ModeFamily f) { return uint32_t{1} << static_cast<int>(f); }
constexpr uint32_t Modes(std::initializer_list<ModeFamily> families) {
  uint32_t bits = 0;
  for (ModeFamily f : families) bits |= Bit(f);
  return bits;
}

constexpr uint32_t kServerModes = Modes({ModeFamily::kBsp, ModeFamily::kAsp, ModeFamily::kSsp,
                                         ModeFamily::kHybrid, ModeFamily::kFedAvg});
constexpr uint32_t kClockModes = Modes({ModeFamily::kBsp, ModeFamily::kAsp, ModeFamily::kSsp});
constexpr uint32_t kAllModes =
    Modes({ModeFamily::kBsp, ModeFamily::kAsp, ModeFamily::kSsp, ModeFamily::kGossip,
           ModeFamily::kAllReduce, ModeFamily::kHybrid, ModeFamily::kFedAvg});
constexpr uint32_t kFedAvg = Bit(ModeFamily::kFedAvg);

// One row: a flag (without dashes), the modes it applies to, what a mismatch gets, and why the
// other modes have no use for it.
struct FlagScope {
  const char* flag;
  uint32_t modes;
  Mismatch mismatch;
  const char* why;
};

constexpr char kNoServers[] = "gossip and allreduce have no parameter servers";
constexpr char kRounds[] = "only federated rounds have it";

const std::array<FlagScope, 39> kFlagScopes = {{
    // Job
    {"servers", kServerModes, Mismatch::kRefuse, kNoServers},
    {"update-threads", kServerModes, Mismatch::kWarn, kNoServers},
    {"max-reply", kServerModes, Mismatch::kWarn, kNoServers},
    {"max-parked", kServerModes, Mismatch::kWarn, kNoServers},
    {"reply-backlog", kServerModes, Mismatch::kWarn, kNoServers},
    {"external-workers", kClockModes, Mismatch::kRefuse,
     "a WorkerSession pushes and pulls one clock at a time on parameter servers; it cannot be a "
     "gossip peer, an all-reduce rank or a federated client"},
    // Model
    {"epochs", kAllModes & ~kFedAvg, Mismatch::kRefuse,
     "a federated job trains --rounds rounds of --local-epochs or --local-steps each"},
    // Sync
    {"embedding-sync", Bit(ModeFamily::kHybrid), Mismatch::kRefuse,
     "only hybrid keeps embeddings on servers apart from its dense layers"},
    {"allreduce-rows", Bit(ModeFamily::kAllReduce), Mismatch::kRefuse,
     "only allreduce all-reduces rows"},
    {"read-ahead", Modes({ModeFamily::kAsp, ModeFamily::kSsp, ModeFamily::kHybrid}),
     Mismatch::kWarn,
     "bsp and fedavg read every step's parameters fresh, and serverless workers hold theirs"},
    {"consensus-step", Bit(ModeFamily::kGossip), Mismatch::kRefuse,
     "only gossip averages with neighbours"},
    // Compression
    {"compress-pull",
     Modes({ModeFamily::kBsp, ModeFamily::kAsp, ModeFamily::kSsp, ModeFamily::kHybrid}),
     Mismatch::kRefuse,
     "gossip and allreduce have no servers, and federated clients pull once a round"},
    {"residual-rows", kServerModes, Mismatch::kWarn,
     "serverless workers keep no residual of their pushes to servers"},
    {"pull-copy-rows",
     Modes({ModeFamily::kBsp, ModeFamily::kAsp, ModeFamily::kSsp, ModeFamily::kHybrid}),
     Mismatch::kWarn, "only servers that compress pulls keep copies"},
    // Embeddings
    {"embedding-memory", kServerModes, Mismatch::kWarn, kNoServers},
    {"embedding-admit-after", kServerModes, Mismatch::kWarn, kNoServers},
    {"embedding-expire-steps", kServerModes, Mismatch::kWarn, kNoServers},
    // Checkpoints and faults
    {"checkpoint-every", kAllModes & ~kFedAvg, Mismatch::kRefuse,
     "federated rounds are not checkpointed yet"},
    {"checkpoint-seconds", kAllModes & ~kFedAvg, Mismatch::kRefuse,
     "federated rounds are not checkpointed yet"},
    {"checkpoint-dir", kAllModes & ~kFedAvg, Mismatch::kWarn,
     "federated rounds are not checkpointed yet"},
    {"checkpoint-keep", kAllModes & ~kFedAvg, Mismatch::kWarn,
     "federated rounds are not checkpointed yet"},
    {"min-workers", kClockModes | Bit(ModeFamily::kGossip) | Bit(ModeFamily::kAllReduce),
     Mismatch::kRefuse, "every step (or round) of the others needs every worker"},
    {"max-restarts", kAllModes & ~kFedAvg, Mismatch::kRefuse,
     "federated rounds are not checkpointed, so there is nothing to roll back to"},
    {"max-workers", kClockModes | Bit(ModeFamily::kGossip) | Bit(ModeFamily::kAllReduce),
     Mismatch::kRefuse, "the others take no workers that join a running job"},
    {"peer-timeout", Modes({ModeFamily::kGossip, ModeFamily::kAllReduce, ModeFamily::kHybrid}),
     Mismatch::kWarn, "only workers that talk to each other wait for peers"},
    // Federated
    {"aggregate", Modes({ModeFamily::kBsp, ModeFamily::kFedAvg}), Mismatch::kRefuse,
     "only bsp's clocks and fedavg's rounds combine the workers' updates on servers by a rule"},
    {"rounds", kFedAvg, Mismatch::kRefuse, kRounds},
    {"participation", kFedAvg, Mismatch::kRefuse, kRounds},
    {"local-epochs", kFedAvg, Mismatch::kRefuse, kRounds},
    {"local-steps", kFedAvg, Mismatch::kRefuse, kRounds},
    {"round-timeout", kFedAvg, Mismatch::kRefuse, kRounds},
    {"client-dropout", kFedAvg, Mismatch::kRefuse, kRounds},
    {"prox-mu", kFedAvg, Mismatch::kRefuse, kRounds},
    {"server-lr", kFedAvg, Mismatch::kRefuse, kRounds},
    {"server-optimizer", kFedAvg, Mismatch::kRefuse, kRounds},
    {"secure-aggregation", kFedAvg, Mismatch::kRefuse, kRounds},
    {"secagg-threshold", kFedAvg, Mismatch::kRefuse, kRounds},
    {"secagg-neighbours", kFedAvg, Mismatch::kRefuse, kRounds},
    // Output
    {"eval-every", kAllModes & ~kFedAvg, Mismatch::kRefuse,
     "a federated client trains a replica of its own between rounds; the servers' model is "
     "evaluated at the end"},
}};

// "bsp, asp and ssp" of the families in `modes`.
std::string FamilyList(uint32_t modes) {
  std::vector<std::string> names;
  for (ModeFamily f : kModeFamilies) {
    if (modes & Bit(f)) names.push_back(FamilyName(f));
  }
  if (names.size() < 2) return absl::StrJoin(names, "");
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " and ", last);
}

// "--servers" or "job.toml:3: servers", as the user gave it.
std::string Given(const std::string& flag, const JobConfig::Origin& origin) {
  if (origin.file.empty()) return absl::StrCat("--", flag);
  return absl::StrFormat("%s:%d: %s", origin.file, origin.line, flag);
}

constexpr const char* kGenFlags[] = {"gen-rows", "gen-test-rows", "gen-features", "gen-nnz"};

}  // namespace

ModeFamily FamilyOf(const SyncMode& sync) {
  switch (sync.kind) {
    case SyncKind::kBsp:
      return ModeFamily::kBsp;
    case SyncKind::kAsp:
      return ModeFamily::kAsp;
    case SyncKind::kSsp:
      return ModeFamily::kSsp;
    case SyncKind::kGossip:
      return ModeFamily::kGossip;
    case SyncKind::kAllReduce:
      return ModeFamily::kAllReduce;
    case SyncKind::kHybrid:
      return ModeFamily::kHybrid;
    case SyncKind::kFedAvg:
      return ModeFamily::kFedAvg;
  }
  return ModeFamily::kBsp;
}

const char* FamilyName(ModeFamily family) {
  switch (family) {
    case ModeFamily::kBsp:
      return "bsp";
    case ModeFamily::kAsp:
      return "asp";
    case ModeFamily::kSsp:
      return "ssp";
    case ModeFamily::kGossip:
      return "gossip";
    case ModeFamily::kAllReduce:
      return "allreduce";
    case ModeFamily::kHybrid:
      return "hybrid";
    case ModeFamily::kFedAvg:
      return "fedavg";
  }
  return "?";
}

std::vector<IgnoredFlag> IgnoredFlags(const SyncMode& sync, const JobConfig& config) {
  std::vector<IgnoredFlag> out;
  const ModeFamily family = FamilyOf(sync);
  // The mode was chosen on the command line: a job file's setting for another mode is the
  // file's, not a mistake of this command.
  const auto sync_given = config.given.find("sync");
  const bool mode_by_flag = sync_given != config.given.end() && sync_given->second.file.empty();
  for (const FlagScope& row : kFlagScopes) {
    const auto given = config.given.find(row.flag);
    if (given == config.given.end() || (row.modes & Bit(family))) continue;
    const bool flag_by_flag = given->second.file.empty();
    const bool explicit_mismatch = flag_by_flag || !mode_by_flag;
    IgnoredFlag ignored{row.flag, row.mismatch == Mismatch::kRefuse && explicit_mismatch, ""};
    ignored.message = absl::StrFormat(
        "%s is for --sync %s, not %s (%s)%s", Given(row.flag, given->second), FamilyList(row.modes),
        FamilyName(family), row.why, ignored.refused ? "" : ": ignored");
    out.push_back(std::move(ignored));
  }
  // No data is generated with a training file, or for workers of one's own.
  const bool external = config.given.count("external-workers") > 0;
  if (!config.train.empty() || external) {
    for (const char* flag : kGenFlags) {
      const auto given = config.given.find(flag);
      if (given == config.given.end()) continue;
      out.push_back(IgnoredFlag{
          flag, false,
          absl::StrCat(Given(flag, given->second), " shapes generated data, and ",
                       external ? "--external-workers bring their own" : "--train is given",
                       ": ignored")});
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> CheckFlagsApply(const SyncMode& sync,
                                                         const JobConfig& config) {
  std::vector<std::string> warnings;
  for (IgnoredFlag& ignored : IgnoredFlags(sync, config)) {
    if (ignored.refused) {
      return absl::InvalidArgumentError(
          absl::StrCat(ignored.message, "; leave it out, or give --sync one of those"));
    }
    warnings.push_back(std::move(ignored.message));
  }
  return warnings;
}

std::string FlagModesMarkdown() {
  std::string md = "| flag |";
  std::string rule = "| --- |";
  for (ModeFamily f : kModeFamilies) {
    absl::StrAppend(&md, " ", FamilyName(f), " |");
    absl::StrAppend(&rule, " :-: |");
  }
  absl::StrAppend(&md, " given for another mode |\n", rule, " --- |\n");
  for (const FlagScope& row : kFlagScopes) {
    absl::StrAppend(&md, "| `--", row.flag, "` |");
    for (ModeFamily f : kModeFamilies) absl::StrAppend(&md, (row.modes & Bit(f)) ? " ✓ |" : " |");
    absl::StrAppend(&md, " ", row.mismatch == Mismatch::kRefuse ? "refused" : "warning", ": ",
                    row.why, " |\n");
  }
  return md;
}

}  // namespace syncline
