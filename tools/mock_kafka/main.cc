// outbox-mock-kafka: a Kafka-protocol broker for tests and the demo, built on
// librdkafka's mock cluster (real Kafka protocol over loopback TCP), with a line
// protocol on a TCP control port to break it on purpose.
//
//   outbox-mock-kafka [--brokers N] [--topic NAME:PARTITIONS]...
//                     [--bootstrap-file PATH] [--control-file PATH]
//   outbox-mock-kafka ctl HOST:PORT COMMAND [ARGS...]
//
// Runs until SIGTERM/SIGINT. See docs/testing.md for the commands and the
// mock's known limits.
#include <arpa/inet.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "outbox/version.h"
#include "topic_configs.h"

// socket_hooks.cc replaces accept, close, poll, recvmsg and sendmsg for
// librdkafka: every connection a broker accepts gets TCP_NODELAY, a member's
// second JoinGroup waits while its first is held (the mock aborted on it), new
// members get ids never given before, and DescribeConfigs is answered
// (topic_configs.h).

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

bool WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return false;
    f << content << "\n";
    if (!f) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

bool ParseInt(const std::string& s, long& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtol(s.c_str(), &end, 10);
  return errno == 0 && end && *end == '\0';
}

// Accepts a number or a librdkafka error name, with or without the
// RD_KAFKA_RESP_ERR_ prefix (e.g. NOT_LEADER_FOR_PARTITION, _TRANSPORT).
bool ParseError(std::string s, rd_kafka_resp_err_t& out) {
  long n;
  if (ParseInt(s, n)) {
    out = static_cast<rd_kafka_resp_err_t>(n);
    return true;
  }
  const std::string prefix = "RD_KAFKA_RESP_ERR_";
  if (s.rfind(prefix, 0) == 0) s = s.substr(prefix.size());
  const rd_kafka_err_desc* descs = nullptr;
  size_t cnt = 0;
  rd_kafka_get_err_descs(&descs, &cnt);
  for (size_t i = 0; i < cnt; ++i) {
    if (descs[i].name && s == descs[i].name) {
      out = descs[i].code;
      return true;
    }
  }
  return false;
}

bool ParseApiKey(const std::string& s, int16_t& out) {
  static const std::map<std::string, int16_t> kNames = {
      {"Produce", 0},      {"Fetch", 1},         {"ListOffsets", 2},    {"Metadata", 3},
      {"OffsetCommit", 8}, {"OffsetFetch", 9},   {"FindCoordinator", 10}, {"JoinGroup", 11},
      {"Heartbeat", 12},   {"SyncGroup", 14},    {"InitProducerId", 22}};
  long n;
  if (ParseInt(s, n) && n >= 0 && n < 100) {
    out = static_cast<int16_t>(n);
    return true;
  }
  auto it = kNames.find(s);
  if (it == kNames.end()) return false;
  out = it->second;
  return true;
}

class MockBroker {
 public:
  MockBroker(rd_kafka_mock_cluster_t* mc) : mc_(mc) {}

