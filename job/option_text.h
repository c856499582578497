// What the text of an option may hold. Options become paths, arguments and lines of generated
// files (a Slurm batch script, a hostfile, the checkpoint manifest): a control character in
// one (a newline in a job file's `out`) could start a line of its own there and choose what
// runs. No option needs one, so every option's text is refused with one, naming the option.
//
// Thread-safety: stateless functions; safe from any thread.
#ifndef SYNCLINE_JOB_OPTION_TEXT_H_
#define SYNCLINE_JOB_OPTION_TEXT_H_

#include <string_view>

#include "absl/status/status.h"

namespace syncline {

// InvalidArgument "WHAT: holds the control character 0xNN at byte I ..." when `value` holds a
// byte below 0x20 or 0x7f; OK otherwise. `what` names the text: a flag ("--out"), or a piece
// of a generated file.
absl::Status RefuseControlCharacters(std::string_view what, std::string_view value);

}  // namespace syncline

#endif  // SYNCLINE_JOB_OPTION_TEXT_H_
