#include "launch/process_group.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// absl::string_view is not std::string_view in this Abseil build, and gmock's string matchers
// want the latter.
std::string Message(const absl::Status& status) { return std::string(status.message()); }

constexpr absl::Duration kTestDeadline = absl::Seconds(2);

struct Line {
  std::string label;
  OutputStream stream;
  std::string text;
  bool operator==(const Line&) const = default;
};

// Collects output and exits in the order the launcher would print them.
class Recorder {
 public:
  OutputSink Sink() {
    return [this](std::string_view label, OutputStream stream, std::string_view line) {
      lines.push_back({std::string(label), stream, std::string(line)});
      log.push_back(std::string(line));
    };
  }
  std::vector<std::string> Lines(std::string_view label, OutputStream stream) const {
    std::vector<std::string> result;
    for (const Line& line : lines) {
      if (line.label == label && line.stream == stream) result.push_back(line.text);
    }
    return result;
  }

  std::vector<Line> lines;
  std::vector<std::string> log;  // lines, and "exit:<label>" entries
  std::vector<ExitEvent> exits;
};

ProcessSpec Shell(std::string label, std::string script) {
  return {.label = std::move(label), .argv = {"/bin/sh", "-c", std::move(script)}};
}

// Drives the loop until every child has exited; false on timeout.
bool RunUntilDone(ProcessGroup& group, Recorder& recorder, absl::Duration limit = kTestDeadline) {
  const absl::Time deadline = absl::Now() + limit;
  while (group.running() > 0) {
    if (absl::Now() >= deadline) return false;
    std::vector<ExitEvent> exited;
    EXPECT_TRUE(group.Poll(deadline - absl::Now(), &exited).ok());
    for (ExitEvent& event : exited) {
      recorder.log.push_back("exit:" + event.label);
      recorder.exits.push_back(std::move(event));
    }
  }
  return true;
}

// Pumps until some child has printed a line, e.g. to know a shell has installed its traps.
bool WaitForFirstLine(ProcessGroup& group, const Recorder& recorder) {
  const absl::Time deadline = absl::Now() + kTestDeadline;
  while (recorder.lines.empty() && absl::Now() < deadline) {
    if (!group.Poll(deadline - absl::Now(), nullptr).ok()) return false;
  }
  return !recorder.lines.empty();
}

bool ProcessGone(pid_t pid) {
  // A reaped child is no longer ours to wait for, and no signal can reach it.
  return waitpid(pid, nullptr, WNOHANG) < 0 && errno == ECHILD && kill(pid, 0) < 0 &&
         errno == ESRCH;
}

TEST(ProcessGroupTest, ForwardsLinesPerChildInOrderWithPartialLastLine) {
  Recorder recorder;
  ProcessGroup group(recorder.Sink());
  ASSERT_TRUE(group.Start(Shell("w0", "echo a; echo b >&2; echo c; printf tail")).ok());
  ASSERT_TRUE(group.Start(Shell("w1", "echo x; echo y; printf 'err-tail' >&2")).ok());
  ASSERT_TRUE(RunUntilDone(group, recorder));

  EXPECT_THAT(recorder.Lines("w0", OutputStream::kStdout), ElementsAre("a", "c", "tail"));
  EXPECT_THAT(recorder.Lines("w0", OutputStream::kStderr), ElementsAre("b"));
  EXPECT_THAT(recorder.Lines("w1", OutputStream::kStdout), ElementsAre("x", "y"));
  EXPECT_THAT(recorder.Lines("w1", OutputStream::kStderr), ElementsAre("err-tail"));
  ASSERT_EQ(recorder.exits.size(), 2u);
  for (const ExitEvent& event : recorder.exits) EXPECT_TRUE(event.success());
}

TEST(ProcessGroupTest, OutputIsForwardedBeforeTheExitIsReported) {
  Recorder recorder;
  ProcessGroup group(recorder.Sink());
  ASSERT_TRUE(group.Start(Shell("w0", "echo first; printf last")).ok());
  ASSERT_TRUE(RunUntilDone(group, recorder));
  EXPECT_THAT(recorder.log, ElementsAre("first", "last", "exit:w0"));
}

