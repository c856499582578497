// What syncline-gen's subcommands share (programs/gen_main.cc picks one): the exit codes,
// output files, a flag check and the parsing of the command line. Each subcommand is a
// function of its own file: SyntheticMain (gen_synthetic.cc), CriteoMain (gen_criteo.cc) and
// FashionMnistMain (gen_fashion_mnist.cc).
//
// Thread-safety: main's thread only.
#ifndef SYNCLINE_PROGRAMS_GEN_COMMON_H_
#define SYNCLINE_PROGRAMS_GEN_COMMON_H_

#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"

namespace syncline::gen {

// Exit codes: 0 success (and --help), 1 when an output cannot be written, 2 for a bad flag or
// value, or an input file (fashion-mnist) that is missing or malformed.
inline constexpr int kExitWriteFailed = 1;
inline constexpr int kExitUsage = 2;

// `path` opened for writing (truncated); null, after a message naming it on standard error,
// when it cannot be.
std::unique_ptr<std::ofstream> OpenOutput(const std::string& path);

// Refuses a negative count: CLI11 would wrap "-3" around to 2^64 - 3 for unsigned options.
CLI::Validator NotNegative();

// Parses the command line into `app`: nullopt to go on, else the exit code (0 after --help,
// which goes to standard output; kExitUsage after the error, on standard error, which names
// `program`, e.g. "syncline-gen criteo").
std::optional<int> Parse(CLI::App& app, int argc, char** argv, const char* program);

// The subcommands; argv[0] is the subcommand's name ("criteo", "fashion-mnist"), or the
// program's for the synthetic data of a sparse model.
int SyntheticMain(int argc, char** argv);
int CriteoMain(int argc, char** argv);
int FashionMnistMain(int argc, char** argv);

}  // namespace syncline::gen

#endif  // SYNCLINE_PROGRAMS_GEN_COMMON_H_
