// outbox-consumer's effects: what a [[handler]] does with each new message
// (docs/consumer.md). The inbox store calls them inside its transaction; the
// engine (outbox::Consumer) does the rest.
//
// Thread-safety: each function's result is used by one consumer engine, on
// its Run() thread. The HTTP effect keeps one keep-alive connection.
#ifndef OUTBOX_TOOLS_OUTBOX_CONSUMER_HANDLERS_H_
#define OUTBOX_TOOLS_OUTBOX_CONSUMER_HANDLERS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "consumer_config.h"
#include "outbox/inbox.h"
#include "outbox/mariadb_inbox.h"
#include "outbox/postgres_inbox.h"

namespace outbox::consumer_daemon {

// The dedup key of each message, by the handler's rule. A message without it
// (no such header, a payload that is not JSON, a pointer to nothing) is a
// permanent failure naming the rule.
DedupKeyFn MakeDedup(const DedupRule& rule);

// The parameters of a `sql` handler, as text: $1 the payload (bytea, "\x" hex;
// NULL for a tombstone), $2 the headers (a jsonb object of name -> text; bytes
// that are not UTF-8 become U+FFFD), $3 the outbox-event-id header (NULL when
// absent), $4 the message key.
std::vector<std::optional<std::string>> SqlParams(const InboundMessage& m);

// PostgreSQL: queues the statement with $1..$4 typed bytea, jsonb, text, text.
SinkHandler PostgresSqlHandler(std::string sql);

// MariaDB: runs the statement with $1..$4 (outside quotes) replaced by the
// escaped values (the payload as X'hex'); every result is read.
MariaDbHandler MariaDbSqlHandler(std::string sql);

// "$2" -> index 1 ... for the placeholders of `sql` outside quoted strings,
// with the text between them: pieces[0] $n0 pieces[1] $n1 ... pieces[k].
struct SqlTemplate {
  std::vector<std::string> pieces;
  std::vector<std::size_t> params;  // 0-based: 0 payload, 1 headers, 2 event id, 3 key
};
SqlTemplate SplitPlaceholders(const std::string& sql);

// The `http` handler: POSTs the payload to `url` with Idempotency-Key (the
// dedup key), Outbox-Topic/-Partition/-Offset/-Key and the message's headers.
// 2xx: applied (the stamp commits after it: at least once). No answer, 408,
// 429, 5xx: transient. Any other status: permanent, with the status and the
// body's first 200 bytes.
class HttpEffect {
 public:
  static Result<std::unique_ptr<HttpEffect>> Create(const HandlerConfig& handler);
  virtual ~HttpEffect() = default;
  virtual HandlerResult Post(const InboundMessage& m) = 0;
};

}  // namespace outbox::consumer_daemon

#endif  // OUTBOX_TOOLS_OUTBOX_CONSUMER_HANDLERS_H_
