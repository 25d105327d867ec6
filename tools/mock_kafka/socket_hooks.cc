// Socket hooks that make librdkafka 2.0.2's mock cluster behave like a real
// broker where it does not by itself. Each definition here takes the place of
// libc's for librdkafka (the executable's symbols come first); only the
// connections the brokers accepted are touched, no other socket of the process.
//
// 1. TCP_NODELAY on every accepted connection (accept): the mock leaves Nagle's
//    algorithm on, and a response written while the previous one is not yet
//    acknowledged waited for the client's delayed ACK, ~40 ms on Linux
//    (docs/testing.md, "Known traps of librdkafka 2.0.2's mock").
//
// 2. A member's JoinGroup is never read while its previous one is held (poll,
//    recvmsg, close). The mock holds a member's JoinGroup response until the
//    rebalance ends, and *mutes* the connection meanwhile (polls it without
//    POLLIN). A second JoinGroup of the same member, on another connection,
//    then aborted the whole process (rdkafka_mock_cgrp.c:567, `!member->resp`).
//    Two sequences lead there, both seen with librdkafka consumers under chaos:
//    a. the client closes the muted connection A and joins again on B: A's FIN
//       shows up only as POLLIN, which the mock does not ask for, so A stays
//       open on its side with the held response;
//    b. the client joins again on B while A is still open.
//    The hooks fix both. poll asks for POLLRDHUP on every accepted connection
//    and reports a muted one its client closed as POLLHUP: the mock closes it
//    and drops the held response, as for any closed connection; in that round
//    every other connection's POLLIN is held back, so a request already
//    waiting on B is read after the close. recvmsg peeks at each request before
//    the mock reads it: a JoinGroup of a member whose earlier JoinGroup is
//    still held on another muted connection waits (its connection polled
//    without POLLIN) until that one is answered or closed, as a real broker
//    serves one join per member at a time. Each time, a line in the log.
//
// 3. A new member's JoinGroup (empty member id) is handed to the mock with an
//    id of ours, "outbox-mock-member-N", never given twice (recvmsg). The mock
//    names a new member after its struct's address ("%p"): once a member's
//    session expired and the struct was freed, the next new member could get
//    the same id while the expired member's client still used it, and that
//    client's JoinGroup found the new member's held response (the abort
//    above, with no join of that id held as far as the hooks could tell). A
//    real broker assigns unique ids too; the client learns its id from the
//    response, as always. The request's start, through the empty id, is
//    served to the mock's reads from memory, rewritten, before the rest of
//    the socket (poll reports its connection readable meanwhile).
//
// 4. DescribeConfigs, which the mock lacks (topic_configs.h): its ApiVersions
//    responses list DescribeConfigs v0 (sendmsg rewrites them), and recvmsg
//    takes a DescribeConfigs request off the socket and answers it itself,
//    after the response the mock is writing, if any -- so possibly before
//    responses the mock still owes for earlier requests (a held join, an
//    `rtt` delay; clients match responses by correlation id), and without the
//    mock's `rtt` or `request-errors`.
//
// Thread-safety: accept and close may run on any thread (the table of accepted
// connections is atomic); poll, recvmsg and sendmsg on an accepted connection
// run only on the mock cluster's thread, which owns the rest of the state.
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "topic_configs.h"

