// Decoding of the replication stream: the walsender's CopyData frames and the
// pgoutput plugin's logical replication messages (protocol version 1, binary
// tuple format), and the outbox row they carry. Pure functions over bytes;
// every malformed input is an error, never a read past the end (fuzzed).
#ifndef OUTBOX_SRC_STORE_POSTGRES_PGOUTPUT_H_
#define OUTBOX_SRC_STORE_POSTGRES_PGOUTPUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "outbox/event.h"
#include "outbox/status.h"

namespace outbox::pg::pgoutput {

// PostgreSQL timestamps count µs from 2000-01-01; ours from 1970-01-01.
inline constexpr std::int64_t kPgEpochUnixUs = 946'684'800'000'000;

// Walsender frames.
struct XLogData {
  std::uint64_t start = 0;
  std::uint64_t wal_end = 0;
  std::int64_t send_time_us = 0;  // Unix µs, server clock
  std::string_view data;          // a pgoutput message (points into the input)
};
struct Keepalive {
  std::uint64_t wal_end = 0;
  std::int64_t send_time_us = 0;
  bool reply_requested = false;
};
using Frame = std::variant<XLogData, Keepalive>;
Result<Frame> DecodeFrame(std::string_view bytes);

// The standby status update: write = flush = apply = lsn.
std::string StatusUpdate(std::uint64_t lsn, std::int64_t now_unix_us, bool reply_requested);

// pgoutput messages.
struct Begin {
  std::uint64_t final_lsn = 0;
  std::int64_t commit_time_us = 0;  // Unix µs
};
struct Commit {
  std::uint64_t commit_lsn = 0;
  std::uint64_t end_lsn = 0;
  std::int64_t commit_time_us = 0;
};
struct Column {
  std::string name;
  std::uint32_t type_oid = 0;
};
struct Relation {
  std::uint32_t id = 0;
  std::string nspname, relname;
  std::vector<Column> columns;
};
// One column of a tuple: nullopt = NULL. Binary send format.
using Value = std::optional<std::string_view>;
struct Insert {
  std::uint32_t relation = 0;
  std::vector<Value> values;  // point into the input
};
struct LogicalMessage {
  bool transactional = false;
  std::uint64_t lsn = 0;
  std::string prefix;
};
struct Other {  // origin, type, update, delete, truncate: nothing for us
  char tag = 0;
};
using Message = std::variant<Begin, Commit, Relation, Insert, LogicalMessage, Other>;
Result<Message> DecodeMessage(std::string_view bytes);

// Where the outbox columns are in a Relation's tuples.
struct OutboxLayout {
  int seq = -1, event_id = -1, aggregate_type = -1, aggregate_id = -1, event_type = -1,
      payload = -1, headers = -1, dedup_key = -1, created_at = -1;
};
// FailedPrecondition naming a missing column.
Result<OutboxLayout> LayoutOf(const Relation& relation);

// The event an outbox INSERT carries (ticket {seq, 0}; created_at set).
Result<ClaimedEvent> EventOf(const Insert& insert, const OutboxLayout& layout);

}  // namespace outbox::pg::pgoutput

#endif  // OUTBOX_SRC_STORE_POSTGRES_PGOUTPUT_H_
