#include "launch/batch_script.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "job/option_text.h"
#include "launch/cluster.h"

namespace syncline {
namespace {

// A path for an #SBATCH directive: in double quotes, which sbatch's directive reader groups
// by, and with "%" doubled (Slurm's filename patterns, such as %j, start with it).
absl::StatusOr<std::string> DirectivePath(const std::string& what, const std::string& path) {
  if (absl::Status s = RefuseControlCharacters(what, path); !s.ok()) return s;
  std::string out = "\"";
  for (char c : path) {
    if (c == '"' || c == '\\') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s %s holds a %s, which an #SBATCH line cannot hold safely: choose another --out", what,
          path, c == '"' ? "double quote" : "backslash"));
    }
    out += c == '%' ? std::string("%%") : std::string(1, c);
  }
  return out + "\"";
}

}  // namespace

absl::StatusOr<std::string> BatchScriptText(const BatchScript& script) {
  std::string command = ShellQuote(script.launcher);
  if (absl::Status s = RefuseControlCharacters("the launcher's path", script.launcher); !s.ok()) {
    return s;
  }
  for (const std::string& a : script.args) {
    if (absl::Status s =
            RefuseControlCharacters(absl::StrCat("the argument ", absl::CHexEscape(a)), a);
        !s.ok()) {
      return s;
    }
    absl::StrAppend(&command, " ", ShellQuote(a));
  }
  if (absl::Status s = RefuseControlCharacters("the working folder", script.working_dir); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> output = DirectivePath("--out", script.output);
  if (!output.ok()) return output.status();
  return absl::StrCat(
      "#!/bin/bash\n",
      "# Written by syncline-launch --sbatch: the job's coordinator runs in this batch step,\n",
      "# its nodes in the allocation's tasks (srun).\n", "#SBATCH --job-name=syncline\n",
      "#SBATCH --ntasks=", script.tasks, "\n", "#SBATCH --output=", *output, "\n",
      "#SBATCH --open-mode=append\n", "#SBATCH --requeue\n", "cd ", ShellQuote(script.working_dir),
      " || exit 1\n", "exec ", command, "\n");
}

absl::Status WriteBatchScript(const std::string& path, const std::string& text) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot replace ", path));
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0700);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("cannot write ", path));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace syncline
