#include "launch/process_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace syncline {
namespace {

// Without pidfd_open (Linux < 5.3, or filtered by seccomp) nothing wakes poll() when a child exits
// while its pipes stay open, so Poll() rechecks for exits this often.
constexpr absl::Duration kReapInterval = absl::Milliseconds(50);
// SIGKILL ends a process as soon as it leaves the kernel; longer means it is stuck there.
constexpr absl::Duration kKillReapLimit = absl::Seconds(5);

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

absl::Status MakePipe(UniqueFd* read_end, UniqueFd* write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
  read_end->Reset(fds[0]);
  write_end->Reset(fds[1]);
  return absl::OkStatus();
}

int PollTimeoutMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  // Rounding up keeps a sub-millisecond remainder from turning into a spin of zero-length polls.
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

// The launcher's environment with `additions` applied, as "KEY=VALUE" strings.
absl::StatusOr<std::vector<std::string>> MergeEnvironment(
    const std::vector<std::pair<std::string, std::string>>& additions) {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    env.emplace_back(*entry);
  }
  for (const auto& [key, value] : additions) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("invalid environment variable name '%s'", key));
    }
    const std::string prefix = key + "=";
    auto it = std::find_if(env.begin(), env.end(),
                           [&](const std::string& e) { return e.starts_with(prefix); });
    if (it != env.end()) {
      *it = prefix + value;
    } else {
      env.push_back(prefix + value);
    }
  }
  return env;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Resolves the program in the parent, as execvp would in the child, because a PATH search after
// fork() would have to allocate, which is unsafe when the launcher has other threads.
absl::StatusOr<std::string> ResolveProgram(const std::string& program,
                                           const std::vector<std::string>& env) {
  if (program.find('/') != std::string::npos) return program;
  absl::string_view path = "/bin:/usr/bin";
  for (const std::string& entry : env) {
    if (entry.starts_with("PATH=")) path = absl::string_view(entry).substr(5);
  }
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrFormat("program '%s' not found in PATH", program));
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> result;
  result.reserve(strings.size() + 1);
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

// What the child writes to the exec-status pipe when it cannot become the requested program.
struct ChildFailure {
  enum Step : int { kSetpgid, kDeathSignal, kRedirect, kChdir, kExec } step;
  int error;
};

struct ChildSetup {
  pid_t parent;
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  int status_fd;
  const char* working_dir;  // null to stay
  const char* program;
  char* const* argv;
  char* const* envp;
};

[[noreturn]] void Fail(const ChildSetup& setup, ChildFailure::Step step) {
  const ChildFailure failure{step, errno};
  // Nothing to do if this write fails: the parent then sees a plain exit code 127.
  [[maybe_unused]] ssize_t n = write(setup.status_fd, &failure, sizeof(failure));
  _exit(127);
}

// Runs between fork() and exec(): only async-signal-safe calls, no allocation.
[[noreturn]] void RunChild(const ChildSetup& setup) {
  if (setpgid(0, 0) != 0) Fail(setup, ChildFailure::kSetpgid);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Fail(setup, ChildFailure::kDeathSignal);
  // The parent may have died before prctl() took effect; then nobody would ever send the signal.
  if (getppid() != setup.parent) _exit(1);

  // Ignored signals and the signal mask survive exec; the child should start with neither.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }

  // dup2 clears O_CLOEXEC on the copies, so only 0-2 and the status pipe's own fd cross exec,
  // and the latter closes when exec succeeds.
  if (dup2(setup.stdin_fd, STDIN_FILENO) < 0 || dup2(setup.stdout_fd, STDOUT_FILENO) < 0 ||
      dup2(setup.stderr_fd, STDERR_FILENO) < 0) {
    Fail(setup, ChildFailure::kRedirect);
  }
  if (setup.working_dir != nullptr && chdir(setup.working_dir) != 0) {
    Fail(setup, ChildFailure::kChdir);
  }
  execve(setup.program, setup.argv, setup.envp);
  Fail(setup, ChildFailure::kExec);
}

std::string DescribeFailure(const ChildFailure& failure, const ProcessSpec& spec,
                            const std::string& program) {
  switch (failure.step) {
    case ChildFailure::kSetpgid:
      return "setpgid";
    case ChildFailure::kDeathSignal:
      return "prctl(PR_SET_PDEATHSIG)";
    case ChildFailure::kRedirect:
      return "redirecting stdio";
    case ChildFailure::kChdir:
      return absl::StrFormat("chdir to '%s'", spec.working_dir);
    case ChildFailure::kExec:
      return absl::StrFormat("exec '%s'", program);
  }
  return "setup";
}

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

