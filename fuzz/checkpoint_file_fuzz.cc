// Fuzz target: the checkpoint reader (ValidateCheckpoint, FindNewestCheckpoint) over a folder
// whose files are hostile in kind and size, not only in content: each of MANIFEST, a receipt
// and a file it lists is, as the input chooses, a regular file with the input's bytes, a FIFO,
// a link (to /dev/zero, or to a file), a folder, or a sparse file of a size up to 16 GiB.
// The reader must answer every one with a status, at once: no hang on a FIFO (libFuzzer's
// -timeout), no unbounded allocation (-rss_limit_mb), no crash.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "checkpoint/text_format.h"
#include "fuzz/fuzz_util.h"

namespace {

namespace fs = std::filesystem;

// Makes `path` the kind of file `kind` names, from the input.
void MakeFile(const std::string& path, uint8_t kind, syncline::fuzz::Input& in) {
  std::error_code ec;
  fs::remove_all(path, ec);
  switch (kind % 7) {
    case 0:
    case 1: {  // a regular file with the input's bytes (sealed half of the time)
      std::string contents(in.Piece(1 << 12));
      if (kind & 8) {
        syncline::SealedTextBuilder b((kind & 16) ? "manifest" : "receipt", 1);
        b.AddLine("clock", {"7"});
        b.AddLine("node", {"ps0"});
        b.AddLine("nodes", {"ps0"});
        b.AddLine("file", {"ps0/t.sst", std::to_string(contents.size()), "00000000"});
        contents = b.Seal() + contents;
      }
      std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
      break;
    }
    case 2:
      (void)mkfifo(path.c_str(), 0600);
      break;
    case 3:
      fs::create_symlink("/dev/zero", path, ec);
      break;
    case 4:
      fs::create_symlink(fs::path(path).parent_path() / "w0.receipt", path, ec);
      break;
    case 5:
      fs::create_directories(path, ec);
      break;
    case 6: {  // sparse: a size the reader must refuse or stream, never allocate
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd >= 0) {
        (void)!ftruncate(fd, static_cast<off_t>(in.U32()) * 4);
        close(fd);
      }
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = [] {
    std::string d = fs::temp_directory_path() / "syncline_fuzz_ckpt_files_XXXXXX";
    return std::string(mkdtemp(d.data()));
  }();
  syncline::fuzz::Input in(data, size);
  std::error_code ec;
  fs::remove_all(root, ec);
  const std::string dir = syncline::CheckpointDir(root, 7);
  fs::create_directories(dir + "/ps0", ec);
  MakeFile(dir + "/MANIFEST", in.Byte(), in);
  MakeFile(dir + "/ps0.receipt", in.Byte(), in);
  MakeFile(dir + "/w0.receipt", in.Byte(), in);
  MakeFile(dir + "/ps0/t.sst", in.Byte(), in);
  (void)syncline::ReadManifest(dir);
  (void)syncline::ReadReceipt(dir, "ps0");
  (void)syncline::ValidateCheckpoint(dir);
  (void)syncline::FindNewestCheckpoint(root);
  return 0;
}
