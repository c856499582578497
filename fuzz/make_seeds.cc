// Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/seed-N), each input in its
// target's own layout (see fuzz_util.h's Input): well-formed requests, blocks, checkpoint
// files and data lines for the fuzzer to start from. Run: make_seeds fuzz/corpus
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "compression/codec.h"
#include "core/message.h"
#include "core/table_config.h"
#include "embeddings/row_codec.h"

namespace {

namespace fs = std::filesystem;

std::string U32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

void Save(const fs::path& dir, int n, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + std::to_string(n)), std::ios::binary) << bytes;
}

// A request input: a frame count byte, then each frame length-prefixed.
std::string Frames(syncline::Message m) {
  std::string s(1, static_cast<char>(m.frames().size() - 1));
  for (const syncline::Frame& f : m.frames()) {
    s += U32(static_cast<uint32_t>(f.size()));
    s.append(reinterpret_cast<const char*>(f.data()), f.size());
  }
  return s;
}

syncline::MessageBuilder Request(syncline::wire::MsgType type, uint32_t table, int64_t clock) {
  syncline::MessageBuilder b(type);
  b.header().setRole(syncline::wire::Role::WORKER);
  b.header().setRank(0);
  b.header().setRequestId(7);
  b.header().setTable(table);
  b.header().setClock(clock);
  b.header().setWeight(4);
  return b;
}

// Requests: dense push and pull, sparse push-pull, clock, finish, a table declaration.
void RequestSeeds(const fs::path& dir) {
  using syncline::wire::MsgType;
  int n = 0;
  auto push = Request(MsgType::PUSH, 1, 0);
  push.header().setRangeBegin(10);
  push.header().setRangeEnd(14);
  push.header().setValueCount(4);
  push.AddFrame(syncline::Frame::Own(std::vector<float>{1, 2, 3, 4}));
  Save(dir, n++, Frames(push.Finish()));
  auto pull = Request(MsgType::PULL, 1, 0);
  pull.header().setRangeBegin(0);
  pull.header().setRangeEnd(1000);
  Save(dir, n++, Frames(pull.Finish()));
  auto pp = Request(MsgType::PUSH_PULL, 2, 0);
  pp.header().setKeyCount(2);
  pp.header().setValueCount(8);
  pp.AddFrame(syncline::Frame::Own(std::vector<uint64_t>{5, 1ull << 40}));
  pp.AddFrame(syncline::Frame::Own(std::vector<float>(8, 0.5f)));
  Save(dir, n++, Frames(pp.Finish()));
  Save(dir, n++, Frames(Request(MsgType::CLOCK, 0, 1).Finish()));
  Save(dir, n++, Frames(Request(MsgType::FINISH, 0, 1).Finish()));
  auto declare = Request(MsgType::DECLARE_TABLE, 3, 0);
  syncline::TableConfig c;
  c.id = 3;
  c.dense = true;
  c.num_keys = 64;
  c.dim = 2;
  c.ToWire(declare.header().getBody().initTable());
  Save(dir, n++, Frames(declare.Finish()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds CORPUS_DIR\n";
    return 2;
  }
  const fs::path root = argv[1];
  RequestSeeds(root / "request");
  int n = 0;
  for (auto kind : {syncline::CodecKind::kTopK, syncline::CodecKind::kSign1,
                    syncline::CodecKind::kFp16}) {  // codec: kind byte, n, block
    const std::vector<float> values = {0.5f, -2, 0, 3.25f, -0.125f, 7, 1e-3f, -9};
    std::vector<std::byte> block;
    syncline::Codec::Create({.kind = kind, .ratio = 0.5, .chunk = 4})->Encode(values, &block);
    Save(root / "codec", n++,
         std::string(1, static_cast<char>(static_cast<int>(kind) - 1)) +
             U32(static_cast<uint32_t>(values.size())) +
             std::string(reinterpret_cast<const char*>(block.data()), block.size()));
  }
  n = 0;
  {  // checkpoint text: a real manifest and receipt, as written, and their lines to seal
    const fs::path tmp = fs::temp_directory_path() / "syncline_make_seeds";
    fs::create_directories(tmp);
    syncline::Manifest m{.clock = 40,
                         .unix_seconds = 1700000000,
                         .nodes = {"ps0", "w0"},
                         .job = {{"sync", "bsp"}, {"model", "ctr"}}};
    (void)syncline::WriteManifest(tmp.string(), m);
    (void)syncline::WriteReceipt(tmp.string(),
                                 {.node = "w0", .clock = 40, .files = {{"w0.state", 128, 77}}});
    std::string row;
    const std::vector<float> floats(2 * 3, 0.25f);
    syncline::EncodeRowValue({.dim = 2, .state_per_weight = 2}, 5, 4, floats.data(), &row);
    for (const char* file : {"MANIFEST", "w0.receipt"}) {
      std::ifstream in(tmp / file, std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      // Unsealed (mode 0), with the row of shape dim 2 and 2 state floats per weight (mode 16).
      Save(root / "checkpoint_text", n++, std::string(1, '\x10') + U32(text.size()) + text + row);
      // Sealed again by the target (mode 1/3): the file's body lines.
      Save(root / "checkpoint_text", n++,
           std::string(1, file[0] == 'M' ? '\x13' : '\x11') + U32(text.size()) + text + row);
    }
    fs::remove_all(tmp);
  }
  n = 0;  // checkpoint files: a kind byte per file (MANIFEST, two receipts, a listed file)
  {
    const std::string none = U32(0);
    const std::string sealed_manifest = std::string(1, '\x18') + none;
    const std::string sealed_receipt = std::string(1, '\x08') + none;
    const std::string receipts = sealed_receipt + sealed_receipt;
    const std::string table = std::string(1, '\x00') + U32(4) + "abcd";
    Save(root / "checkpoint_file", n++, sealed_manifest + receipts + table);
    for (char kind : {'\x02', '\x03', '\x04', '\x05'}) {  // FIFO, /dev/zero, link, folder
      Save(root / "checkpoint_file", n++, std::string(1, kind) + receipts + table);
    }
    Save(root / "checkpoint_file", n++, std::string(1, '\x06') + U32(1u << 30) + receipts + table);
    Save(root / "checkpoint_file", n++, sealed_manifest + receipts + std::string(1, '\x02'));
  }
  n = 0;  // data lines: libsvm, CSV, Criteo (mode byte, then the file)
  Save(root / "data_lines", n++, std::string(1, '\x00') + "1 3:1 7:0.5\n0 2:1 # note\n-1 9:2\n");
  Save(root / "data_lines", n++, std::string(1, '\x21') + "4 1:1 2:1\n0 3:1\n");
  Save(root / "data_lines", n++, std::string(1, '\x02') + "label,a,b\n1,0.5,2\n0,1,0\n");
  Save(root / "data_lines", n++,
       std::string(1, '\x03') +
           "1\t1\t2\t\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t68fd1e64\t80e26c9b\t\tfb936136\t7b4723c4"
           "\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a"
           "5f6"
           "\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a1"
           "71ecb"
           "\tc5c50484\te8b83407\n");
  std::cout << "seeds written under " << root << "\n";
  return 0;
}