namespace {

// fds below this bound are tracked; the mock's connections are far fewer.
constexpr int kMaxTracked = 1 << 16;
// true while fd is a connection a broker accepted (set by accept, cleared by
// close). Constant-initialised: close() may run before main().
std::atomic<bool> g_accepted[kMaxTracked];

bool Tracked(int fd) {
  return fd >= 0 && fd < kMaxTracked && g_accepted[fd].load(std::memory_order_relaxed);
}

constexpr int16_t kJoinGroup = 11;
// A JoinGroup waits at most this long for its member's earlier one; past it,
// it is read (the mock answers a held join within the session timeout).
constexpr auto kMaxWait = std::chrono::seconds(15);

// Where a byte stream of size-prefixed frames (Kafka requests or responses)
// is: inside a frame (`left` bytes to go) or inside a size field.
struct FrameCursor {
  std::uint32_t left = 0;
  std::array<unsigned char, 4> size{};
  int size_len = 0;
  bool AtBoundary() const { return left == 0 && size_len == 0; }
  // Moves over `n` bytes at `p`; calls on_end() at each frame's end.
  template <typename OnEnd>
  void Advance(const unsigned char* p, std::size_t n, OnEnd on_end) {
    while (n > 0) {
      if (left == 0 && size_len < 4) {
        size[static_cast<std::size_t>(size_len++)] = *p++;
        --n;
        if (size_len == 4) {
          left = (std::uint32_t{size[0]} << 24) | (std::uint32_t{size[1]} << 16) |
                 (std::uint32_t{size[2]} << 8) | std::uint32_t{size[3]};
          if (left == 0) size_len = 0;
        }
        continue;
      }
      const std::size_t take = n < left ? n : left;
      p += take;
      n -= take;
      left -= static_cast<std::uint32_t>(take);
      if (left == 0) {
        size_len = 0;
        on_end();
      }
    }
  }
};

// What the hooks know of one accepted connection (mock thread only).
struct Connection {
  bool muted = false;         // as of the last poll: the mock did not ask for POLLIN
  // The last JoinGroup read from it (its member id), and whether the mock may
  // still hold its response: reading (bytes still to come), read (whole; not
  // polled since), held (the mock muted the connection), or none (answered:
  // the connection is polled for reading again, or never was muted).
  std::string join_member;
  enum class Join { kNone, kReading, kRead, kHeld } join = Join::kNone;
  int waits_for = -1;         // a JoinGroup here waits for this connection's
  std::string waits_member;   // (its member)
  std::chrono::steady_clock::time_point waiting_since;
  FrameCursor in;             // where the mock's reads are in the request stream
  FrameCursor out;            // where its writes are in the response stream
  std::map<std::int32_t, std::int16_t> api_versions;  // ApiVersions requests: id -> version
  std::string pending_out;    // our responses, written between the mock's
  std::string inject;         // a rewritten request, read before the socket
  std::size_t inject_at = 0;  // how much of it the mock has read
  bool Injecting() const { return inject_at < inject.size(); }
};
std::uint64_t g_member_seq = 0;  // ids given to new members so far
Connection* g_conns[kMaxTracked];  // allocated on first use, reset on accept

// Whether connection x holds `member`'s JoinGroup, or may.
bool HoldsJoinOf(int x, const std::string& member) {
  const Connection* c = g_conns[x];
  return Tracked(x) && c != nullptr && c->join != Connection::Join::kNone &&
         c->join_member == member;
}

Connection& Conn(int fd) {
  if (g_conns[fd] == nullptr) g_conns[fd] = new Connection();
  return *g_conns[fd];
}

template <typename Fn>
Fn Real(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}
using PollFn = int (*)(pollfd*, nfds_t, int);
using RecvmsgFn = ssize_t (*)(int, msghdr*, int);
using SendmsgFn = ssize_t (*)(int, const msghdr*, int);

// One line each on stderr (the mock's log); tests count them.
void Write(const char* line, int n) {
  if (n > 0) (void)::write(STDERR_FILENO, line, static_cast<std::size_t>(n));
}
void LogWaits(int fd, int held_on, const std::string& member) {
  char line[256];
  Write(line, std::snprintf(line, sizeof line,
                            "outbox-mock-kafka: JoinGroup on fd %d waits: member's earlier "
                            "JoinGroup is held on fd %d (member %s)\n",
                            fd, held_on, member.c_str()));
}
void LogClosedWhileMuted(int fd) {
  char line[160];
  Write(line, std::snprintf(line, sizeof line,
                            "outbox-mock-kafka: connection (fd %d) closed by its client while "
                            "muted; the broker closes it and drops its held response\n",
                            fd));
}

// Big-endian readers over a peeked request; false when it is too short.
struct Reader {
  const unsigned char* p;
  std::size_t n, at = 0;
  bool I16(int16_t& v) {
    if (at + 2 > n) return false;
    v = static_cast<int16_t>((p[at] << 8) | p[at + 1]);
    at += 2;
    return true;
  }
  bool Skip(std::size_t k) {
    if (at + k > n) return false;
    at += k;
    return true;
  }
  bool Str(std::string* out) {  // nullable string: int16 length, -1 = null
    int16_t len;
    if (!I16(len)) return false;
    if (len <= 0) return true;
    if (at + static_cast<std::size_t>(len) > n) return false;
    if (out) out->assign(reinterpret_cast<const char*>(p + at), static_cast<std::size_t>(len));
    at += static_cast<std::size_t>(len);
    return true;
  }
};

// What starts `fd`'s stream: a JoinGroup (its member id, and where the id's
// length field is), or something else. `complete` is false when the bytes that
// tell have not all arrived yet.
struct PeekedJoin {
  bool complete = true;
  std::int16_t api = -1, version = -1;  // of any request
  std::int32_t correlation = 0;
  bool join = false;
  std::string member;          // "" for a new member
  std::size_t member_at = 0;   // offset of the member id's int16 length
  std::size_t total = 0;       // the whole request, with its size field
};
PeekedJoin PeekJoin(int fd) {
  PeekedJoin out;
  unsigned char buf[1024];
  // Every request of every client passes here: look at its size and API key
  // first, and copy more only for a JoinGroup.
  ssize_t n = ::recv(fd, buf, 12, MSG_PEEK | MSG_DONTWAIT);
  if (n < 12) {
    out.complete = n <= 0;  // nothing yet: let the mock's read see that itself
    return out;
  }
  out.api = static_cast<std::int16_t>((buf[4] << 8) | buf[5]);
  out.version = static_cast<std::int16_t>((buf[6] << 8) | buf[7]);
  out.correlation = static_cast<std::int32_t>((std::uint32_t{buf[8]} << 24) | (std::uint32_t{buf[9]} << 16) |
                                              (std::uint32_t{buf[10]} << 8) | std::uint32_t{buf[11]});
  out.total = ((std::size_t{buf[0]} << 24) | (std::size_t{buf[1]} << 16) |
               (std::size_t{buf[2]} << 8) | std::size_t{buf[3]}) + 4;
  if (out.api != kJoinGroup) return out;
  n = ::recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  if (n < 6) return out;
  Reader r{buf, static_cast<std::size_t>(n)};
  int16_t api = 0, version = 0;
  if (!r.Skip(4) || !r.I16(api)) return out;
  if (api != kJoinGroup) return out;
  // Header v1 (JoinGroup v0..v5): version, correlation id, client id; then
  // group id, session timeout, rebalance timeout (v1+), member id.
  bool ok = r.I16(version) && version <= 5 && r.Skip(4) && r.Str(nullptr) && r.Str(nullptr) &&
            r.Skip(4) && (version < 1 || r.Skip(4));
  out.member_at = r.at;
  ok = ok && r.Str(&out.member);
  // Not parsed: wait for more bytes, unless the whole request (or all we look
  // at) is here -- then it is malformed, and the mock's parser says so.
  if (!ok) {
    out.complete = static_cast<std::size_t>(n) >= out.total || static_cast<std::size_t>(n) == sizeof buf;
    return out;
  }
  out.join = true;
  return out;
}

// Takes the start of a new member's JoinGroup, up to its empty member id, off
// the socket and keeps it in `c` with a member id of ours in its place (and
// the size field grown to match); the rest of the request is read from the
// socket after it. PeekJoin has seen those bytes, so they are all there.
void RewriteNewMemberJoin(int fd, Connection& c, const PeekedJoin& j, std::string* member) {
  const std::size_t head = j.member_at + 2;  // through the empty id's length
  std::string req(head, '\0');
  const ssize_t got = ::recv(fd, req.data(), head, MSG_DONTWAIT);
  if (got != static_cast<ssize_t>(head)) {  // cannot happen (peeked); lose nothing if it does
    req.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
    c.inject = std::move(req);
    c.inject_at = 0;
    return;
  }
  const std::string id = "outbox-mock-member-" + std::to_string(++g_member_seq);
  const std::size_t size = j.total - 4 + id.size();
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((size >> shift) & 0xff);
  out.append(req, 4, j.member_at - 4);
  out += static_cast<char>((id.size() >> 8) & 0xff);
  out += static_cast<char>(id.size() & 0xff);
  out += id;
  c.inject = std::move(out);
  c.inject_at = 0;
  *member = id;
}

// Advances `c`'s request cursor over the `n` bytes just read into `msg`.
void Consume(Connection& c, const msghdr* msg, std::size_t n) {
  for (std::size_t i = 0; i < msg->msg_iovlen && n > 0; ++i) {
    const std::size_t len = std::min(msg->msg_iov[i].iov_len, n);
    n -= len;
    c.in.Advance(static_cast<const unsigned char*>(msg->msg_iov[i].iov_base), len, [&c] {
      if (c.join == Connection::Join::kReading) c.join = Connection::Join::kRead;
    });
  }
}

// Writes what we answered ourselves, as far as the socket takes it now.
// True when nothing of it is left; errno says why otherwise (EAGAIN: later).
bool FlushPending(int fd, Connection& c) {
  while (!c.pending_out.empty()) {
    const ssize_t r = ::send(fd, c.pending_out.data(), c.pending_out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r < 0) return false;
    if (r == 0) {
      errno = EAGAIN;
      return false;
    }
    c.pending_out.erase(0, static_cast<std::size_t>(r));
  }
  return true;
}

// A DescribeConfigs request at the start of `fd`'s stream, answered by us:
// taken off the socket, its response queued and written when the mock is
// between responses. kWait while it has not all arrived; kNotOurs (nothing
// taken) when it is not one we answer: the mock then sees it.
enum class Answered { kYes, kWait, kNotOurs };
Answered AnswerDescribeConfigs(int fd, Connection& c, std::size_t total) {
  constexpr std::size_t kMax = 1 << 20;
  if (total > kMax) return Answered::kNotOurs;
  std::string req(total, '\0');
  if (::recv(fd, req.data(), total, MSG_PEEK | MSG_DONTWAIT) != static_cast<ssize_t>(total)) {
    return Answered::kWait;
  }
  auto resp = outbox::mock_kafka::AnswerDescribeConfigs(req);
  if (!resp) return Answered::kNotOurs;
  if (::recv(fd, req.data(), total, MSG_DONTWAIT) != static_cast<ssize_t>(total)) {
    return Answered::kWait;  // cannot happen (peeked); the mock's read reports the error
  }
  c.pending_out += *resp;
  if (c.out.AtBoundary()) FlushPending(fd, c);
  return Answered::kYes;
}

}  // namespace

