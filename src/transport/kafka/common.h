// What the Kafka transport and the Kafka inbox source share: producer
// defaults, property setting. Internal to src/transport/kafka.
#ifndef OUTBOX_SRC_TRANSPORT_KAFKA_COMMON_H_
#define OUTBOX_SRC_TRANSPORT_KAFKA_COMMON_H_

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <map>
#include <string>

#include "outbox/log.h"
#include "outbox/status.h"

namespace outbox::kafka_internal {

using Props = std::map<std::string, std::string>;

// Every producer of the project (the relay's transport, the inbox's forwarder,
// dead-letter replay) starts from these: idempotent, acks=all, the message size
// enqueue admits, a bounded local queue, Nagle off.
const Props& ProducerDefaults();

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

}  // namespace outbox::kafka_internal

#endif  // OUTBOX_SRC_TRANSPORT_KAFKA_COMMON_H_
