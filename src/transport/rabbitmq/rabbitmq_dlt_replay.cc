// outboxctl dlt replay on RabbitMQ (rabbitmq.h, ReplayRabbitMqDeadLetters):
// dead-lettered messages taken from the group's dead-letter queue back to its
// main queue, each acked only once its copy is confirmed.
#include <algorithm>
#include <map>
#include <vector>

#include "amqp_common.h"
#include "outbox/rabbitmq.h"

namespace outbox {
namespace {

using namespace amqp_internal;  // NOLINT: this file is the library's RabbitMQ side
namespace h = inbox_headers;

constexpr amqp_channel_t kGet = 1;      // basic.get and acks on the dead-letter queue
constexpr amqp_channel_t kPublish = 2;  // the copies, with confirms
constexpr amqp_channel_t kCheck = 3;    // passive declares of the copies' queues
constexpr std::size_t kChunk = 500;     // copies confirmed (and their originals acked) together

struct Taken {
  std::uint64_t tag = 0;  // on kGet
  std::string exchange, routing_key;
  OutboundMessage copy;
};

// Publishes the chunk's copies to their queues through the default exchange,
// awaits their confirms, then acks their originals (a crash between the two
// sends a copy twice: the inbox absorbs it).
Status SendChunk(Connection& c, const RabbitMqTransportOptions& o, std::vector<Taken>* chunk,
                 std::uint64_t* next_tag) {
  if (chunk->empty()) return Status::Ok();
  const auto deadline = Clock::now() + o.timeout;
  const SendWatchdog watchdog(c.fd, deadline);
  std::map<std::uint64_t, bool> unconfirmed;
  for (const Taken& t : *chunk) {
    if (int rc = PublishMessage(c.state, kPublish, t.exchange, t.routing_key, t.copy.headers, t.copy.payload, "");
        rc != AMQP_STATUS_OK) {
      return Status::Unavailable(std::string("rabbitmq: replay to ") + t.copy.topic + ": " + amqp_error_string2(rc));
    }
    unconfirmed.emplace((*next_tag)++, true);
  }
  OUTBOX_RETURN_IF_ERROR(AwaitConfirms(c.state, deadline, "replayed messages", &unconfirmed));
  for (const Taken& t : *chunk) {
    if (int rc = amqp_basic_ack(c.state, kGet, t.tag, 0); rc != AMQP_STATUS_OK) {
      return Status::Unavailable(std::string("rabbitmq: basic.ack on the dead-letter queue: ") +
                                 amqp_error_string2(rc));
    }
  }
  chunk->clear();
  return Status::Ok();
}

// Whether the group's queue a copy goes to exists (once per queue): a copy
// the broker would return must not fail the others of its chunk, every run.
// A refused passive declare closes kCheck, which is opened again. Unavailable
// when the connection fails.
Result<bool> QueueExists(Connection& c, const std::string& queue, std::map<std::string, bool>* known) {
  if (auto k = known->find(queue); k != known->end()) return k->second;
  bool exists = false;
  if (queue.size() <= 255) {
    exists = amqp_queue_declare(c.state, kCheck, Bytes(queue), /*passive=*/1, 0, 0, 0, amqp_empty_table) != nullptr;
    if (!exists) {
      const amqp_rpc_reply_t r = amqp_get_rpc_reply(c.state);
      if (r.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION || r.reply.id != AMQP_CHANNEL_CLOSE_METHOD) {
        return Status::Unavailable(ReplyText(r, ("queue '" + queue + "'").c_str()));
      }
      amqp_channel_close_ok_t ok{};
      (void)amqp_send_method(c.state, kCheck, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
      std::string error;
      if (!OpenChannel(c.state, kCheck, false, &error)) return Status::Unavailable("rabbitmq: " + error);
    }
  }
  (*known)[queue] = exists;
  return exists;
}

}  // namespace

Result<ReplayResult> ReplayRabbitMqDeadLetters(const RabbitMqTransportOptions& broker,
                                               const std::string& dlt_queue, const ReplayFilter& filter,
                                               bool dry_run, const ReplayProgress& progress) {
  OUTBOX_RETURN_IF_ERROR(ValidateRabbitMqOptions(broker));
  if (dlt_queue.empty() || dlt_queue.size() > 255) {
    return Status::InvalidArgument("dlt replay: the queue name must be 1..255 bytes");
  }
  auto url = ParseAmqpUrl(broker.url);
  if (!url.ok()) return url.status();
  Connection c(amqp_new_connection());
  std::string error;
  // Heartbeats: a broker or path that goes silent mid-replay ends the command
  // (reading a message has no deadline of its own) instead of hanging it.
  const int heartbeat_s = static_cast<int>(std::clamp<std::int64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(broker.timeout).count() / 2, 1, 30));
  if (!c.state ||
      !OpenAndLogin(c.state, *url, broker, "outboxctl-dlt-replay", heartbeat_s, Clock::now() + broker.timeout,
                    [&c](int fd) { c.fd = fd; }, &error) ||
      !OpenChannel(c.state, kGet, false, &error) || !OpenChannel(c.state, kPublish, true, &error) ||
      !OpenChannel(c.state, kCheck, false, &error)) {
    return Status::Unavailable(error.empty() ? "rabbitmq: out of memory" : error);
  }
  // The messages there now: those that arrive during the replay wait for the next.
  amqp_queue_declare_ok_t* declared =
      amqp_queue_declare(c.state, kGet, Bytes(dlt_queue), /*passive=*/1, 0, 0, 0, amqp_empty_table);
  if (!declared) {
    const amqp_rpc_reply_t r = amqp_get_rpc_reply(c.state);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD &&
        static_cast<amqp_channel_close_t*>(r.reply.decoded)->reply_code == AMQP_NOT_FOUND) {
      return Status::NotFound("dlt replay: queue '" + dlt_queue + "' does not exist in vhost '" + url->vhost + "'");
    }
    return Status::Unavailable(ReplyText(r, ("queue '" + dlt_queue + "'").c_str()));
  }
  const std::uint32_t depth = declared->message_count;

