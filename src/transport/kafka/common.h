// What the Kafka transport and the Kafka inbox source share: producer
// defaults, property setting. Internal to src/transport/kafka.
#ifndef OUTBOX_SRC_TRANSPORT_KAFKA_COMMON_H_
#define OUTBOX_SRC_TRANSPORT_KAFKA_COMMON_H_

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "outbox/log.h"
#include "outbox/status.h"

namespace outbox::kafka_internal {

using Props = std::map<std::string, std::string>;

// Sets `layers` in order on `conf` (later layers override earlier ones). A bad
// property is InvalidArgument naming it; `conf` is left to the caller.
Status SetProperties(rd_kafka_conf_t* conf, std::initializer_list<const Props*> layers);

// The connection and security properties of a consumer configuration, which a
// producer talking to the same cluster needs as well.
Props ConnectionProperties(const Props& props);

// librdkafka's own log lines (syslog levels 0-3 error, 4 warning, 5-6 info,
// 7 debug) and its error callbacks, written to `logger` with the client's name,
// the facility and the reason text (SSL and SASL failures show up here first).
void LogFromKafka(Logger& logger, const rd_kafka_t* rk, int level, const char* facility,
                  const char* text);
void LogKafkaError(Logger& logger, rd_kafka_t* rk, int err, const char* reason);

struct RkDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
struct MetadataDeleter {
  void operator()(const rd_kafka_metadata_t* md) const { rd_kafka_metadata_destroy(md); }
};
using RkPtr = std::unique_ptr<rd_kafka_t, RkDeleter>;
using MetadataPtr = std::unique_ptr<const rd_kafka_metadata_t, MetadataDeleter>;

// A short-lived client of `type` with `layers` set in order, and the
// cluster's metadata (all topics): where the operators' broker queries start.
// `what` prefixes the errors: InvalidArgument (a property), Unavailable (no
// metadata within `timeout_ms`).
Status OpenWithMetadata(rd_kafka_type_t type, std::initializer_list<const Props*> layers, int timeout_ms,
                        const std::string& what, RkPtr* rk, MetadataPtr* md);

// A consumer's topics as the broker has them: each main topic, its retry
// topics (`<topic>.retry.N`, N = 1, 2, ... while they exist) and its
// dead-letter topic (`<topic><dlt_suffix>`), in that order, with their role
// ("main", "retry", "dead-letter") and whether the broker has them.
struct FamilyTopic {
  std::string topic;
  std::string role;
  int partitions = 0;  // 0: the broker does not have it
};
std::vector<FamilyTopic> TopicFamily(const rd_kafka_metadata_t& md, const std::vector<std::string>& topics,
                                     const std::string& dlt_suffix);

}  // namespace outbox::kafka_internal

#endif  // OUTBOX_SRC_TRANSPORT_KAFKA_COMMON_H_
