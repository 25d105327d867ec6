#include "common.h"

#include "outbox/kafka.h"

namespace outbox {

const std::map<std::string, std::string>& KafkaProducerDefaults() {
  static const std::map<std::string, std::string> kDefaults = {
      {"enable.idempotence", "true"},
      {"acks", "all"},
      {"message.timeout.ms", "10000"},
      // Admits every event enqueue() accepts (outbox.max_event_bytes, 1,000,000
      // bytes of payload + key + headers) plus the relay's own headers; below
      // the broker's default message.max.bytes (1,048,588).
      {"message.max.bytes", std::to_string(kDefaultMessageMaxBytes)},
      // Send at once: the relay produces a claimed batch in one go and waits
      // for its acks, so a wait for more messages only delays it (5 ms was
      // most of an idle relay's enqueue → SENT; docs/benchmarks.md, "Latency
      // with the defaults"). Messages queued while a request is in flight
      // still go together.
      {"linger.ms", "0"},
      {"queue.buffering.max.kbytes", "65536"},
      {"queue.buffering.max.messages", "100000"},
      {"log_level", "4"},
      // Nagle + delayed ACKs stall small produce requests by ~40 ms.
      {"socket.nagle.disable", "true"},
  };
  return kDefaults;
}

}  // namespace outbox

namespace outbox::kafka_internal {

Status SetProperties(rd_kafka_conf_t* conf, std::initializer_list<const Props*> layers) {
  char err[512];
  for (const Props* m : layers) {
    for (const auto& [k, v] : *m) {
      if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
        // The value is not echoed: it may be a secret (sasl.password).
        return Status::InvalidArgument("kafka property " + k + ": " + err);
      }
    }
  }
  return Status::Ok();
}

Props ConnectionProperties(const Props& props) {
  Props out;
  for (const auto& [k, v] : props) {
    if (k == "bootstrap.servers" || k == "metadata.broker.list" || k == "client.id" ||
        k.rfind("security.", 0) == 0 || k.rfind("sasl.", 0) == 0 || k.rfind("ssl.", 0) == 0 ||
        k.rfind("ssl_", 0) == 0 || k == "broker.address.family") {
      out[k] = v;
    }
  }
  return out;
}

void LogFromKafka(Logger& logger, const rd_kafka_t* rk, int level, const char* facility,
                  const char* text) {
  const LogLevel l = level <= 3 ? LogLevel::kError
                     : level == 4 ? LogLevel::kWarn
                     : level <= 6 ? LogLevel::kInfo
                                  : LogLevel::kDebug;
  logger.Log(l, "librdkafka", {{"client", rk ? rd_kafka_name(rk) : ""},
                                {"facility", facility ? facility : ""},
                                {"text", text ? text : ""}});
}

void LogKafkaError(Logger& logger, rd_kafka_t* rk, int err, const char* reason) {
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  std::string text = reason ? reason : "";
  LogLevel level = LogLevel::kWarn;  // most are transient: the client retries
  if (code == RD_KAFKA_RESP_ERR__FATAL) {
    char buf[512] = {0};
    const auto fatal = rd_kafka_fatal_error(rk, buf, sizeof buf);
    text += std::string("; fatal: ") + rd_kafka_err2name(fatal) + ": " + buf;
    level = LogLevel::kError;
  }
  if (code == RD_KAFKA_RESP_ERR__AUTHENTICATION || code == RD_KAFKA_RESP_ERR__SSL) {
    level = LogLevel::kError;  // a credentials or certificate problem does not fix itself
  }
  logger.Log(level, "kafka client error", {{"client", rk ? rd_kafka_name(rk) : ""},
                                           {"code", rd_kafka_err2name(code)},
                                           {"reason", text}});
}

std::vector<FamilyTopic> TopicFamily(const rd_kafka_metadata_t& md, const std::vector<std::string>& topics,
                                     const std::string& dlt_suffix) {
  std::map<std::string, int> partitions;  // existing topics
  for (int t = 0; t < md.topic_cnt; ++t) {
    if (md.topics[t].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      partitions[md.topics[t].topic] = md.topics[t].partition_cnt;
    }
  }
  auto has = [&](const std::string& t) {
    const auto it = partitions.find(t);
    return it == partitions.end() ? 0 : it->second;
  };
  std::vector<FamilyTopic> out;
  for (const std::string& t : topics) {
    out.push_back({t, "main", has(t)});
    for (int n = 1; has(t + ".retry." + std::to_string(n)) > 0; ++n) {
      const std::string retry = t + ".retry." + std::to_string(n);
      out.push_back({retry, "retry", has(retry)});
    }
    out.push_back({t + dlt_suffix, "dead-letter", has(t + dlt_suffix)});
  }
  return out;
}

Status OpenWithMetadata(rd_kafka_type_t type, std::initializer_list<const Props*> layers, int timeout_ms,
                        const std::string& what, RkPtr* rk, MetadataPtr* md) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  if (Status st = SetProperties(conf, layers); !st.ok()) {
    rd_kafka_conf_destroy(conf);
    return st;
  }
  char err[512];
  rk->reset(rd_kafka_new(type, conf, err, sizeof err));
  if (!*rk) return Status::InvalidArgument(what + ": " + err);
  const rd_kafka_metadata_t* raw = nullptr;
  if (rd_kafka_resp_err_t e = rd_kafka_metadata(rk->get(), /*all_topics=*/1, nullptr, &raw, timeout_ms);
      e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Status::Unavailable(what + ": broker metadata: " + rd_kafka_err2str(e));
  }
  md->reset(raw);
  return Status::Ok();
}

}  // namespace outbox::kafka_internal
