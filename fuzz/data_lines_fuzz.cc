// Fuzz target: the training-data parsers on untrusted files: libsvm (both index bases,
// binary and multiclass), CSV, and Criteo lines. Errors are fine; crashes and hangs are not.
#include <cstdint>
#include <string>

#include "data/criteo.h"
#include "data/dataset.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static syncline::fuzz::MemFile* const file = new syncline::fuzz::MemFile();
  syncline::fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  const std::string_view contents = in.Rest();
  if (mode % 4 == 3) {
    syncline::Dataset out;
    uint64_t line_no = 0;
    size_t begin = 0;
    while (begin <= contents.size() && line_no < 64) {
      size_t end = contents.find('\n', begin);
      if (end == std::string_view::npos) end = contents.size();
      (void)syncline::ParseCriteoLine(contents.substr(begin, end - begin), "fuzz", ++line_no, &out);
      begin = end + 1;
    }
    return 0;
  }
  syncline::ReadOptions options;
  options.format = mode % 4 == 2 ? syncline::DataFormat::kCsv : syncline::DataFormat::kLibsvm;
  options.index_base = static_cast<syncline::IndexBase>((mode >> 2) % 3);
  options.num_classes = (mode & 0x20) ? 5 : 2;
  options.num_partitions = 1 + (mode >> 6);
  options.partition = 0;
  (void)syncline::ReadDataset(file->Write(contents), options);
  return 0;
}