extern "C" int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  const int s = ::accept4(fd, addr, len, 0);
  if (s >= 0) {
    const int one = 1;
    (void)::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (s < kMaxTracked) {
      Conn(s) = Connection{};
      g_accepted[s].store(true, std::memory_order_relaxed);
    }
  }
  return s;
}

extern "C" int close(int fd) {
  if (fd >= 0 && fd < kMaxTracked) g_accepted[fd].store(false, std::memory_order_relaxed);
  return static_cast<int>(::syscall(SYS_close, fd));
}

extern "C" ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  static const auto real = Real<RecvmsgFn>("recvmsg");
  if (!Tracked(fd)) return real(fd, msg, flags);
  Connection& c = Conn(fd);
  if (c.in.AtBoundary() && !c.Injecting()) {  // a request starts here
    const PeekedJoin j = PeekJoin(fd);
    if (!j.complete) {
      errno = EAGAIN;  // the rest of its start is on its way
      return -1;
    }
    if (j.api == outbox::mock_kafka::kApiVersions) c.api_versions[j.correlation] = j.version;
    if (j.api == outbox::mock_kafka::kDescribeConfigs &&
        AnswerDescribeConfigs(fd, c, j.total) != Answered::kNotOurs) {
      errno = EAGAIN;  // answered (the next request on the next poll), or more to come
      return -1;
    }
    std::string member = j.member;
    if (j.join && member.empty()) RewriteNewMemberJoin(fd, c, j, &member);
    if (!member.empty()) {
      for (int x = 0; x < kMaxTracked && c.waits_for < 0; ++x) {
        if (x != fd && HoldsJoinOf(x, member)) {
          c.waits_for = x;
          c.waits_member = member;
          c.waiting_since = std::chrono::steady_clock::now();
          LogWaits(fd, x, member);
        }
      }
      if (c.waits_for >= 0) {
        errno = EAGAIN;
        return -1;
      }
      c.join_member = member;
      c.join = Connection::Join::kReading;
    }
  }
  ssize_t n = 0;
  if (c.Injecting()) {
    for (std::size_t i = 0; i < msg->msg_iovlen && c.Injecting(); ++i) {
      const std::size_t take = std::min(msg->msg_iov[i].iov_len, c.inject.size() - c.inject_at);
      std::memcpy(msg->msg_iov[i].iov_base, c.inject.data() + c.inject_at, take);
      c.inject_at += take;
      n += static_cast<ssize_t>(take);
    }
    if (!c.Injecting()) {
      c.inject.clear();
      c.inject_at = 0;
    }
  } else {
    n = real(fd, msg, flags);
  }
  if (n > 0) Consume(c, msg, static_cast<std::size_t>(n));
  return n;
}