struct ProcessGroup::Stream {
  OutputStream kind;
  UniqueFd fd;
  std::string partial;  // bytes after the last '\n'
};

struct ProcessGroup::Child {
  std::string label;
  pid_t pid = -1;
  // Readable once the child exits, so poll() wakes for exits; invalid without pidfd support.
  UniqueFd pidfd;
  Stream out{OutputStream::kStdout, {}, {}};
  Stream err{OutputStream::kStderr, {}, {}};
};

std::string DescribeExit(const ExitEvent& event) {
  if (event.signal != 0) {
    return absl::StrFormat("%s killed by signal %d (%s)", event.label, event.signal,
                           strsignal(event.signal));
  }
  if (event.exit_code < 0) return absl::StrFormat("%s exited with unknown status", event.label);
  return absl::StrFormat("%s exited with code %d", event.label, event.exit_code);
}

ProcessGroup::ProcessGroup(OutputSink sink, ProcessGroupOptions options)
    : sink_(std::move(sink)), options_(options) {
  options_.max_line_bytes = std::max<size_t>(options_.max_line_bytes, 1);
}

ProcessGroup::~ProcessGroup() { TerminateAll(options_.destructor_grace); }

absl::StatusOr<int> ProcessGroup::Start(ProcessSpec spec) {
  if (spec.label.empty()) return absl::InvalidArgumentError("process label is empty");
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: argv is empty", spec.label));
  }
  for (const auto& child : children_) {
    if (child->label == spec.label) {
      return absl::AlreadyExistsError(
          absl::StrFormat("a process labelled '%s' is already running", spec.label));
    }
  }
  const auto error = [&](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrFormat("cannot start %s: %s", spec.label, status.message()));
  };

  absl::StatusOr<std::vector<std::string>> env = MergeEnvironment(spec.env);
  if (!env.ok()) return error(env.status());
  absl::StatusOr<std::string> program = ResolveProgram(spec.argv[0], *env);
  if (!program.ok()) return error(program.status());
  std::vector<char*> argv = CStrings(spec.argv);
  std::vector<char*> envp = CStrings(*env);

  auto child = std::make_unique<Child>();
  child->label = spec.label;
  UniqueFd out_write, err_write, status_read, status_write;
  for (const absl::Status& status :
       {MakePipe(&child->out.fd, &out_write), MakePipe(&child->err.fd, &err_write),
        MakePipe(&status_read, &status_write)}) {
    if (!status.ok()) return error(status);
  }
  // Children read /dev/null: in their own process group, reading the terminal would stop them.
  UniqueFd dev_null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return error(absl::ErrnoToStatus(errno, "open /dev/null"));

  const ChildSetup setup{
      .parent = getpid(),
      .stdin_fd = dev_null.get(),
      .stdout_fd = out_write.get(),
      .stderr_fd = err_write.get(),
      .status_fd = status_write.get(),
      .working_dir = spec.working_dir.empty() ? nullptr : spec.working_dir.c_str(),
      .program = program->c_str(),
      .argv = argv.data(),
      .envp = envp.data(),
  };
  const pid_t pid = fork();
  if (pid < 0) return error(absl::ErrnoToStatus(errno, "fork"));
  if (pid == 0) RunChild(setup);
  child->pid = pid;
  // Also set from the parent, so the group exists before any signal we might send to it.
  setpgid(pid, pid);
  out_write.Reset();
  err_write.Reset();
  status_write.Reset();
  dev_null.Reset();

  // EOF means exec succeeded (the pipe is O_CLOEXEC); a record means it did not. The child does
  // nothing that blocks before exec, so this read returns promptly.
  ChildFailure failure;
  ssize_t n;
  do {
    n = read(status_read.get(), &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(failure))) {
    int ignored;
    while (waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    return error(absl::ErrnoToStatus(failure.error, DescribeFailure(failure, spec, *program)));
  }

  SetNonBlocking(child->out.fd.get());
  SetNonBlocking(child->err.fd.get());
  child->pidfd.Reset(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  children_.push_back(std::move(child));
  return pid;
}

void ProcessGroup::EmitLines(const Child& child, Stream& stream, bool flush) {
  if (!sink_) {
    stream.partial.clear();
    return;
  }
  std::string_view rest = stream.partial;
  for (size_t newline; (newline = rest.find('\n')) != std::string_view::npos;) {
    sink_(child.label, stream.kind, rest.substr(0, newline));
    rest.remove_prefix(newline + 1);
  }
  while (rest.size() >= options_.max_line_bytes) {
    sink_(child.label, stream.kind, rest.substr(0, options_.max_line_bytes));
    rest.remove_prefix(options_.max_line_bytes);
  }
  if (flush && !rest.empty()) {
    sink_(child.label, stream.kind, rest);
    rest = {};
  }
  stream.partial.erase(0, stream.partial.size() - rest.size());
}

void ProcessGroup::Pump(Child& child, Stream& stream, bool drain) {
  char buffer[64 * 1024];
  // A pipe holds at most 1 MiB (the Linux maximum), which bounds a drain even when a grandchild
  // keeps writing into the pipe.
  for (int reads = 0; stream.fd.valid() && reads < (drain ? 16 : 1); ++reads) {
    const ssize_t n = read(stream.fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      // EOF, or a read error that would repeat forever: either way the stream is over.
      EmitLines(child, stream, /*flush=*/true);
      stream.fd.Reset();
      return;
    }
    stream.partial.append(buffer, static_cast<size_t>(n));
    EmitLines(child, stream, /*flush=*/false);
  }
}

bool ProcessGroup::ReapExited(std::vector<ExitEvent>* exited) {
  bool any = false;
  for (auto it = children_.begin(); it != children_.end();) {
    Child& child = **it;
    int status = 0;
    struct rusage usage = {};
    pid_t r;
    do {
      r = wait4(child.pid, &status, WNOHANG, &usage);
    } while (r < 0 && errno == EINTR);
    if (r == 0) {
      ++it;
      continue;
    }
    ExitEvent event{.label = child.label, .pid = child.pid};
    if (r == child.pid) event.max_rss_kib = usage.ru_maxrss;
    if (r == child.pid && WIFEXITED(status)) {
      event.exit_code = WEXITSTATUS(status);
    } else if (r == child.pid && WIFSIGNALED(status)) {
      event.signal = WTERMSIG(status);
    }
    // Everything the child wrote is in the pipes by now; a grandchild may keep them open, so
    // read what is there instead of waiting for EOF.
    for (Stream* stream : {&child.out, &child.err}) {
      Pump(child, *stream, /*drain=*/true);
      EmitLines(child, *stream, /*flush=*/true);
    }
    if (exited != nullptr) exited->push_back(std::move(event));
    it = children_.erase(it);
    any = true;
  }
  return any;
}

absl::Status ProcessGroup::Poll(absl::Duration timeout, std::vector<ExitEvent>* exited) {
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + std::max(timeout, absl::ZeroDuration());
  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, Stream*>> owners;  // parallel to fds; null stream for a pidfd
  while (true) {
    if (ReapExited(exited) || children_.empty()) return absl::OkStatus();

    fds.clear();
    owners.clear();
    bool all_have_pidfd = true;
    for (auto& child : children_) {
      for (Stream* stream : {&child->out, &child->err}) {
        if (!stream->fd.valid()) continue;
        fds.push_back({.fd = stream->fd.get(), .events = POLLIN, .revents = 0});
        owners.emplace_back(child.get(), stream);
      }
      if (child->pidfd.valid()) {
        fds.push_back({.fd = child->pidfd.get(), .events = POLLIN, .revents = 0});
        owners.emplace_back(child.get(), nullptr);
      } else {
        all_have_pidfd = false;
      }
    }
    absl::Duration wait = deadline - absl::Now();
    if (!all_have_pidfd) wait = std::min(wait, kReapInterval);
    const int n = poll(fds.data(), fds.size(), PollTimeoutMs(wait));
    if (n < 0) {
      if (errno != EINTR) return absl::ErrnoToStatus(errno, "poll");
      // A signal handler ran; the caller may want to look at what it recorded (e.g. Ctrl-C).
      ReapExited(exited);
      return absl::OkStatus();
    }

    bool got_output = false;
    for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0 || owners[i].second == nullptr) continue;
      Pump(*owners[i].first, *owners[i].second, /*drain=*/false);
      got_output = true;
    }
    if (ReapExited(exited) || got_output || absl::Now() >= deadline) return absl::OkStatus();
  }
}

void ProcessGroup::SignalAll(int signal) {
  for (const auto& child : children_) {
    // The whole group, so that a child's own children (e.g. under a shell) stop too. Its pgid is
    // its pid, which stays reserved until we reap it.
    if (kill(-child->pid, signal) != 0) kill(child->pid, signal);
  }
}

void ProcessGroup::TerminateAll(absl::Duration grace, std::vector<ExitEvent>* exited) {
  const auto wait_until = [&](absl::Time deadline) {
    while (!children_.empty()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration() || !Poll(left, exited).ok()) return;
    }
  };
  if (children_.empty()) return;
  SignalAll(SIGTERM);
  wait_until(absl::Now() + grace);
  if (children_.empty()) return;
  SignalAll(SIGKILL);
  wait_until(absl::Now() + kKillReapLimit);
}

}  // namespace syncline
