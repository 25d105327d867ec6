// Socket hooks that make librdkafka 2.0.2's mock cluster behave like a real
// broker in two ways it does not by itself. Each definition here takes the
// place of libc's for librdkafka (the executable's symbols come first); none
// changes what any other socket of the process sees.
//
// 1. TCP_NODELAY on every accepted connection (accept): the mock leaves Nagle's
//    algorithm on, and a response written while the previous one is not yet
//    acknowledged waited for the client's delayed ACK, ~40 ms on Linux
//    (docs/testing.md, "Known traps of librdkafka 2.0.2's mock").
//
// 2. A client's close of a *muted* connection is noticed (poll, close). The mock
//    mutes a connection (polls it without POLLIN) while it holds that
//    connection's JoinGroup or SyncGroup response back for the rebalance. A
//    client that closes such a connection sends a FIN, and a FIN shows up only
//    as POLLIN, which the mock does not ask for: the connection stays open on
//    the mock's side, and the group member keeps the held response. When the
//    same member then joins again on its new connection, the mock asserts
//    (rdkafka_mock_cgrp.c:567, `!member->resp`) and the whole process aborts.
//    The exact sequence: JoinGroup(member M) on connection A, held; the client
//    closes A; JoinGroup(M) on connection B -> abort. A client's request that
//    times out while muted behind the held response, or any reconnect of the
//    coordinator connection mid-rebalance, does exactly that.
//
//    The poll hook asks for POLLRDHUP on every accepted connection and, when a
//    muted one has been closed by its client, reports POLLHUP for it: the mock
//    then closes it ("Disconnected") and drops the member's held response, as
//    it does for any closed connection. In that round the hook holds back
//    every other connection's POLLIN, so a request already waiting on the new
//    connection is read only after the close (the mock serves the ready fds in
//    array order, and the new connection may come first).
//
// Thread-safety: accept and close run on any thread; the table is atomic.
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdio>

namespace {

// fds below this bound are tracked; the mock's connections are far fewer.
constexpr int kMaxTracked = 1 << 16;
// true while fd is a connection a broker accepted (set by accept, cleared by
// close). Constant-initialised: close() may run before main().
std::atomic<bool> g_accepted[kMaxTracked];

bool Tracked(int fd) {
  return fd >= 0 && fd < kMaxTracked && g_accepted[fd].load(std::memory_order_relaxed);
}

using PollFn = int (*)(pollfd*, nfds_t, int);

PollFn RealPoll() {
  static const PollFn fn = reinterpret_cast<PollFn>(::dlsym(RTLD_NEXT, "poll"));
  return fn;
}

// One line on stderr (the mock's log); tests count these lines.
void LogClosedWhileMuted(int fd) {
  char line[160];
  const int n = std::snprintf(line, sizeof line,
                              "outbox-mock-kafka: connection (fd %d) closed by its client while "
                              "muted; the broker closes it and drops its held response\n",
                              fd);
  if (n > 0) (void)::write(STDERR_FILENO, line, static_cast<std::size_t>(n));
}

}  // namespace

extern "C" int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  const int s = ::accept4(fd, addr, len, 0);
  if (s >= 0) {
    const int one = 1;
    (void)::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (s < kMaxTracked) g_accepted[s].store(true, std::memory_order_relaxed);
  }
  return s;
}

extern "C" int close(int fd) {
  if (fd >= 0 && fd < kMaxTracked) g_accepted[fd].store(false, std::memory_order_relaxed);
  return static_cast<int>(::syscall(SYS_close, fd));
}

extern "C" int poll(pollfd* fds, nfds_t n, int timeout_ms) {
  bool tracked_any = false;
  for (nfds_t i = 0; i < n; ++i) {
    if (Tracked(fds[i].fd)) {
      fds[i].events |= POLLRDHUP;
      tracked_any = true;
    }
  }
  const int r = RealPoll()(fds, n, timeout_ms);
  if (!tracked_any || r <= 0) return r;

  bool closed_while_muted = false;
  for (nfds_t i = 0; i < n; ++i) {
    if (!Tracked(fds[i].fd)) continue;
    const bool muted = (fds[i].events & POLLIN) == 0;
    if (muted && (fds[i].revents & POLLRDHUP) != 0) {
      fds[i].revents |= POLLHUP;
      closed_while_muted = true;
      LogClosedWhileMuted(fds[i].fd);
    }
    fds[i].events &= static_cast<short>(~POLLRDHUP);
    fds[i].revents &= static_cast<short>(~POLLRDHUP);
  }
  int ready = 0;
  for (nfds_t i = 0; i < n; ++i) {
    if (closed_while_muted && (fds[i].revents & POLLHUP) == 0) {
      // Read next round, after the closed connection's member is released.
      fds[i].revents &= static_cast<short>(~POLLIN);
    }
    if (fds[i].revents != 0) ++ready;
  }
  return ready;
}