// The mock's writes: our own responses go between two of its responses, and
// an ApiVersions response gets DescribeConfigs added.
extern "C" ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  static const auto real = Real<SendmsgFn>("sendmsg");
  if (!Tracked(fd)) return real(fd, msg, flags);
  Connection& c = Conn(fd);
  if (c.out.AtBoundary() && !FlushPending(fd, c)) return -1;  // errno from send
  std::size_t total = 0;
  for (std::size_t i = 0; i < msg->msg_iovlen; ++i) total += msg->msg_iov[i].iov_len;
  auto advance = [&c](const msghdr* m, std::size_t n) {
    for (std::size_t i = 0; i < m->msg_iovlen && n > 0; ++i) {
      const std::size_t len = std::min(m->msg_iov[i].iov_len, n);
      n -= len;
      c.out.Advance(static_cast<const unsigned char*>(m->msg_iov[i].iov_base), len, [] {});
    }
  };
  if (c.out.AtBoundary() && !c.api_versions.empty() && total >= 8) {
    std::string bytes;
    for (std::size_t i = 0; i < msg->msg_iovlen; ++i) {
      bytes.append(static_cast<const char*>(msg->msg_iov[i].iov_base), msg->msg_iov[i].iov_len);
    }
    const auto u = [&bytes](std::size_t i) { return std::uint32_t{static_cast<unsigned char>(bytes[i])}; };
    const std::size_t frame = ((u(0) << 24) | (u(1) << 16) | (u(2) << 8) | u(3)) + 4;
    const auto correlation = static_cast<std::int32_t>((u(4) << 24) | (u(5) << 16) | (u(6) << 8) | u(7));
    const auto it = c.api_versions.find(correlation);
    if (it != c.api_versions.end() && frame <= bytes.size()) {
      const std::int16_t version = it->second;
      c.api_versions.erase(it);
      if (auto rewritten = outbox::mock_kafka::WithDescribeConfigs(bytes.substr(0, frame), version)) {
        // Ours in place of the mock's frame; the mock sees that frame written.
        c.pending_out += *rewritten;
        FlushPending(fd, c);
        iovec whole{bytes.data(), frame};
        msghdr m{};
        m.msg_iov = &whole;
        m.msg_iovlen = 1;
        advance(&m, frame);
        return static_cast<ssize_t>(frame);
      }
    }
  }
  msghdr limited = *msg;
  std::array<iovec, 64> iov{};
  if (!c.pending_out.empty() && c.out.left > 0 && msg->msg_iovlen <= iov.size()) {
    // Only up to the end of the response under way: ours come next.
    std::size_t room = c.out.left;
    std::size_t k = 0;
    for (; k < msg->msg_iovlen && room > 0; ++k) {
      iov[k] = msg->msg_iov[k];
      iov[k].iov_len = std::min(iov[k].iov_len, room);
      room -= iov[k].iov_len;
    }
    limited.msg_iov = iov.data();
    limited.msg_iovlen = k;
  }
  const ssize_t r = real(fd, &limited, flags);
  if (r > 0) {
    advance(msg, static_cast<std::size_t>(r));
    if (c.out.AtBoundary()) FlushPending(fd, c);
  }
  return r;
}