  ReplayResult result;
  std::vector<Taken> chunk;
  std::uint64_t next_tag = 1;
  std::map<std::string, bool> queues;  // the copies' queues: exists
  for (std::uint32_t i = 0; i < depth; ++i) {
    amqp_maybe_release_buffers(c.state);
    const amqp_rpc_reply_t r = amqp_basic_get(c.state, kGet, Bytes(dlt_queue), /*no_ack=*/0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
      return Status::Unavailable(ReplyText(r, ("basic.get on '" + dlt_queue + "'").c_str()));
    }
    if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) break;  // another reader took the rest
    const auto* got = static_cast<amqp_basic_get_ok_t*>(r.reply.decoded);
    const std::uint64_t tag = got->delivery_tag;
    const std::string routing_key = Text(got->routing_key);
    amqp_message_t msg;
    const amqp_rpc_reply_t read = amqp_read_message(c.state, kGet, &msg, 0);
    if (read.reply_type != AMQP_RESPONSE_NORMAL) {
      return Status::Unavailable(ReplyText(read, ("reading a message of '" + dlt_queue + "'").c_str()));
    }
    InboundMessage in;
    in.topic = dlt_queue;
    in.offset = i;
    ReadMessage(msg, amqp_cstring_bytes(routing_key.c_str()), &in);
    amqp_destroy_message(&msg);
    ++result.scanned;
    const std::string from = dlt_queue + "/" + std::to_string(i);
    // Not acked unless replayed: the rest goes back to the queue, in its
    // place, when the connection closes.
    if (ReplayMatches(filter, in) && in.Header(h::kTruncated)) {
      result.not_replayable.push_back(NotReplayableText(in, from));
    } else if (ReplayMatches(filter, in)) {
      // Back to the group's own queue (the other groups never saw it fail);
      // a copy without its group goes to the topic's exchange with its key.
      const std::string* group = in.Header(h::kGroup);
      const std::string& topic = *in.Header(h::kOrigTopic);
      if (group) {
        auto exists = QueueExists(c, RabbitMqQueueName(*group, topic), &queues);
        if (!exists.ok()) return exists.status();
        if (!*exists) {
          result.not_replayable.push_back(from + ": its group's queue '" + RabbitMqQueueName(*group, topic) +
                                          "' does not exist (the group was removed?): left in place");
          if (progress) progress(result.scanned, result.replayed);
          continue;
        }
      }
      Taken t{tag, group ? "" : topic, group ? RabbitMqQueueName(*group, topic) : in.key,
              ReplayCopy(in, group ? "queue '" + RabbitMqQueueName(*group, topic) + "'" : "exchange '" + topic + "'",
                         from)};
      t.copy.headers.erase(kRabbitMqRetryTopicHeader);
      if (!t.copy.key_is_null) t.copy.headers[kRabbitMqKeyHeader] = t.copy.key;
      ++result.replayed;
      if (!dry_run) chunk.push_back(std::move(t));
      if (chunk.size() >= kChunk) OUTBOX_RETURN_IF_ERROR(SendChunk(c, broker, &chunk, &next_tag));
    }
    if (progress) progress(result.scanned, result.replayed);
  }
  OUTBOX_RETURN_IF_ERROR(SendChunk(c, broker, &chunk, &next_tag));
  // The ones not replayed back to the queue now (basic.recover is answered
  // once they are), not later when the broker handles the close: a replay
  // run straight after this one sees them.
  (void)amqp_basic_recover(c.state, kGet, /*requeue=*/1);
  (void)amqp_connection_close(c.state, AMQP_REPLY_SUCCESS);
  return result;
}

}  // namespace outbox
