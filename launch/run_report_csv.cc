// RunReport's CSV outputs: OUT/metrics.csv (a row per worker's progress report) and
// OUT/embedding.csv (a row per server's embedding figures), continued by a resumed run.
#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "launch/run_report.h"

namespace syncline {

namespace fs = std::filesystem;

absl::Status RunReport::Open() {
  absl::MutexLock lock(&mu_);
  std::error_code ec;
  fs::create_directories(fs::path(out_) / "logs", ec);
  const std::string path = (fs::path(out_) / "metrics.csv").string();
  std::string header =
      "wall_seconds,worker,clock,epoch,train_loss,examples,staleness,consensus,world_size";
  for (const char* part : StepSplit::kParts) absl::StrAppend(&header, ",", part, "_s");
  // --dp: the epsilon the worker's steps (a client's rounds) have spent, by the accountant.
  if (privacy_) absl::StrAppend(&header, ",epsilon");
  metrics_wall_offset_ = OpenCsv(path, header, metrics_, /*clock_column=*/2);
  if (ec || !metrics_) return absl::PermissionDeniedError(absl::StrFormat("cannot write %s", path));
  return absl::OkStatus();
}

double RunReport::OpenCsv(const std::string& path, const std::string& header, std::ofstream& out,
                          int clock_column) {
  std::error_code ec;
  const bool append = resumed_from_ >= 0 && fs::file_size(path, ec) > 0 && !ec;
  double last_wall = 0;
  if (append) {
    std::ifstream in(path);
    std::string line, kept;
    size_t missing = 0;  // columns that `header` adds to the file's
    if (std::getline(in, line)) {
      if (line != header && header.starts_with(line + ",")) {
        missing = std::count(header.begin() + line.size(), header.end(), ',');
        line = header;
      }
      kept = line + "\n";
    }
    while (std::getline(in, line)) {
      const std::vector<absl::string_view> f = absl::StrSplit(line, ',');
      double wall = 0;
      int64_t clock = 0;
      if (in.eof() || !absl::SimpleAtod(f[0], &wall) ||
          (clock_column >= 0 && (f.size() <= static_cast<size_t>(clock_column) ||
                                 !absl::SimpleAtoi(f[clock_column], &clock)))) {
        continue;  // unreadable, or the last line without its newline: cut short
      }
      last_wall = std::max(last_wall, wall);
      if (clock_column < 0 || clock <= resumed_from_) {
        kept += line + std::string(missing, ',') + "\n";
      }
    }
    in.close();
    // Replaced whole (a crash leaves the old file or the new one), or, where that fails,
    // rewritten in place: never appended to unfiltered.
    const std::string temp = path + ".tmp";
    std::ofstream rewrite(temp, std::ios::trunc);
    rewrite << kept;
    rewrite.close();
    bool replaced = false;
    if (rewrite) {
      fs::rename(temp, path, ec);
      replaced = !ec;
    }
    if (!replaced) {
      fs::remove(temp, ec);
      out.open(path, std::ios::trunc);
      out << kept;
      out.flush();
      return last_wall;
    }
  }
  out.open(path, append ? std::ios::app : std::ios::trunc);
  if (!append) out << header << "\n";
  out.flush();
  return last_wall;
}

void RunReport::WriteEmbeddingRow(int server, wire::ServerStats::Reader s) {
  if (!s.hasEmbedding()) return;
  if (!embedding_csv_.is_open()) {
    embedding_wall_offset_ =
        OpenCsv((fs::path(out_) / "embedding.csv").string(),
                "wall_seconds,server,rows_in_memory,rows_on_disk,admitted,rejected,expired,"
                "evictions,memory_hit_rate,memory_bytes",
                embedding_csv_);
  }
  auto e = s.getEmbedding();
  const uint64_t touches = e.getMemoryHits() + e.getDiskHits();
  embedding_csv_ << absl::StrFormat(
      "%.3f,%d,%d,%d,%d,%d,%d,%d,%.6f,%d\n", WallSeconds(embedding_wall_offset_), server,
      e.getRowsInMemory(), e.getRowsOnDisk(), e.getAdmitted(), e.getRejected(), e.getExpired(),
      e.getEvictions(), touches ? static_cast<double>(e.getMemoryHits()) / touches : 1.0,
      e.getMemoryBytes());
  embedding_csv_.flush();
}
}  // namespace syncline