  // One control command -> one reply line ("ok ..." or "error ...").
  std::string Handle(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string t; in >> t;) w.push_back(t);
    if (w.empty()) return "error empty command";
    const std::string& cmd = w[0];
    long a = 0, b = 0;
    if (cmd == "ping") return "ok pong";
    if (cmd == "bootstrap") return std::string("ok ") + rd_kafka_mock_cluster_bootstraps(mc_);
    if ((cmd == "broker-down" || cmd == "broker-up") && w.size() == 2 && ParseInt(w[1], a)) {
      auto id = static_cast<int32_t>(a);
      rd_kafka_resp_err_t err = cmd == "broker-down" ? rd_kafka_mock_broker_set_down(mc_, id)
                                                     : rd_kafka_mock_broker_set_up(mc_, id);
      return Reply(err);
    }
    if (cmd == "rtt" && w.size() == 3 && ParseInt(w[1], a) && ParseInt(w[2], b) && b >= 0) {
      return Reply(rd_kafka_mock_broker_set_rtt(mc_, static_cast<int32_t>(a), static_cast<int>(b)));
    }
    if (cmd == "request-errors" && w.size() == 4) {
      int16_t api;
      rd_kafka_resp_err_t err;
      if (!ParseApiKey(w[1], api)) return "error unknown api key " + w[1];
      if (!ParseError(w[2], err)) return "error unknown error code " + w[2];
      if (!ParseInt(w[3], a) || a <= 0 || a > 1000000) return "error bad count " + w[3];
      std::vector<rd_kafka_resp_err_t> errs(static_cast<size_t>(a), err);
      rd_kafka_mock_push_request_errors_array(mc_, api, errs.size(), errs.data());
      return "ok";
    }
    if (cmd == "clear-errors" && w.size() == 2) {
      int16_t api;
      if (!ParseApiKey(w[1], api)) return "error unknown api key " + w[1];
      rd_kafka_mock_clear_request_errors(mc_, api);
      return "ok";
    }
    if (cmd == "topic-create" && w.size() == 3 && ParseInt(w[2], a) && a > 0) {
      return Reply(rd_kafka_mock_topic_create(mc_, w[1].c_str(), static_cast<int>(a), 1));
    }
    if (cmd == "topic-error" && w.size() == 3) {
      rd_kafka_resp_err_t err;
      if (!ParseError(w[2], err)) return "error unknown error code " + w[2];
      rd_kafka_mock_topic_set_error(mc_, w[1].c_str(), err);
      return "ok";
    }
    if (cmd == "topic-config" && w.size() == 4) {
      outbox::mock_kafka::SetTopicConfig(w[1], w[2], w[3]);
      return "ok";
    }
    return "error unknown or malformed command: " + line +
           " (commands: ping, bootstrap, broker-down ID, broker-up ID, rtt ID MS, "
           "request-errors API ERR COUNT, clear-errors API, topic-create NAME PARTS, "
           "topic-error NAME ERR, topic-config NAME KEY VALUE; ID -1 = all brokers)";
  }

 private:
  static std::string Reply(rd_kafka_resp_err_t err) {
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return "ok";
    return std::string("error ") + rd_kafka_err2name(err) + ": " + rd_kafka_err2str(err);
  }
  rd_kafka_mock_cluster_t* mc_;
};

int ListenLoopback(uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

// Serves one connection: reads lines until EOF, answers each.
void ServeClient(int fd, MockBroker& broker) {
  std::string buf;
  char chunk[512];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, 200);
    if (g_stop) break;
    if (r <= 0) continue;
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::string reply = broker.Handle(line) + "\n";
      std::cerr << "outbox-mock-kafka: control: " << line << " -> " << reply;
      if (::write(fd, reply.data(), reply.size()) < 0) return;
    }
  }
}

// Sends one control command to a running mock and prints its reply; exit 0
// when the reply is "ok ...". REQUIRES: `addr` was checked (HostPort).
int RunCtl(const std::string& addr, const std::vector<std::string>& words) {
  const auto colon = addr.rfind(':');
  long port = 0;
  ParseInt(addr.substr(colon + 1), port);
  std::string line;
  for (const auto& w : words) line += (line.empty() ? "" : " ") + w;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    std::cerr << "outbox-mock-kafka ctl: cannot connect to " << addr << ": "
              << std::strerror(errno) << "\n";
    return 1;
  }
  line += "\n";
  if (::write(fd, line.data(), line.size()) < 0) return 1;
  std::string reply;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') reply += c;
  ::close(fd);
  std::cout << reply << "\n";
  return reply.rfind("ok", 0) == 0 ? 0 : 1;
}

// HOST:PORT with a numeric IPv4 host and a port in 1..65535.
CLI::Validator HostPort() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const auto colon = v.rfind(':');
        long port = 0;
        in_addr ip{};
        if (colon == std::string::npos || !ParseInt(v.substr(colon + 1), port) || port < 1 ||
            port > 65535 || ::inet_pton(AF_INET, v.substr(0, colon).c_str(), &ip) != 1) {
          return "must be HOST:PORT (an IPv4 address and a port), got " + v;
        }
        return std::string();
      },
      "HOST:PORT");
}

// NAME:PARTITIONS with 1..10000 partitions.
CLI::Validator TopicSpec() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const auto colon = v.rfind(':');
        long parts = 0;
        if (colon == std::string::npos || colon == 0 || !ParseInt(v.substr(colon + 1), parts) ||
            parts < 1 || parts > 10000) {
          return "must be NAME:PARTITIONS (1..10000 partitions), got " + v;
        }
        return std::string();
      },
      "NAME:PARTITIONS");
}

}  // namespace

