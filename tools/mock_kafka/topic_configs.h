// What librdkafka 2.0.2's mock cluster cannot answer by itself: the topics'
// configuration (DescribeConfigs), which `outboxctl inbox purge` reads. The
// socket hooks (socket_hooks.cc) answer DescribeConfigs requests with these
// functions and add the API to the mock's ApiVersions responses; the control
// port's `topic-config` command sets the values.
//
// Thread-safety: SetTopicConfig (control thread) and the hooks (the mock
// cluster's thread) may run at once; the table is locked.
#ifndef OUTBOX_TOOLS_MOCK_KAFKA_TOPIC_CONFIGS_H_
#define OUTBOX_TOOLS_MOCK_KAFKA_TOPIC_CONFIGS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace outbox::mock_kafka {

inline constexpr std::int16_t kApiVersions = 18;
inline constexpr std::int16_t kDescribeConfigs = 32;

// Sets one configuration value of a topic (e.g. "retention.ms", "86400000").
// Topics never set answer Kafka's defaults (retention.ms 604800000).
void SetTopicConfig(const std::string& topic, const std::string& name, const std::string& value);

// The response to a DescribeConfigs v0 request (`request`: the whole frame,
// its size field included), as a whole frame; nullopt when it is not one.
std::optional<std::string> AnswerDescribeConfigs(const std::string& request);

// `response` (a whole ApiVersions v0..v2 response frame) with DescribeConfigs
// v0 added to its list; nullopt when it is not one of those or lists it already.
std::optional<std::string> WithDescribeConfigs(const std::string& response, std::int16_t version);

}  // namespace outbox::mock_kafka

#endif  // OUTBOX_TOOLS_MOCK_KAFKA_TOPIC_CONFIGS_H_