TEST(ProcessGroupTest, ForwardsLargeOutputCompletely) {
  Recorder recorder;
  ProcessGroup group(recorder.Sink());
  ASSERT_TRUE(group.Start({.label = "w0", .argv = {"seq", "1", "20000"}}).ok());
  ASSERT_TRUE(RunUntilDone(group, recorder));
  const std::vector<std::string> lines = recorder.Lines("w0", OutputStream::kStdout);
  ASSERT_EQ(lines.size(), 20000u);
  for (size_t i = 0; i < lines.size(); ++i) ASSERT_EQ(lines[i], std::to_string(i + 1));
}

TEST(ProcessGroupTest, SplitsLinesLongerThanTheLimit) {
  Recorder recorder;
  ProcessGroup group(recorder.Sink(), {.max_line_bytes = 100});
  ASSERT_TRUE(group.Start(Shell("w0", "head -c 250 /dev/zero | tr '\\0' x")).ok());
  ASSERT_TRUE(RunUntilDone(group, recorder));
  EXPECT_THAT(recorder.Lines("w0", OutputStream::kStdout),
              ElementsAre(std::string(100, 'x'), std::string(100, 'x'), std::string(50, 'x')));
}

TEST(ProcessGroupTest, ReportsExitCodeAndSignal) {
  Recorder recorder;
  ProcessGroup group(recorder.Sink());
  ASSERT_TRUE(group.Start(Shell("w1", "exit 3")).ok());
  ASSERT_TRUE(group.Start(Shell("ps0", "kill -9 $$")).ok());
  ASSERT_TRUE(RunUntilDone(group, recorder));
  ASSERT_EQ(recorder.exits.size(), 2u);
  for (const ExitEvent& event : recorder.exits) {
    EXPECT_FALSE(event.success());
    if (event.label == "w1") {
      EXPECT_EQ(event.exit_code, 3);
      EXPECT_EQ(event.signal, 0);
      EXPECT_EQ(DescribeExit(event), "w1 exited with code 3");
    } else {
      EXPECT_EQ(event.signal, SIGKILL);
      EXPECT_EQ(DescribeExit(event), "ps0 killed by signal 9 (Killed)");
    }
  }
}

TEST(ProcessGroupTest, MissingProgramIsAClearError) {
  Recorder recorder;
  ProcessGroup group(recorder.Sink());

  absl::StatusOr<int> by_path = group.Start({.label = "w0", .argv = {"/nonexistent/trainer"}});
  ASSERT_FALSE(by_path.ok());
  EXPECT_EQ(by_path.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(by_path.status()), HasSubstr("w0"));
  EXPECT_THAT(Message(by_path.status()), HasSubstr("/nonexistent/trainer"));
  EXPECT_THAT(Message(by_path.status()), HasSubstr("No such file or directory"));

  absl::StatusOr<int> by_name = group.Start({.label = "w1", .argv = {"no-such-trainer-xyz"}});
  ASSERT_FALSE(by_name.ok());
  EXPECT_EQ(by_name.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(by_name.status()), HasSubstr("not found in PATH"));

  EXPECT_EQ(group.running(), 0);
  EXPECT_THAT(recorder.lines, IsEmpty());
}

TEST(ProcessGroupTest, NonExecutableFileIsAnError) {
  ProcessGroup group(nullptr);
  absl::StatusOr<int> pid = group.Start({.label = "w0", .argv = {"/etc/passwd"}});
  ASSERT_FALSE(pid.ok());
  EXPECT_THAT(Message(pid.status()), HasSubstr("exec '/etc/passwd'"));
  EXPECT_EQ(group.running(), 0);
}

TEST(ProcessGroupTest, BadWorkingDirectoryIsAnError) {
  ProcessGroup group(nullptr);
  absl::StatusOr<int> pid =
      group.Start({.label = "w0", .argv = {"/bin/true"}, .working_dir = "/nonexistent/dir"});
  ASSERT_FALSE(pid.ok());
  EXPECT_THAT(Message(pid.status()), HasSubstr("chdir to '/nonexistent/dir'"));
  EXPECT_EQ(group.running(), 0);
}

