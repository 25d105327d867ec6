// Dead-letter replay's decisions, shared by the Kafka and RabbitMQ replays
// (inbox_source.h).
#include "outbox/inbox_source.h"

namespace outbox {

namespace h = inbox_headers;

bool ReplayMatches(const ReplayFilter& filter, const InboundMessage& in) {
  return in.Header(h::kOrigTopic) && (filter.key.empty() || filter.key == in.key) &&
         in.timestamp >= filter.since && in.timestamp <= filter.until;
}

OutboundMessage ReplayCopy(const InboundMessage& in, std::string topic, const std::string& from) {
  OutboundMessage out;
  out.topic = std::move(topic);
  out.key = in.key;
  out.key_is_null = in.key_is_null;
  out.payload = in.payload;
  out.payload_is_null = in.payload_is_null;
  for (const auto& [k, v] : in.headers) {
    if (k.starts_with("outbox-original-") || k.starts_with("outbox-error-") || k == h::kAttempt ||
        k == h::kFirstFailure || k == h::kDueAt) {
      continue;
    }
    out.headers[k] = v;
  }
  out.headers["outbox-replayed-from"] = from;
  return out;
}

std::string NotReplayableText(const InboundMessage& in, const std::string& from) {
  const auto header = [&](const char* name) {
    const std::string* v = in.Header(name);
    return v ? *v : std::string("?");
  };
  return from + ": a cut copy of " + header(h::kOrigTopic) + "/" + header(h::kOrigPartition) + "/" +
         header(h::kOrigOffset) + " (" + header(h::kOrigSize) +
         " bytes): it cannot be replayed as it stands; replay the original from that offset "
         "while its topic retains it";
}

}  // namespace outbox
