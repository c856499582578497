// Fuzz target: the checkpoint's text files (receipts and the manifest) and the embedding
// store's row values, all read back from disk where they may be damaged. Half of the inputs
// are sealed first (a correct CRC line around the input's lines), so that the body parsers
// are reached, not only the seal check.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/text_format.h"
#include "embeddings/row_codec.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path() / "syncline_fuzz_ckpt_XXXXXX";
    return std::string(mkdtemp(d.data()));
  }();
  syncline::fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  const std::string_view text = in.Piece(1 << 14);
  std::string contents(text);
  if (mode & 1) {
    syncline::SealedTextBuilder b((mode & 2) ? "manifest" : "receipt", 1);
    for (absl::string_view line :
         absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
      std::vector<std::string> tokens = absl::StrSplit(line, ' ');
      if (tokens.empty() || tokens[0].empty()) continue;
      const std::string key = tokens[0];
      tokens.erase(tokens.begin());
      bool plain = true;
      for (char c : key) plain = plain && ((c >= 'a' && c <= 'z') || c == '-' || c == '_');
      if (plain) b.AddLine(key, tokens);
    }
    contents = b.Seal();
  }
  std::ofstream(dir + "/MANIFEST", std::ios::trunc | std::ios::binary) << contents;
  std::ofstream(dir + "/w0.receipt", std::ios::trunc | std::ios::binary) << contents;
  (void)syncline::ReadManifest(dir);
  (void)syncline::ReadReceipt(dir, "w0");

  const std::string_view row = in.Rest();
  syncline::RowShape shape{.dim = 1u + mode % 8, .state_per_weight = (mode >> 3) % 3u};
  std::vector<float> floats(shape.floats());
  int64_t step = 0, last_touch = 0;
  (void)syncline::DecodeRowValue(shape, 7, row.data(), row.size(), &step, &last_touch,
                                 floats.data());
  return 0;
}
