// syncline-gen: writes synthetic train/test data from a known random sparse model, with
// `syncline-gen criteo ...`, Criteo-format click data from a known model with interactions, or
// with `syncline-gen fashion-mnist ...`, the Fashion-MNIST images converted to libsvm files.
// Each subcommand is a function of its own file (programs/gen_common.h lists them).
//
// Exit codes: 0 success (and --help), 1 when an output cannot be written, 2 for a bad flag or
// value, or an input file (fashion-mnist) that is missing or malformed.
#include <string>

#include "programs/gen_common.h"

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "criteo") return syncline::gen::CriteoMain(argc - 1, argv + 1);
  if (command == "fashion-mnist") return syncline::gen::FashionMnistMain(argc - 1, argv + 1);
  return syncline::gen::SyntheticMain(argc, argv);
}
