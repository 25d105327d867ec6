// Test helpers around Kafka: a private outbox-mock-kafka process per test (so
// one test's broker faults never disturb another), and reading a topic back.
#ifndef OUTBOX_TESTS_KAFKA_HELPERS_H_
#define OUTBOX_TESTS_KAFKA_HELPERS_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "subprocess.h"
#include "test_env.h"

namespace outbox::testing {

inline std::string ReadFirstLine(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

class MockKafka {
 public:
  // topics: {"name:partitions", ...}
  MockKafka(int brokers, const std::vector<std::string>& topics) {
    namespace fs = std::filesystem;
    dir_ = fs::temp_directory_path() / ("outbox-mk-" + RandomSuffix());
    fs::create_directories(dir_);
    std::vector<std::string> argv = {OUTBOX_MOCK_KAFKA_BIN, "--brokers", std::to_string(brokers),
                                     "--bootstrap-file", (dir_ / "bootstrap").string(),
                                     "--control-file", (dir_ / "control").string()};
    for (const auto& t : topics) {
      argv.push_back("--topic");
      argv.push_back(t);
    }
    proc_ = std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{},
                                         (dir_ / "log").string());
    const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(20));
    while (!fs::exists(dir_ / "bootstrap") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    bootstrap_ = ReadFirstLine(dir_ / "bootstrap");
    control_ = ReadFirstLine(dir_ / "control");
    EXPECT_FALSE(bootstrap_.empty()) << "outbox-mock-kafka did not start: " << proc_->Log();
  }
  ~MockKafka() {
    proc_.reset();
    std::filesystem::remove_all(dir_);
  }
  const std::string& bootstrap() const { return bootstrap_; }
  // The process's exit code if it has exited (a broker that died under a test
  // looks like a broker that is down), and what it wrote.
  std::optional<int> Exited() { return proc_->Wait(std::chrono::milliseconds(0)); }
  std::string Log() const { return proc_->Log(); }

  // SIGTERM, then its exit code.
  int Terminate() {
    proc_->Signal(SIGTERM);
    return proc_->Wait().value_or(-1);
  }

  // One control command; returns the reply line.
  std::string Control(const std::string& line) const {
    auto colon = control_.rfind(':');
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(control_.substr(colon + 1))));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    std::string reply;
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      std::string msg = line + "\n";
      if (write(fd, msg.data(), msg.size()) == static_cast<ssize_t>(msg.size())) {
        char c;
        while (read(fd, &c, 1) == 1 && c != '\n') reply += c;
      }
    }
    close(fd);
    return reply;
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<Subprocess> proc_;
  std::string bootstrap_, control_;
};

struct Message {
  std::string key, value;
  bool key_null = false;    // no key (NULL), not an empty one
  bool value_null = false;  // a NULL value (tombstone), not an empty one
  int partition = 0;
  long long offset = 0;
  std::map<std::string, std::string> headers;
};

// Reads `topic` (partitions 0..partitions-1) from the beginning until `expected`
// messages arrived, `quiet` passed without more and every partition was read up
// to its high watermark, or `timeout`. The watermark check matters when the
// topic holds duplicates: `expected` copies can arrive before a slow partition's
// first fetch does.
inline std::vector<Message> ReadTopic(const std::string& bootstrap, const std::string& topic,
                                      int partitions, std::size_t expected,
                                      std::chrono::milliseconds timeout,
                                      std::chrono::milliseconds quiet = std::chrono::milliseconds(500)) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", "outbox-test-reader", err, sizeof err);
  rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
  // The mock trims each partition to ~5 MiB; if the start moved, read from the
  // new start instead of jumping to the end.
  rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof err);
  rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
  rd_kafka_t* c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  std::vector<Message> out;
  if (!c) {
    ADD_FAILURE() << err;
    return out;
  }
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(c, parts);
  rd_kafka_topic_partition_list_destroy(parts);
  std::vector<long long> next(static_cast<std::size_t>(partitions), 0);
  // True when each partition was read to the high watermark it has now (or the
  // watermarks cannot be asked: then the quiet period alone decides, as before).
  auto caught_up = [&] {
    for (int p = 0; p < partitions; ++p) {
      int64_t low = 0, high = 0;
      if (rd_kafka_query_watermark_offsets(c, topic.c_str(), p, &low, &high, 2000) !=
          RD_KAFKA_RESP_ERR_NO_ERROR) {
        return true;
      }
      if (std::max<long long>(next[static_cast<std::size_t>(p)], low) < high) return false;
    }
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto last = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < deadline) {
    if (out.size() >= expected && std::chrono::steady_clock::now() - last >= quiet) {
      if (caught_up()) break;
      last = std::chrono::steady_clock::now();
    }
    rd_kafka_message_t* m = rd_kafka_consumer_poll(c, 100);
    if (!m) continue;
    if (!m->err) {
      Message msg;
      if (m->key) msg.key.assign(static_cast<const char*>(m->key), m->key_len);
      msg.key_null = m->key == nullptr;
      if (m->payload) {
        msg.value.assign(static_cast<const char*>(m->payload), m->len);
      } else {
        msg.value_null = true;
      }
      msg.partition = m->partition;
      msg.offset = m->offset;
      if (m->partition >= 0 && m->partition < partitions) {
        next[static_cast<std::size_t>(m->partition)] = m->offset + 1;
      }
      rd_kafka_headers_t* hdrs = nullptr;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name;
        const void* val;
        size_t size;
        for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &val, &size) == 0; ++i) {
          msg.headers[name] = std::string(static_cast<const char*>(val), size);
        }
      }
      out.push_back(std::move(msg));
      last = std::chrono::steady_clock::now();
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  return out;
}

// Produces `msgs` to `topic` (key, value, headers; partition chosen by key) and
// waits for the acks. Returns how many were acked.
inline int Produce(const std::string& bootstrap, const std::string& topic,
                   const std::vector<Message>& msgs,
                   const std::map<std::string, std::string>& props = {}) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  for (const auto& [k, v] : props) rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof err);
  rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
  static int acked;
  acked = 0;
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void*) {
    if (!m->err) ++acked;
  });
  rd_kafka_t* p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (!p) {
    ADD_FAILURE() << err;
    return 0;
  }
  for (const Message& m : msgs) {
    rd_kafka_headers_t* h = rd_kafka_headers_new(m.headers.size());
    for (const auto& [k, v] : m.headers) {
      rd_kafka_header_add(h, k.c_str(), -1, v.data(), static_cast<ssize_t>(v.size()));
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
    rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic.c_str()),
                      RD_KAFKA_V_KEY(m.key_null ? nullptr : m.key.data(), m.key.size()),
                      RD_KAFKA_V_VALUE(m.value_null ? nullptr : const_cast<char*>(m.value.data()),
                                       m.value_null ? 0 : m.value.size()),
                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                      RD_KAFKA_V_END);
#pragma GCC diagnostic pop
  }
  rd_kafka_flush(p, 30000);
  rd_kafka_destroy(p);
  return acked;
}

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_KAFKA_HELPERS_H_
