// ConsumerBacklog (outbox/kafka.h): what waits on the broker for a group.
#include <librdkafka/rdkafka.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "outbox/kafka.h"

namespace outbox {
namespace {

struct ListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const { rd_kafka_topic_partition_list_destroy(l); }
};

}  // namespace

Result<std::vector<TopicBacklog>> ConsumerBacklog(const std::map<std::string, std::string>& properties,
                                                  const std::string& group,
                                                  const std::vector<std::string>& topics,
                                                  const std::string& dlt_suffix,
                                                  std::chrono::milliseconds timeout) {
  if (!properties.count("bootstrap.servers")) {
    return Status::InvalidArgument("backlog: kafka property bootstrap.servers is required");
  }
  if (group.empty()) return Status::InvalidArgument("backlog: a consumer group is required");
  const int ms = static_cast<int>(timeout.count());
  const kafka_internal::Props defaults = {{"enable.auto.commit", "false"}, {"log_level", "3"}};
  const kafka_internal::Props ours = {{"group.id", group}};
  kafka_internal::RkPtr rk;
  kafka_internal::MetadataPtr md;
  OUTBOX_RETURN_IF_ERROR(kafka_internal::OpenWithMetadata(RD_KAFKA_CONSUMER, {&defaults, &properties, &ours}, ms,
                                                          "backlog", &rk, &md));
  std::vector<TopicBacklog> present;
  std::unique_ptr<rd_kafka_topic_partition_list_t, ListDeleter> list(
      rd_kafka_topic_partition_list_new(16));
  for (const auto& f : kafka_internal::TopicFamily(*md, topics, dlt_suffix)) {
    if (f.partitions == 0) continue;  // never created (no retries, no dead letters yet)
    present.push_back({f.topic, f.role});
    for (int p = 0; p < f.partitions; ++p) rd_kafka_topic_partition_list_add(list.get(), f.topic.c_str(), p);
  }
  if (list->cnt > 0) {
    if (rd_kafka_resp_err_t e = rd_kafka_committed(rk.get(), list.get(), ms); e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return Status::Unavailable(std::string("backlog: committed offsets of group ") + group + ": " +
                                 rd_kafka_err2str(e));
    }
  }
  std::map<std::string, TopicBacklog*> by_topic;
  for (TopicBacklog& b : present) by_topic[b.topic] = &b;
  for (int i = 0; i < list->cnt; ++i) {
    const rd_kafka_topic_partition_t& p = list->elems[i];
    std::int64_t lo = 0, hi = 0;
    if (rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk.get(), p.topic, p.partition, &lo, &hi, ms);
        e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return Status::Unavailable(std::string("backlog: offsets of ") + p.topic + ": " + rd_kafka_err2str(e));
    }
    TopicBacklog& b = *by_topic[p.topic];
    b.messages += hi - lo;
    const bool has_commit = p.err == RD_KAFKA_RESP_ERR_NO_ERROR && p.offset >= 0;
    b.committed = b.committed || has_commit;
    b.lag += std::max<std::int64_t>(0, hi - (has_commit ? std::max<std::int64_t>(p.offset, lo) : lo));
  }
  return present;
}

}  // namespace outbox
