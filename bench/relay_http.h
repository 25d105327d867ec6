// The relay's HTTP endpoint from a benchmark: a port for http.listen, a GET,
// and one sample of /metrics. Single-threaded use; no state.
#ifndef OUTBOX_BENCH_RELAY_HTTP_H_
#define OUTBOX_BENCH_RELAY_HTTP_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <httplib.h>

#include "prometheus_text.h"

namespace outbox::bench {

// A port nobody listens on now (bound once by us, then released).
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::perror("bench: free port");
    std::exit(1);
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// GET http://127.0.0.1:port/path; the body or "".
inline std::string HttpGet(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(5, 0);
  auto res = cli.Get(path.c_str());
  return res && res->status == 200 ? res->body : "";
}

// The value of a sample in Prometheus text (its name, and labels it must
// have), or -1 (tests/prometheus_text.h).
inline double MetricSample(const std::string& body, const std::string& name) {
  return outbox::testing::PrometheusSample(body, name);
}

}  // namespace outbox::bench

#endif  // OUTBOX_BENCH_RELAY_HTTP_H_
