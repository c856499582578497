#include "collective/dense_collective.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collective/communicator.h"

namespace syncline {
namespace {

constexpr char kMagic[] = "SLRD1";

bool Printable(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

std::string RankName(int r, const RankDevice& d) {
  return absl::StrCat("w", r, " (host ", d.host, ")");
}

}  // namespace

std::string RankDevice::Describe() const {
  if (!gpu()) return note.empty() ? "cpu" : absl::StrCat("cpu: ", note);
  return absl::StrCat("gpu ", pci_bus_id.empty() ? "?" : pci_bus_id, " (",
                      uuid.empty() ? "no uuid" : uuid, ")");
}

bool SameGpu(const RankDevice& a, const RankDevice& b) {
  if (!a.gpu() || !b.gpu()) return false;
  if (!a.uuid.empty() && a.uuid == b.uuid) return true;
  return a.host == b.host && !a.pci_bus_id.empty() && a.pci_bus_id == b.pci_bus_id;
}

DenseChoice ChooseDenseCollective(std::span<const RankDevice> ranks) {
  const char* const kFallback = ", so the dense collectives run on the CPU with host staging";
  if (ranks.empty()) return {false, "no ranks"};
  std::vector<std::string> cpu;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].gpu()) {
      cpu.push_back(RankName(static_cast<int>(r), ranks[r]) + " " + ranks[r].Describe());
    }
  }
  if (!cpu.empty()) {
    const bool plain = std::all_of(ranks.begin(), ranks.end(),
                                   [](const RankDevice& d) { return !d.gpu() && d.note.empty(); });
    if (plain) return {false, "every rank computes on the CPU"};
    return {false,
            absl::StrCat("not every rank is on a GPU (", absl::StrJoin(cpu, ", "), ")", kFallback)};
  }
  for (size_t a = 0; a < ranks.size(); ++a) {
    for (size_t b = a + 1; b < ranks.size(); ++b) {
      if (!SameGpu(ranks[a], ranks[b])) continue;
      const RankDevice& d = ranks[a];
      return {false, absl::StrCat("two ranks share GPU ", d.pci_bus_id.empty() ? "?" : d.pci_bus_id,
                                  " (", d.uuid.empty() ? "no uuid" : d.uuid, ") on host ", d.host,
                                  " (w", a, " and w", b, "): NCCL refuses that", kFallback)};
    }
  }
  return {true,
          absl::StrCat("every one of the ", ranks.size(), " ranks is on a GPU of its own: NCCL")};
}

absl::StatusOr<std::vector<std::byte>> EncodeRankDevice(const RankDevice& device) {
  for (std::string_view field : {std::string_view(device.host), std::string_view(device.pci_bus_id),
                                 std::string_view(device.uuid)}) {
    if (!Printable(field)) {
      return absl::InvalidArgumentError("a device field holds a control character");
    }
  }
  std::string text =
      absl::StrCat(kMagic, "\n", device.host, "\n", device.pci_bus_id, "\n", device.uuid, "\n");
  if (text.size() >= kRankDeviceBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a device description of ", text.size(),
                                                   " bytes is longer than ", kRankDeviceBytes - 1,
                                                   " (host name '", device.host, "')"));
  }
  // The note is only for messages: cut it to what fits, without control characters.
  std::string note = device.note;
  for (char& c : note) {
    if (!Printable(std::string_view(&c, 1))) c = ' ';
  }
  note.resize(std::min(note.size(), kRankDeviceBytes - 2 - text.size()));
  absl::StrAppend(&text, note, "\n");
  std::vector<std::byte> block(kRankDeviceBytes, std::byte{0});
  std::memcpy(block.data(), text.data(), text.size());
  return block;
}

absl::StatusOr<RankDevice> DecodeRankDevice(std::span<const std::byte> block) {
  if (block.size() != kRankDeviceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a device block of ", block.size(), " bytes; expected ", kRankDeviceBytes));
  }
  std::string_view all(reinterpret_cast<const char*>(block.data()), block.size());
  const size_t end = all.find('\0');
  std::string_view text = all.substr(0, end);
  if (end != std::string_view::npos && all.find_first_not_of('\0', end) != std::string_view::npos) {
    return absl::InvalidArgumentError("a device block has bytes after its end");
  }
  std::vector<std::string> lines =
      absl::StrSplit(absl::string_view(text.data(), text.size()), '\n');
  // Magic, host, bus id, uuid, note, and the empty piece after the last newline.
  if (lines.size() != 6 || lines[0] != kMagic || !lines[5].empty()) {
    return absl::InvalidArgumentError("a device block is not one (wrong magic or line count)");
  }
  for (size_t i = 1; i < 5; ++i) {
    if (!Printable(lines[i])) {
      return absl::InvalidArgumentError("a device block holds a control character");
    }
  }
  return RankDevice{.host = lines[1], .pci_bus_id = lines[2], .uuid = lines[3], .note = lines[4]};
}

absl::StatusOr<std::vector<RankDevice>> ExchangeRankDevices(Communicator& cpu,
                                                            const RankDevice& mine) {
  auto block = EncodeRankDevice(mine);
  if (!block.ok()) return block.status();
  std::vector<std::byte> all;
  if (auto s = cpu.AllGatherBytes(*block, &all); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("trading the ranks' devices: ", s.message()));
  }
  std::vector<RankDevice> devices;
  for (int r = 0; r < cpu.size(); ++r) {
    auto d = DecodeRankDevice(
        std::span<const std::byte>(all.data() + r * kRankDeviceBytes, kRankDeviceBytes));
    if (!d.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("w", r, " sent ", d.status().message()));
    }
    devices.push_back(*std::move(d));
  }
  return devices;
}

}  // namespace syncline