int main(int argc, char** argv) {
  long brokers = 3;
  std::vector<std::string> topic_specs;
  std::string bootstrap_file, control_file, ctl_address;
  std::vector<std::string> ctl_words;
  CLI::App app{"outbox-mock-kafka: a Kafka-protocol broker for tests and the demo (librdkafka's mock "
               "cluster over loopback TCP), with a control port to break it on purpose. Runs until "
               "SIGTERM/SIGINT. Commands and limits: docs/testing.md.",
               "outbox-mock-kafka"};
  app.set_version_flag("--version", std::string("outbox-mock-kafka ") + OUTBOX_VERSION_STRING);
  app.add_option("--brokers", brokers, "number of brokers (default 3)")->check(CLI::Range(1L, 32L));
  app.add_option("--topic", topic_specs, "create a topic (repeatable)")->check(TopicSpec());
  app.add_option("--bootstrap-file", bootstrap_file, "write the bootstrap servers here once listening");
  app.add_option("--control-file", control_file, "write the control port's HOST:PORT here");
  auto* ctl = app.add_subcommand("ctl", "send one control command to a running mock; prints its reply");
  ctl->add_option("address", ctl_address, "the mock's control HOST:PORT")->required()->check(HostPort());
  // Everything after the address is the command, passed on as given ("-1" included).
  ctl->prefix_command();
  ctl->footer("COMMAND [ARGS...]: ping, bootstrap, broker-down ID, ... (docs/testing.md)");
  if (auto done = outbox::tools::ParseOrExit(app, argc, argv, "outbox-mock-kafka")) return *done;
  if (ctl->parsed()) {
    ctl_words = ctl->remaining();
    if (ctl_words.empty()) {
      std::cerr << "outbox-mock-kafka: ctl: a COMMAND is required after the address\n"
                << "run `outbox-mock-kafka ctl --help` for usage\n";
      return outbox::tools::kExitUsage;
    }
    return RunCtl(ctl_address, ctl_words);
  }
  std::vector<std::pair<std::string, int>> topics;
  for (const auto& t : topic_specs) {
    const auto colon = t.rfind(':');
    long parts = 0;
    ParseInt(t.substr(colon + 1), parts);
    topics.emplace_back(t.substr(0, colon), static_cast<int>(parts));
  }

  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);

  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
  // librdkafka's own trace of the mock (e.g. "mock" or "all") for a hunt in
  // its log; off by default.
  if (const char* debug = std::getenv("OUTBOX_MOCK_KAFKA_DEBUG"); debug && *debug) {
    rd_kafka_conf_set(conf, "debug", debug, errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "log_level", "7", errstr, sizeof errstr);
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (!rk) {
    std::cerr << "outbox-mock-kafka: rd_kafka_new: " << errstr << "\n";
    return 1;
  }
  rd_kafka_mock_cluster_t* mc = rd_kafka_mock_cluster_new(rk, static_cast<int>(brokers));
  if (!mc) {
    std::cerr << "outbox-mock-kafka: cannot create the mock cluster\n";
    return 1;
  }
  for (const auto& [name, parts] : topics) {
    rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mc, name.c_str(), parts, 1);
    if (err) {
      std::cerr << "outbox-mock-kafka: topic " << name << ": " << rd_kafka_err2str(err) << "\n";
      return 1;
    }
  }
  MockBroker broker(mc);
  uint16_t control_port = 0;
  int listen_fd = ListenLoopback(control_port);
  if (listen_fd < 0) {
    std::cerr << "outbox-mock-kafka: cannot open the control port: " << std::strerror(errno) << "\n";
    return 1;
  }
  const std::string bootstrap = rd_kafka_mock_cluster_bootstraps(mc);
  const std::string control = "127.0.0.1:" + std::to_string(control_port);
  // Control file first: whoever waits for the bootstrap file may use both.
  if (!control_file.empty() && !WriteFileAtomically(control_file, control)) {
    std::cerr << "outbox-mock-kafka: cannot write " << control_file << "\n";
    return 1;
  }
  if (!bootstrap_file.empty() && !WriteFileAtomically(bootstrap_file, bootstrap)) {
    std::cerr << "outbox-mock-kafka: cannot write " << bootstrap_file << "\n";
    return 1;
  }
  std::cerr << "outbox-mock-kafka: " << brokers << " broker(s) at " << bootstrap
            << ", control at " << control << "\n";
  std::cout << bootstrap << std::endl;

  while (!g_stop) {
    pollfd p{listen_fd, POLLIN, 0};
    int r = ::poll(&p, 1, 200);
    if (r <= 0) continue;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ServeClient(fd, broker);  // one client at a time: commands are short
    ::close(fd);
  }
  std::cerr << "outbox-mock-kafka: stopping\n";
  ::close(listen_fd);
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return 0;
}
