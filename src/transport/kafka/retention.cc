// ReadTopicRetention (outbox/kafka.h): the retention.ms of a consumer's topics.
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "outbox/kafka.h"

namespace outbox {
namespace {

struct QueueDeleter {
  void operator()(rd_kafka_queue_t* q) const { rd_kafka_queue_destroy(q); }
};
struct OptionsDeleter {
  void operator()(rd_kafka_AdminOptions_t* o) const { rd_kafka_AdminOptions_destroy(o); }
};
struct EventDeleter {
  void operator()(rd_kafka_event_t* e) const { rd_kafka_event_destroy(e); }
};
// Owns the resources passed to rd_kafka_DescribeConfigs.
struct Resources {
  std::vector<rd_kafka_ConfigResource_t*> list;
  ~Resources() { rd_kafka_ConfigResource_destroy_array(list.data(), list.size()); }
};

}  // namespace

Result<std::vector<TopicRetention>> ReadTopicRetention(const std::map<std::string, std::string>& properties,
                                                       const std::vector<std::string>& topics,
                                                       const std::string& dlt_suffix,
                                                       std::chrono::milliseconds timeout) {
  if (!properties.count("bootstrap.servers")) {
    return Status::InvalidArgument("retention: kafka property bootstrap.servers is required");
  }
  if (topics.empty()) return Status::InvalidArgument("retention: no topic given");
  const int ms = static_cast<int>(timeout.count());
  const kafka_internal::Props defaults = {{"log_level", "3"}};
  kafka_internal::RkPtr rk;
  kafka_internal::MetadataPtr md;
  OUTBOX_RETURN_IF_ERROR(kafka_internal::OpenWithMetadata(RD_KAFKA_PRODUCER, {&defaults, &properties}, ms,
                                                          "retention", &rk, &md));
  char err[512];
  std::vector<TopicRetention> out;
  Resources resources;
  for (const auto& f : kafka_internal::TopicFamily(*md, topics, dlt_suffix)) {
    if (f.partitions == 0) {
      if (f.role == "main") return Status::NotFound("retention: the broker has no topic " + f.topic);
      continue;  // never created (no retries, no dead letters yet)
    }
    out.push_back({f.topic, f.role, 0, 0, "", 0});
    resources.list.push_back(rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, f.topic.c_str()));
  }

  std::unique_ptr<rd_kafka_AdminOptions_t, OptionsDeleter> options(
      rd_kafka_AdminOptions_new(rk.get(), RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS));
  if (rd_kafka_AdminOptions_set_request_timeout(options.get(), ms, err, sizeof err) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Status::InvalidArgument(std::string("retention: ") + err);
  }
  // Any broker answers for topics; librdkafka would wait for the controller,
  // which outbox-mock-kafka (librdkafka's mock) never names.
  if (md->broker_cnt > 0 &&
      rd_kafka_AdminOptions_set_broker(options.get(), md->brokers[0].id, err, sizeof err) !=
          RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Status::InvalidArgument(std::string("retention: ") + err);
  }
  std::unique_ptr<rd_kafka_queue_t, QueueDeleter> queue(rd_kafka_queue_new(rk.get()));
  rd_kafka_DescribeConfigs(rk.get(), resources.list.data(), resources.list.size(), options.get(), queue.get());
  std::unique_ptr<rd_kafka_event_t, EventDeleter> ev(rd_kafka_queue_poll(queue.get(), ms + 1000));
  if (!ev) return Status::Unavailable("retention: no answer to DescribeConfigs within the timeout");
  if (rd_kafka_event_error(ev.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Status::Unavailable(std::string("retention: DescribeConfigs: ") + rd_kafka_event_error_string(ev.get()));
  }
  const rd_kafka_DescribeConfigs_result_t* result = rd_kafka_event_DescribeConfigs_result(ev.get());
  std::size_t count = 0;
  const rd_kafka_ConfigResource_t** described = rd_kafka_DescribeConfigs_result_resources(result, &count);
  std::map<std::string, std::map<std::string, std::string>> reported;  // topic -> name -> value
  for (std::size_t i = 0; i < count; ++i) {
    const std::string name = rd_kafka_ConfigResource_name(described[i]);
    if (rd_kafka_ConfigResource_error(described[i]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return Status::Unavailable("retention: DescribeConfigs of " + name + ": " +
                                 rd_kafka_ConfigResource_error_string(described[i]));
    }
    std::size_t entries = 0;
    const rd_kafka_ConfigEntry_t** configs = rd_kafka_ConfigResource_configs(described[i], &entries);
    for (std::size_t j = 0; j < entries; ++j) {
      const char* value = rd_kafka_ConfigEntry_value(configs[j]);
      reported[name][rd_kafka_ConfigEntry_name(configs[j])] = value ? value : "";
    }
  }
  for (TopicRetention& t : out) {
    const auto& values = reported[t.topic];
    auto number = [&](const char* key, std::int64_t* v) -> Status {
      const auto it = values.find(key);
      if (it == values.end()) {
        return Status::Unavailable(std::string("retention: the broker did not report ") + key + " of " + t.topic);
      }
      const std::string& text = it->second;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *v);
      if (ec != std::errc() || end != text.data() + text.size() || *v < -1) {
        return Status::Unavailable("retention: topic " + t.topic + " has " + key + " \"" + text +
                                   "\", not a number of milliseconds");
      }
      return Status::Ok();
    };
    OUTBOX_RETURN_IF_ERROR(number("retention.ms", &t.retention_ms));
    OUTBOX_RETURN_IF_ERROR(number("segment.ms", &t.segment_ms));
    const auto policy = values.find("cleanup.policy");
    t.cleanup_policy = policy == values.end() ? "delete" : policy->second;
    const bool deletes = t.cleanup_policy.find("delete") != std::string::npos;
    const std::int64_t segment = std::max<std::int64_t>(t.segment_ms, 0);
    if (t.retention_ms < 0 || !deletes || t.retention_ms > std::numeric_limits<std::int64_t>::max() - segment) {
      t.keep_ms = -1;
    } else {
      t.keep_ms = t.retention_ms + segment;
    }
  }
  return out;
}

}  // namespace outbox
