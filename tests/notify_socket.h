// A stand-in for systemd's notification socket: a unix datagram socket whose
// path goes in a daemon's NOTIFY_SOCKET, collecting what sd_notify sends
// (READY=1, STATUS=..., WATCHDOG=1, STOPPING=1). Header-only.
//
// Thread-safety: one test thread.
#ifndef OUTBOX_TESTS_NOTIFY_SOCKET_H_
#define OUTBOX_TESTS_NOTIFY_SOCKET_H_

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

namespace outbox::testing {

class NotifySocket {
 public:
  explicit NotifySocket(const std::string& name)
      : path_((std::filesystem::temp_directory_path() / ("notify-" + name)).string()) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    EXPECT_LT(path_.size(), sizeof addr.sun_path);
    std::memcpy(addr.sun_path, path_.c_str(), std::min(path_.size(), sizeof addr.sun_path - 1));
    unlink(path_.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{0, 200'000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~NotifySocket() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  // The value for NOTIFY_SOCKET.
  const std::string& path() const { return path_; }
  // Reads what arrived within 200 ms; true once `what` is among everything read
  // since the last Clear().
  bool Received(const std::string& what) {
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n > 0) all_ += std::string(buf, static_cast<std::size_t>(n)) + "\n";
    return all_.find(what) != std::string::npos;
  }
  const std::string& all() const { return all_; }
  void Clear() { all_.clear(); }

 private:
  std::string path_;
  int fd_ = -1;
  std::string all_;
};

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_NOTIFY_SOCKET_H_
