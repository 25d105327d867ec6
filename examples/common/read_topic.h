// Reads a whole topic from the beginning (the examples' reports): message
// count and copies per outbox event id. Example code, not part of the library.
#ifndef OUTBOX_EXAMPLES_COMMON_READ_TOPIC_H_
#define OUTBOX_EXAMPLES_COMMON_READ_TOPIC_H_

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <map>
#include <set>
#include <string>

namespace example {

struct Topic {
  long messages = 0;
  std::set<std::string> event_ids;
  std::map<std::string, int> copies;  // event id -> copies on the topic
  std::string error;
};

// Reads every message of `topic` from the beginning to the end of each partition.
inline Topic ReadTopic(const std::string& bootstrap, const std::string& topic,
                       const std::string& group) {
  Topic out;
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", group.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
  rd_kafka_conf_set(conf, "enable.partition.eof", "true", err, sizeof err);
  rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
  rd_kafka_t* c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (!c) {
    out.error = err;
    return out;
  }
  const rd_kafka_metadata_t* md = nullptr;
  rd_kafka_topic_t* t = rd_kafka_topic_new(c, topic.c_str(), nullptr);
  rd_kafka_resp_err_t e = rd_kafka_metadata(c, 0, t, &md, 10'000);
  rd_kafka_topic_destroy(t);
  if (e || md->topic_cnt != 1 || md->topics[0].err) {
    out.error = "no metadata for topic " + topic + ": " +
                rd_kafka_err2str(e ? e : md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN);
    if (md) rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(c);
    return out;
  }
  const int partitions = md->topics[0].partition_cnt;
  rd_kafka_metadata_destroy(md);
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(c, parts);
  rd_kafka_topic_partition_list_destroy(parts);
  std::set<int> at_end;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (static_cast<int>(at_end.size()) < partitions && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(c, 200);
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      at_end.insert(m->partition);
    } else if (!m->err) {
      ++out.messages;
      rd_kafka_headers_t* hdrs = nullptr;
      const void* val = nullptr;
      size_t size = 0;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
          rd_kafka_header_get_last(hdrs, "outbox-event-id", &val, &size) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        std::string id(static_cast<const char*>(val), size);
        ++out.copies[id];
        out.event_ids.insert(std::move(id));
      }
    }
    rd_kafka_message_destroy(m);
  }
  if (static_cast<int>(at_end.size()) < partitions) out.error = "did not reach the end of every partition in 60 s";
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  return out;
}

}  // namespace example

#endif  // OUTBOX_EXAMPLES_COMMON_READ_TOPIC_H_
