#include "tools/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace syncline {
namespace {

// Refuses headers that promise more than this (a forged or corrupt count), before reading.
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 36;  // 64 GiB
// The data is read and the buffer grown this much at a time, so that a header promising much
// more than the file holds costs no more memory than the file.
constexpr size_t kReadChunk = size_t{64} << 20;

// A file read through zlib: gzip data is decompressed, anything else is read as it is.
class GzReader {
 public:
  static absl::StatusOr<std::unique_ptr<GzReader>> Open(const std::string& path) {
    errno = 0;
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
      // errno is 0 only when zlib could not allocate its state.
      return errno != 0 ? absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path))
                        : absl::ResourceExhaustedError(
                              absl::StrCat("cannot open ", path, ": out of memory"));
    }
    gzbuffer(file, 1 << 20);
    return std::unique_ptr<GzReader>(new GzReader(path, file));
  }
  ~GzReader() { gzclose_r(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes into buf; fewer only at the end of the data. Errors: DataLoss for
  // corrupt or cut-off gzip data, or a read error.
  absl::StatusOr<size_t> Read(void* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
      const unsigned want =
          static_cast<unsigned>(std::min<size_t>(n - got, std::numeric_limits<int>::max()));
      const int r = gzread(file_, static_cast<char*>(buf) + got, want);
      if (r > 0) got += static_cast<size_t>(r);
      if (r < 0 || static_cast<unsigned>(r) < want) break;
    }
    if (got < n) {
      // A short read: the end of the data, or an error (gzread returns what it had before it).
      int code = Z_OK;
      const char* message = gzerror(file_, &code);
      if (code == Z_ERRNO) {
        return absl::DataLossError(absl::StrCat(path_, ": read error: ", std::strerror(errno)));
      }
      if (code == Z_BUF_ERROR) {
        return absl::DataLossError(
            absl::StrCat(path_, ": the gzip data is cut off (unexpected end of file)"));
      }
      if (code != Z_OK) {
        // zlib's message starts with the path.
        absl::string_view what = message;
        absl::ConsumePrefix(&what, absl::StrCat(path_, ": "));
        return absl::DataLossError(absl::StrCat(path_, ": corrupt gzip data: ", what));
      }
    }
    return got;
  }

 private:
  GzReader(std::string path, gzFile file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  gzFile file_;
};

uint32_t BigEndian32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// What an IDX magic number is, for error messages.
std::string DescribeMagic(uint32_t magic) {
  if (magic == kIdxLabelsMagic) return absl::StrFormat("0x%08x, an IDX label file", magic);
  if (magic == kIdxImagesMagic) return absl::StrFormat("0x%08x, an IDX image file", magic);
  return absl::StrFormat("0x%08x", magic);
}

// Reads an IDX file of unsigned bytes with the given magic: its sizes into *dims, then checks
// them with check_dims (which returns the element count, or an error), then exactly that many
// elements. `noun` names the entries of the first dimension ("images", "labels").
template <typename CheckDims>
absl::StatusOr<std::vector<uint8_t>> ReadIdx(const std::string& path, uint32_t expected_magic,
                                             const char* noun, std::vector<uint32_t>* dims,
                                             CheckDims&& check_dims) {
  absl::StatusOr<std::unique_ptr<GzReader>> reader = GzReader::Open(path);
  if (!reader.ok()) return reader.status();
  const std::string expected = DescribeMagic(expected_magic);

  unsigned char magic_bytes[4];
  absl::StatusOr<size_t> got = (*reader)->Read(magic_bytes, sizeof(magic_bytes));
  if (!got.ok()) return got.status();
  if (*got == 0) {
    return absl::DataLossError(
        absl::StrFormat("%s: the file is empty (expected magic %s)", path, expected));
  }
  if (*got < sizeof(magic_bytes)) {
    return absl::DataLossError(absl::StrFormat(
        "%s: truncated header: %d bytes, fewer than the 4 of an IDX magic number", path, *got));
  }
  const uint32_t magic = BigEndian32(magic_bytes);
  if (magic_bytes[0] != 0 || magic_bytes[1] != 0) {
    return absl::DataLossError(absl::StrFormat(
        "%s: not an IDX file: wrong magic number 0x%08x (expected %s)", path, magic, expected));
  }
  if (magic_bytes[2] != 0x08) {
    return absl::DataLossError(absl::StrFormat(
        "%s: wrong magic number 0x%08x: IDX element type 0x%02x is not supported, only "
        "unsigned bytes (0x08; expected %s)",
        path, magic, magic_bytes[2], expected));
  }
  if (magic != expected_magic) {
    return absl::DataLossError(absl::StrFormat("%s: wrong magic number %s (expected %s)", path,
                                               DescribeMagic(magic), expected));
  }

  const size_t num_dims = magic_bytes[3];
  std::vector<unsigned char> size_bytes(4 * num_dims);
  got = (*reader)->Read(size_bytes.data(), size_bytes.size());
  if (!got.ok()) return got.status();
  if (*got < size_bytes.size()) {
    return absl::DataLossError(
        absl::StrFormat("%s: truncated header: the file ends after %d of the %d bytes of its "
                        "sizes",
                        path, *got, size_bytes.size()));
  }
  dims->resize(num_dims);
  for (size_t i = 0; i < num_dims; ++i) (*dims)[i] = BigEndian32(&size_bytes[4 * i]);
  absl::StatusOr<uint64_t> total = check_dims(*dims);
  if (!total.ok()) return total.status();

  const uint64_t per_entry = dims->front() == 0 ? 1 : *total / dims->front();
  std::vector<uint8_t> data;
  while (data.size() < *total) {
    const size_t before = data.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(*total - before, kReadChunk));
    data.resize(before + want);
    got = (*reader)->Read(data.data() + before, want);
    if (!got.ok()) return got.status();
    if (*got < want) {
      const uint64_t have = before + *got;
      return absl::DataLossError(
          absl::StrFormat("%s: truncated: the header promises %d %s (%d bytes after the header), "
                          "the file ends after %d bytes (%d whole %s)",
                          path, dims->front(), noun, *total, have, have / per_entry, noun));
    }
  }
  unsigned char extra;
  got = (*reader)->Read(&extra, 1);
  if (!got.ok()) return got.status();
  if (*got != 0) {
    return absl::DataLossError(
        absl::StrFormat("%s: data after the last of the header's %d %s: the file is longer than "
                        "its header says",
                        path, dims->front(), noun));
  }
  return data;
}

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  std::vector<uint32_t> dims;
  auto check = [&path](const std::vector<uint32_t>& d) -> absl::StatusOr<uint64_t> {
    if (d[1] == 0 || d[2] == 0) {
      return absl::DataLossError(absl::StrFormat(
          "%s: images of %dx%d pixels: rows and columns must be at least 1", path, d[1], d[2]));
    }
    // Each factor is below 2^32, so rows * cols cannot overflow; the count is checked by division.
    const uint64_t per_image = uint64_t{d[1]} * d[2];
    if (per_image > kMaxIdxBytes || d[0] > kMaxIdxBytes / per_image) {
      return absl::DataLossError(
          absl::StrFormat("%s: the header promises %d images of %dx%d pixels, more than the %d "
                          "bytes this reader takes",
                          path, d[0], d[1], d[2], kMaxIdxBytes));
    }
    return d[0] * per_image;
  };
  absl::StatusOr<std::vector<uint8_t>> pixels =
      ReadIdx(path, kIdxImagesMagic, "images", &dims, check);
  if (!pixels.ok()) return pixels.status();
  IdxImages images;
  images.rows = dims[1];
  images.cols = dims[2];
  images.pixels = std::move(*pixels);
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path) {
  std::vector<uint32_t> dims;
  auto check = [](const std::vector<uint32_t>& d) -> absl::StatusOr<uint64_t> { return d[0]; };
  return ReadIdx(path, kIdxLabelsMagic, "labels", &dims, check);
}

