// ProcessGroup starts and supervises the local processes of one job (servers, workers) for the
// launcher: it forwards every child's stdout and stderr line by line, reports exits, and makes sure
// no child outlives the launcher or is left as a zombie.
//
// Each child runs in its own process group, so a Ctrl-C on the launcher's terminal reaches only the
// launcher, which then calls TerminateAll(). Each child also gets PR_SET_PDEATHSIG(SIGKILL), so it
// dies even when the launcher is SIGKILLed and has no chance to clean up.
//
// Thread-compatible: one thread drives the object. That thread should live as long as the
// launcher (normally the main thread), because Linux delivers the parent-death signal when the
// *thread* that forked the child exits, not when the process does.

#ifndef SYNCLINE_LAUNCH_PROCESS_GROUP_H_
#define SYNCLINE_LAUNCH_PROCESS_GROUP_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace syncline {

// What to run and how to name it.
struct ProcessSpec {
  // Short name that prefixes the child's output and names it in exit reports, e.g. "w1".
  // Must be non-empty and unique among the children that are still running.
  std::string label = {};
  // argv[0] is the program: used as a path when it contains '/', otherwise searched in PATH (the
  // child's PATH when `env` sets one, like execvp).
  std::vector<std::string> argv = {};
  // Variables set in the child on top of the launcher's own environment; later entries win.
  std::vector<std::pair<std::string, std::string>> env = {};
  // Directory the child starts in; empty keeps the launcher's.
  std::string working_dir = {};
};

// How a child ended.
struct ExitEvent {
  std::string label;
  int pid = 0;
  // Status passed to exit(); -1 when the child was killed by a signal or its status was lost
  // (someone else reaped it).
  int exit_code = -1;
  // Signal that killed the child; 0 when it exited on its own.
  int signal = 0;
  // The child's peak resident memory in KiB (getrusage's ru_maxrss); 0 when unknown.
  int64_t max_rss_kib = 0;

  bool success() const { return signal == 0 && exit_code == 0; }
};

// "w1 exited with code 3", "ps0 killed by signal 9 (Killed)".
std::string DescribeExit(const ExitEvent& event);

enum class OutputStream { kStdout, kStderr };

// Receives one line of a child's output, without its '\n'. Called only from inside Poll(),
// TerminateAll() and the destructor, on the driving thread; must not call back into the
// ProcessGroup. An empty sink discards the output.
using OutputSink =
    std::function<void(std::string_view label, OutputStream stream, std::string_view line)>;

struct ProcessGroupOptions {
  // How long the destructor waits after SIGTERM before it sends SIGKILL. Default 2 s.
  absl::Duration destructor_grace = absl::Seconds(2);
  // Longest line forwarded in one piece. A child that writes more without a newline has its output
  // split into pieces of this size, so its buffer cannot grow without bound. Default 64 KiB.
  size_t max_line_bytes = 64 * 1024;
};

class ProcessGroup {
 public:
  // `sink` must outlive this object: the destructor still forwards the children's last words.
  explicit ProcessGroup(OutputSink sink, ProcessGroupOptions options = {});
  // TerminateAll(options.destructor_grace); exit events are dropped.
  ~ProcessGroup();

  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts a child and returns its pid. Fails, with nothing left running, when the spec is invalid,
  // the program cannot be found, the working directory cannot be entered, or exec fails; the
  // message names the label and what failed, e.g. "cannot start w0: exec '/bin/trainr': No such
  // file or directory".
  absl::StatusOr<int> Start(ProcessSpec spec);

  // One step of the launcher's event loop: waits at most `timeout` until some child writes output
  // or exits, forwards the complete lines to the sink, reaps the exited children and appends their
  // exit events to `exited` (which may be null to drop them). Returns as soon as anything happened,
  // at once when no child is running, early when a signal handler interrupts the wait (so the
  // caller can act on a Ctrl-C flag), and otherwise after `timeout`. A child's output is forwarded,
  // including a last line without '\n', before its exit is reported; output that its own children
  // write after it exited is lost.
  absl::Status Poll(absl::Duration timeout, std::vector<ExitEvent>* exited);

  // Sends SIGTERM to every running child's process group, keeps pumping output for up to `grace`
  // while they exit, then SIGKILLs the rest and reaps them. Every exit is appended to `exited`
  // unless it is null. A child that survives SIGKILL for 5 s (stuck in the kernel) is still
  // counted by running().
  void TerminateAll(absl::Duration grace, std::vector<ExitEvent>* exited = nullptr);

  // Number of started children not yet reaped.
  int running() const { return static_cast<int>(children_.size()); }

 private:
  struct Child;
  struct Stream;

  // Reads what `stream` has: one read normally, so that a chatty child cannot starve the others;
  // with `drain`, until the pipe is empty.
  void Pump(Child& child, Stream& stream, bool drain);
  void EmitLines(const Child& child, Stream& stream, bool flush);
  // Reaps every child that has exited; returns whether there was one.
  bool ReapExited(std::vector<ExitEvent>* exited);
  void SignalAll(int signal);

  OutputSink sink_;
  ProcessGroupOptions options_;
  std::vector<std::unique_ptr<Child>> children_;
};

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_PROCESS_GROUP_H_
