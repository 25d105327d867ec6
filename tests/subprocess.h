// Subprocess: start a real program (outbox-relay, outbox-mock-kafka, ...) with
// extra environment, signal it, wait for it. Output goes to a log file that is
// printed when a test wants to show it.
#ifndef OUTBOX_TESTS_SUBPROCESS_H_
#define OUTBOX_TESTS_SUBPROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace outbox::testing {

class Subprocess {
 public:
  Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> env,
             std::string log_path)
      : log_path_(std::move(log_path)) {
    // The log is emptied here, before the child exists, not in the child: a
    // caller that reads Log() at once (for the port a server printed) must not
    // see what an earlier process wrote to the same path.
    const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      // If the test process dies (a crash, a timeout kill), so do its children:
      // no orphaned relays or brokers left running on the machine.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    if (fd >= 0) close(fd);
  }
  ~Subprocess() {
    if (running()) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  void Signal(int sig) {
    if (running()) kill(pid_, sig);
  }
  bool running() const { return pid_ > 0 && !exit_code_; }
  pid_t pid() const { return pid_; }

  // Waits up to `timeout` for exit; returns the exit code (128+signal), or
  // nullopt if still running.
  std::optional<int> Wait(std::chrono::milliseconds timeout = std::chrono::hours(1)) {
    if (exit_code_) return exit_code_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_code_;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::string Log() const {
    std::ifstream f(log_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_SUBPROCESS_H_
