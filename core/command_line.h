// The command-line convention every Syncline binary follows: --help prints the usage and exits
// 0; a bad flag or value prints one line naming it, a hint, and exits 2.
#ifndef SYNCLINE_CORE_COMMAND_LINE_H_
#define SYNCLINE_CORE_COMMAND_LINE_H_

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

namespace syncline {

// Parses argv into `app`. Returns nullopt when the program should go on, or the exit code.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv,
                                           const char* program) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << program << ": " << e.what() << "\nRun with --help for usage.\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace syncline

#endif  // SYNCLINE_CORE_COMMAND_LINE_H_