extern "C" int poll(pollfd* fds, nfds_t n, int timeout_ms) {
  static const auto real = Real<PollFn>("poll");
  bool tracked_any = false;
  for (nfds_t i = 0; i < n; ++i) {
    if (!Tracked(fds[i].fd)) continue;
    tracked_any = true;
    Connection& c = Conn(fds[i].fd);
    c.muted = (fds[i].events & POLLIN) == 0;
    using Join = Connection::Join;
    if (c.join == Join::kRead) c.join = c.muted ? Join::kHeld : Join::kNone;
    else if (c.join == Join::kHeld && !c.muted) c.join = Join::kNone;
  }
  if (!tracked_any) return real(fds, n, timeout_ms);

  // A JoinGroup waiting for its member's held one is not polled for reading
  // until that one is answered (its connection no longer muted) or closed.
  const auto now = std::chrono::steady_clock::now();
  bool holding[1024] = {};
  for (nfds_t i = 0; i < n && i < 1024; ++i) {
    if (!Tracked(fds[i].fd)) continue;
    Connection& c = Conn(fds[i].fd);
    if (c.waits_for >= 0) {
      const int x = c.waits_for;
      const bool still = HoldsJoinOf(x, c.waits_member) && now - c.waiting_since < kMaxWait;
      if (!still) c.waits_for = -1;
    }
    if (c.waits_for >= 0 && (fds[i].events & POLLIN) != 0) {
      fds[i].events &= static_cast<short>(~POLLIN);
      holding[i] = true;
    }
    fds[i].events |= POLLRDHUP;
  }
  // Our own responses waiting at a frame boundary: wake when writable.
  bool added_out[1024] = {};
  for (nfds_t i = 0; i < n && i < 1024; ++i) {
    if (!Tracked(fds[i].fd) || (fds[i].events & POLLOUT) != 0) continue;
    const Connection& c = Conn(fds[i].fd);
    if (!c.pending_out.empty() && c.out.AtBoundary()) {
      fds[i].events |= POLLOUT;
      added_out[i] = true;
    }
  }
  // A rewritten request in memory is ready to read now.
  bool injected_any = false;
  for (nfds_t i = 0; i < n; ++i) {
    injected_any = injected_any || (Tracked(fds[i].fd) && (fds[i].events & POLLIN) != 0 &&
                                    Conn(fds[i].fd).Injecting());
  }
  int r = real(fds, n, injected_any ? 0 : timeout_ms);
  if (injected_any && r >= 0) {
    for (nfds_t i = 0; i < n; ++i) {
      if (!Tracked(fds[i].fd) || (fds[i].events & POLLIN) == 0 || !Conn(fds[i].fd).Injecting()) continue;
      if (fds[i].revents == 0) ++r;
      fds[i].revents |= POLLIN;
    }
  }

  for (nfds_t i = 0; i < n; ++i) {
    if (!Tracked(fds[i].fd)) continue;
    Connection& c = Conn(fds[i].fd);
    if (!c.pending_out.empty() && c.out.AtBoundary()) FlushPending(fds[i].fd, c);
    if (i < 1024 && added_out[i]) {  // the mock did not ask: not its event
      fds[i].events &= static_cast<short>(~POLLOUT);
      fds[i].revents &= static_cast<short>(~POLLOUT);
    }
  }

  bool closed_while_muted = false;
  for (nfds_t i = 0; i < n; ++i) {
    if (!Tracked(fds[i].fd)) continue;
    if (i < 1024 && holding[i]) fds[i].events |= POLLIN;
    const bool muted = Conn(fds[i].fd).muted;
    if (r > 0 && muted && (fds[i].revents & POLLRDHUP) != 0) {
      fds[i].revents |= POLLHUP;
      closed_while_muted = true;
      LogClosedWhileMuted(fds[i].fd);
    }
    fds[i].events &= static_cast<short>(~POLLRDHUP);
    fds[i].revents &= static_cast<short>(~POLLRDHUP);
  }
  if (r <= 0) return r;
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