TEST(ProcessGroupTest, RejectsInvalidSpecs) {
  ProcessGroup group(nullptr);
  EXPECT_EQ(group.Start({.label = "", .argv = {"/bin/true"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(group.Start({.label = "w0", .argv = {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      group.Start({.label = "w0", .argv = {"/bin/true"}, .env = {{"A=B", "c"}}}).status().code(),
      absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(group.Start({.label = "w0", .argv = {"sleep", "10"}}).ok());
  EXPECT_EQ(group.Start({.label = "w0", .argv = {"sleep", "10"}}).status().code(),
            absl::StatusCode::kAlreadyExists);
  group.TerminateAll(absl::Seconds(1));
}

TEST(ProcessGroupTest, SetsEnvironmentWorkingDirectoryAndEmptyStdin) {
  Recorder recorder;
  ProcessGroup group(recorder.Sink());
  ASSERT_TRUE(group
                  .Start({.label = "w0",
                          .argv = {"/bin/sh", "-c", "echo $SYNCLINE_RANK; pwd; cat; echo done"},
                          .env = {{"SYNCLINE_RANK", "7"}},
                          .working_dir = "/tmp"})
                  .ok());
  ASSERT_TRUE(RunUntilDone(group, recorder));
  EXPECT_THAT(recorder.Lines("w0", OutputStream::kStdout), ElementsAre("7", "/tmp", "done"));
}

TEST(ProcessGroupTest, ChildRunsInItsOwnProcessGroup) {
  ProcessGroup group(nullptr);
  absl::StatusOr<int> pid = group.Start({.label = "w0", .argv = {"sleep", "10"}});
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(getpgid(*pid), *pid);
  EXPECT_NE(getpgid(*pid), getpgrp());
}

TEST(ProcessGroupTest, PollWaitsForTheTimeoutWhenNothingHappens) {
  ProcessGroup group(nullptr);
  ASSERT_TRUE(group.Start({.label = "w0", .argv = {"sleep", "10"}}).ok());
  std::vector<ExitEvent> exited;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(group.Poll(absl::Milliseconds(200), &exited).ok());
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_GE(elapsed, absl::Milliseconds(190));
  EXPECT_LT(elapsed, absl::Seconds(1));
  EXPECT_THAT(exited, IsEmpty());
  EXPECT_EQ(group.running(), 1);
}

TEST(ProcessGroupTest, PollReturnsEarlyWhenASignalHandlerRuns) {
  ProcessGroup group(nullptr);
  ASSERT_TRUE(group.Start({.label = "w0", .argv = {"sleep", "10"}}).ok());
  struct sigaction action {};
  action.sa_handler = [](int) {};
  action.sa_flags = SA_RESTART;  // poll() is never restarted, whatever the flag says
  struct sigaction previous;
  ASSERT_EQ(sigaction(SIGALRM, &action, &previous), 0);
  itimerval timer{};
  timer.it_value.tv_usec = 100'000;
  ASSERT_EQ(setitimer(ITIMER_REAL, &timer, nullptr), 0);

  const absl::Time start = absl::Now();
  std::vector<ExitEvent> exited;
  const absl::Status status = group.Poll(absl::Seconds(5), &exited);
  const absl::Duration elapsed = absl::Now() - start;
  sigaction(SIGALRM, &previous, nullptr);

  EXPECT_TRUE(status.ok()) << status;
  EXPECT_LT(elapsed, absl::Seconds(2));
  EXPECT_THAT(exited, IsEmpty());
}

TEST(ProcessGroupTest, PollReturnsAtOnceWithoutChildren) {
  ProcessGroup group(nullptr);
  std::vector<ExitEvent> exited;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(group.Poll(absl::Seconds(10), &exited).ok());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
}

TEST(ProcessGroupTest, TerminateAllKillsAChildThatIgnoresSigterm) {
  Recorder recorder;
  ProcessGroup group(recorder.Sink());
  absl::StatusOr<int> stubborn =
      group.Start(Shell("w0", "trap '' TERM; echo ready; exec sleep 100"));
  absl::StatusOr<int> polite = group.Start({.label = "w1", .argv = {"sleep", "100"}});
  ASSERT_TRUE(stubborn.ok());
  ASSERT_TRUE(polite.ok());
  // The trap must be installed before the signal is sent, or the test proves nothing.
  ASSERT_TRUE(WaitForFirstLine(group, recorder));
  ASSERT_THAT(recorder.Lines("w0", OutputStream::kStdout), ElementsAre("ready"));

  const absl::Duration grace = absl::Milliseconds(300);
  std::vector<ExitEvent> exited;
  const absl::Time start = absl::Now();
  group.TerminateAll(grace, &exited);
  const absl::Duration elapsed = absl::Now() - start;

  EXPECT_GE(elapsed, grace);
  EXPECT_LT(elapsed, grace + absl::Seconds(1));
  EXPECT_EQ(group.running(), 0);
  ASSERT_EQ(exited.size(), 2u);
  for (const ExitEvent& event : exited) {
    EXPECT_EQ(event.signal, event.label == "w0" ? SIGKILL : SIGTERM) << DescribeExit(event);
  }
  EXPECT_TRUE(ProcessGone(*stubborn));
  EXPECT_TRUE(ProcessGone(*polite));
}

TEST(ProcessGroupTest, TerminateAllReturnsEarlyWhenChildrenExitOnSigterm) {
  ProcessGroup group(nullptr);
  ASSERT_TRUE(group.Start({.label = "w0", .argv = {"sleep", "100"}}).ok());
  const absl::Time start = absl::Now();
  group.TerminateAll(absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(group.running(), 0);
}

TEST(ProcessGroupTest, DestructorLeavesNoChildBehind) {
  Recorder recorder;
  const absl::Duration grace = absl::Milliseconds(100);
  std::optional<ProcessGroup> group;
  group.emplace(recorder.Sink(), ProcessGroupOptions{.destructor_grace = grace});
  absl::StatusOr<int> pid = group->Start(Shell("w0", "trap '' TERM; echo ready; exec sleep 100"));
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(WaitForFirstLine(*group, recorder));

  const absl::Time start = absl::Now();
  group.reset();
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_GE(elapsed, grace);
  EXPECT_LT(elapsed, grace + absl::Seconds(1));
  EXPECT_TRUE(ProcessGone(*pid));
}

// Reads one decimal pid line from `fd`, waiting at most kTestDeadline.
bool ReadPid(int fd, pid_t* pid) {
  std::string text;
  const absl::Time deadline = absl::Now() + kTestDeadline;
  char c;
  while (absl::Now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (read(fd, &c, 1) != 1) return false;
    if (c == '\n') return absl::SimpleAtoi(text, pid);
    text.push_back(c);
  }
  return false;
}

// Waits for `pid`, which must be our child, to end; returns its wait status or -1 on timeout.
int WaitWithDeadline(pid_t pid) {
  const absl::Time deadline = absl::Now() + kTestDeadline;
  int status;
  while (absl::Now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return -1;
}

TEST(ProcessGroupTest, TerminateAllAlsoStopsGrandchildren) {
  // As a subreaper this test inherits the orphaned grandchild and can wait for it; without that it
  // would become init's, and could not be told apart from a zombie.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  Recorder recorder;
  ProcessGroup group(recorder.Sink());
  ASSERT_TRUE(group.Start(Shell("w0", "trap '' TERM; sleep 100 & echo $!; wait")).ok());
  ASSERT_TRUE(WaitForFirstLine(group, recorder));
  ASSERT_EQ(recorder.lines.size(), 1u);
  pid_t grandchild;
  ASSERT_TRUE(absl::SimpleAtoi(recorder.lines[0].text, &grandchild));

  group.TerminateAll(absl::Milliseconds(100));
  const int status = WaitWithDeadline(grandchild);
  ASSERT_NE(status, -1);
  EXPECT_TRUE(WIFSIGNALED(status));
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(ProcessGroupTest, ChildrenDieWithAKilledLauncher) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    // A stand-in launcher that starts a long child, reports its pid and waits to be killed.
    close(pipe_fds[0]);
    ProcessGroup group(nullptr);
    absl::StatusOr<int> pid = group.Start({.label = "w0", .argv = {"sleep", "100"}});
    if (!pid.ok()) _exit(1);
    const std::string line = std::to_string(*pid) + "\n";
    if (write(pipe_fds[1], line.data(), line.size()) < 0) _exit(1);
    pause();
    _exit(0);
  }
  close(pipe_fds[1]);
  pid_t orphan = -1;
  const bool got_pid = ReadPid(pipe_fds[0], &orphan);
  close(pipe_fds[0]);
  kill(launcher, SIGKILL);
  ASSERT_NE(WaitWithDeadline(launcher), -1);
  ASSERT_TRUE(got_pid);

  const int status = WaitWithDeadline(orphan);
  ASSERT_NE(status, -1) << "child outlived its launcher";
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace syncline