absl::StatusOr<LabeledImages> ReadLabeledImages(const std::string& images_path,
                                                const std::string& labels_path, int num_classes) {
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_classes must be in [1, 256], got %d", num_classes));
  }
  LabeledImages data;
  absl::StatusOr<IdxImages> images = ReadIdxImages(images_path);
  if (!images.ok()) return images.status();
  data.images = std::move(*images);
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(labels_path);
  if (!labels.ok()) return labels.status();
  data.labels = std::move(*labels);
  if (data.labels.size() != data.images.count()) {
    return absl::DataLossError(absl::StrFormat(
        "%s holds %d images but %s holds %d labels: the counts of images and labels differ",
        images_path, data.images.count(), labels_path, data.labels.size()));
  }
  for (size_t i = 0; i < data.labels.size(); ++i) {
    if (data.labels[i] >= num_classes) {
      return absl::DataLossError(
          absl::StrFormat("%s: label %d of entry %d (0-based) is not a class in [0, %d)",
                          labels_path, data.labels[i], i, num_classes));
    }
  }
  return data;
}

absl::StatusOr<LibsvmConversion> WriteIdxAsLibsvm(const LabeledImages& data, std::ostream& out,
                                                  int num_classes, uint64_t max_rows) {
  const IdxImages& images = data.images;
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_classes must be in [1, 256], got %d", num_classes));
  }
  if (data.labels.size() != images.count()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d images but %d labels", images.count(), data.labels.size()));
  }
  // ":value" for every pixel value, with value = pixel / 255 to 4 significant digits.
  std::string value_text[256];
  for (int p = 0; p < 256; ++p) value_text[p] = absl::StrFormat(":%.4g", p / 255.0);
  std::string label_text[256];
  for (int c = 0; c < 256; ++c) label_text[c] = absl::StrCat(c);

  LibsvmConversion result;
  result.features = images.pixels_per_image();
  result.rows_per_class.assign(num_classes, 0);
  const uint64_t rows = std::min<uint64_t>(max_rows, images.count());
  const uint64_t last = result.features - 1;
  std::string buffer;
  buffer.reserve(kReadChunk / 16);
  char id_text[24];
  for (uint64_t i = 0; i < rows; ++i) {
    const uint8_t label = data.labels[i];
    if (label >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("label %d of row %d is not a class in [0, %d)", label, i, num_classes));
    }
    ++result.rows_per_class[label];
    buffer += label_text[label];
    const uint8_t* pixels = images.image(i);
    for (uint64_t id = 0; id <= last; ++id) {
      // Zero pixels are left out, except the first and the last: see the header.
      if (pixels[id] == 0 && id != 0 && id != last) continue;
      buffer += ' ';
      buffer.append(id_text, std::to_chars(id_text, id_text + sizeof(id_text), id).ptr);
      buffer += value_text[pixels[id]];
    }
    buffer += '\n';
    if (buffer.size() >= kReadChunk / 32 || i + 1 == rows) {
      out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      buffer.clear();
      if (!out) return absl::DataLossError("writing the libsvm output failed");
    }
  }
  result.rows = rows;
  return result;
}

}  // namespace syncline
