// ChangeStream: committed outbox rows as the database's log delivers them
// (change data capture), the relay's second source beside the Store's claim.
//
// The stream is a reader of a replication slot: the server keeps the log from
// the slot's confirmed position on, and after a crash or a takeover the next
// reader starts there again, so events whose settlement was not confirmed come
// again (the inbox absorbs the copies). The outbox table stays the source of
// truth: the relay checks each streamed row's state in the table before it
// publishes, records the outcome there, and a sweeper claims what the stream
// handed back or never reached (docs/design.md, "CDC").
//
// Thread-safety: a ChangeStream is NOT safe for concurrent use (one replication
// connection); one thread reads it. A slot has one reader at a time: opening a
// second stream on a slot in use fails with Fenced.
#ifndef OUTBOX_CHANGE_STREAM_H_
#define OUTBOX_CHANGE_STREAM_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/status.h"

namespace outbox {

struct ChangeBatch {
  // Inserted outbox rows in commit order. ticket = {seq, 0}: not claimed (see
  // Store's transitions for token 0). age_at_claim: from the commit (the
  // database's commit time) until the relay decoded the change (the relay's
  // clock; never less than until the server sent it, on the database's clock).
  std::vector<ClaimedEvent> events;
  // Once these events (and every earlier batch's) are settled, the slot may be
  // confirmed up to here; 0 = no new position. Never inside a transaction: a
  // large transaction arrives over several batches and is confirmed at its end.
  std::uint64_t confirmable_lsn = 0;
  // Database clock, µs since the Unix epoch: every transaction committed before
  // it is in this batch or an earlier one (0 = no news).
  std::int64_t covered_until_us = 0;
};

struct ChangeStreamLimits {
  std::size_t max_events = 500;
  std::int64_t max_bytes = 8 << 20;  // payload bytes (at least one event)
  std::chrono::milliseconds wait{100};  // longest wait for something to arrive
};

class ChangeStream {
 public:
  virtual ~ChangeStream() = default;

  // What has arrived: returns as soon as it has events or a new position and
  // nothing more is immediately readable, when a limit is reached, or after
  // `limits.wait` (an empty batch). An error means the connection is gone:
  // open a new stream (it starts at the slot's confirmed position).
  virtual Result<ChangeBatch> Next(const ChangeStreamLimits& limits) = 0;

  // Everything up to `lsn` is settled: the slot's confirmed position moves and
  // the server may recycle the log before it. Also the stream's liveness
  // signal: call at least every few seconds. `want_reply` asks the server for
  // a keepalive carrying its current position (the heartbeat that lets an idle
  // outbox on a busy database advance its slot).
  virtual Status Confirm(std::uint64_t lsn, bool want_reply) = 0;

  // True when opening this stream created its slot (first start, or after the
  // slot was lost or dropped): what was committed before has to be swept.
  virtual bool created_slot() const = 0;
  // True when the slot had been invalidated (max_slot_wal_keep_size) and was
  // dropped and created again.
  virtual bool recreated_lost_slot() const = 0;
  virtual std::string slot() const = 0;
};

// Opens a stream. Fenced: another reader holds the slot (stand by, try again);
// Unavailable: the database is unreachable; FailedPrecondition: a setup
// problem (wal_level, the REPLICATION privilege, the publication), with what
// to do. Called from the relay's stream thread only.
using ChangeStreamFactory = std::function<Result<std::unique_ptr<ChangeStream>>()>;

// A replication slot as the relay sees it: streams are opened on it, and it
// is retired when it retains too much WAL (CdcOptions::max_retained_wal_bytes:
// streaming stops, the sweepers drain by polling, a later open creates it
// again). Both are called from the relay's stream thread only.
struct ChangeSource {
  ChangeStreamFactory open;
  // Drops the slot so that it stops pinning WAL. NotFound when there is no
  // such slot (another relay dropped it); Fenced while a reader (maybe this
  // relay's own, still exiting) holds it. Empty: the relay never drops the
  // slot (the cap only stops streaming).
  std::function<Status()> retire_slot;
};

}  // namespace outbox

#endif  // OUTBOX_CHANGE_STREAM_H_
