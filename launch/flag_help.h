// syncline-launch's help: its flags in the sections of FlagGroup (launch/job_config.h), on the
// terminal (--help) and as the Markdown of docs/FLAGS.md (--help-markdown), both from the one
// CLI11 app, so that the reference cannot drift from the program.
//
// Thread-safety: the formatter is immutable once made; FlagsMarkdown reads `app` only.
#ifndef SYNCLINE_LAUNCH_FLAG_HELP_H_
#define SYNCLINE_LAUNCH_FLAG_HELP_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace syncline {

// A formatter that prints the description, the usage, the positionals, then the options section
// by section in the order of kFlagGroups (options of another group after them, hidden ones not
// at all), then the footer.
std::shared_ptr<CLI::Formatter> GroupedHelpFormatter();

// A Markdown table of `options`: flag, value, default, meaning, and with `job_file_keys` the key
// of each in a job file.
std::string OptionsMarkdownTable(const std::vector<const CLI::Option*>& options,
                                 bool job_file_keys = true);

// docs/FLAGS.md: `intro`, then a table per section of every visible option of `app` (flag,
// value, default, job-file key, meaning), then `outro`.
std::string FlagsMarkdown(const CLI::App& app, const std::string& intro, const std::string& outro);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_FLAG_HELP_H_
