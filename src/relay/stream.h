// The change stream's pump (relay.source = cdc, stream.cc) and what it sees of
// its relay: the relay's settings and shared parts (StreamContext), and the
// waits, gates and flags it shares with the workers (StreamHost, which the
// relay implements). The pump sees nothing else of the relay.
#ifndef OUTBOX_SRC_RELAY_STREAM_H_
#define OUTBOX_SRC_RELAY_STREAM_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "outbox/relay.h"

namespace outbox::relay_internal {

// The relay's parts the pump uses; all outlive it (the relay owns or borrows
// them for its whole life).
struct StreamContext {
  const RelayOptions& options;
  Clock& clock;
  Logger& logger;
  RelayMetrics& metrics;
  Transport& transport;
  const ChangeSource& source;
  const StoreParts& store;
};

// What the pump asks of its relay. Thread-safety: every call is safe from any
// thread (the pump's marking helper calls ApplyTransition from its own).
class StreamHost {
 public:
  virtual bool Stopping() const = 0;
  // The stream thread's heartbeat (Relay::Alive).
  virtual void BeatStream() = 0;
  // Sleeps up to `d` or until stop is requested; false if stopping.
  virtual bool SleepFor(milliseconds d) = 0;
  // Housekeeping saw the slot over cdc.max_retained_wal_bytes (the WAL cap).
  virtual bool WalCapped() const = 0;
  // The stream has announced itself (its progress row): the sweepers may claim.
  virtual void StreamAnnounced() = 0;
  // The broker outage gate the workers share (outage_gate.h).
  virtual bool BrokerTurn(bool* probing) = 0;
  virtual void EndBrokerProbe() = 0;
  virtual void EndBrokerRound(bool outage, milliseconds at_least, bool broker_answered, bool probing,
                              std::string_view error) = 0;
  virtual milliseconds NextOutageDelay() const = 0;
  // A fenced transition, retried on database errors until `deadline`; false
  // if it could not be recorded.
  virtual bool ApplyTransition(const std::string& who, const char* what,
                               const std::function<Result<TransitionResult>()>& call, std::size_t n,
                               std::string_view fault_point,
                               std::chrono::steady_clock::time_point deadline) = 0;

 protected:
  ~StreamHost() = default;
};

// The stream thread's loop: returns once the host is stopping.
void RunStream(const StreamContext& context, StreamHost& host);

}  // namespace outbox::relay_internal

#endif  // OUTBOX_SRC_RELAY_STREAM_H_
