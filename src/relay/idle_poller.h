// IdlePoller: who of a relay's idle workers polls for new rows, and how long
// it sleeps between empty claims, as a pure state machine (unit-tested
// without threads or a database). One idle worker polls; the others wait for
// the poller's role to be free (an idle worker found work, or the poller
// left), for a notification, or for a safety net, so that idle workers do not
// each walk the rows held behind an in-flight hot aggregate.
//
// The interval is the relay's, not a worker's (a worker taking over the
// polling must not resume the interval it reached itself): poll_min while an
// idle worker found work in the last poll_hot, then doubling to poll_max;
// never shorter than the last empty claim took. An idle worker finding work
// resets it (Found), and so does a busy worker running out of work (RanOut:
// while the busy workers' own claims caught every event the poller found
// none and backed off, and the next event would wait up to poll_max). A busy
// worker's next batch does not reset it, so with a hot aggregate in flight
// (the others' claims walk its held rows) the poller backs off.
//
// Where a worker's claims see only its share of the rows (a PostgreSQL log
// schema: ClaimQueue::ClaimsSeeEveryRow), nobody can poll for it: each worker
// has an IdlePoller of its own, always its poller (index 0), with its own
// interval, heated (Heat) by the other workers' finds.
//
// Thread-safety: not thread-safe; the relay calls it under its mutex.
#ifndef OUTBOX_SRC_RELAY_IDLE_POLLER_H_
#define OUTBOX_SRC_RELAY_IDLE_POLLER_H_

#include <chrono>

namespace outbox::relay_internal {

using std::chrono::milliseconds;

class IdlePoller {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // The shortest safety-net wait of an idle worker that is not the poller
  // (with poll_max 20 ms, 4 x poll_max would make each waiting worker claim
  // 12 times a second).
  static constexpr milliseconds kSafetyNetMin{1'000};

  IdlePoller(milliseconds poll_min, milliseconds poll_max, milliseconds poll_hot)
      : min_(poll_min), max_(poll_max), hot_(poll_hot), interval_(poll_min) {}

  // Worker `index`, busy until now, found no more work at `now`: more may
  // follow soon. Hot again; if the poller had backed off, `index` polls next,
  // at poll_min.
  void RanOut(int index, TimePoint now);
  // An idle worker's next wait after an empty claim that took `claim_cost`:
  // the poller (which `index` becomes when nobody polls) sleeps `sleep` and
  // claims again; another worker waits for a handover, a wake, or the safety
  // net (`sleep`), and then, if the role is free, takes it.
  struct Wait {
    bool polls = false;
    milliseconds sleep{0};
  };
  Wait Next(int index, TimePoint now, milliseconds claim_cost);
  // Some idle worker found work at `now` (a claim after idling returned
  // rows): the role is free and the interval back at poll_min.
  void Found(TimePoint now);
  // A worker polling only its own share (a log schema) learns that a worker
  // found work at `found_at`: if that is news, its next sleep is `interval` at
  // most, doubling again after it (the relay's events spread over the workers'
  // shares, so the others' work predicts its own; the relay passes workers x
  // poll_min, so that its workers together poll about as often as one shared
  // poller would). Its own work keeps poll_min for poll_hot, as before.
  void Heat(TimePoint found_at, milliseconds interval);
  // Worker `index` backs off (database error, broker outage) or stops: true
  // if it was the poller (the role is then free and a waiter is to be told).
  bool Leave(int index);
  int poller() const { return poller_; }
  milliseconds interval() const { return interval_; }

 private:
  const milliseconds min_, max_, hot_;
  int poller_ = -1;  // the worker polling for the idle ones
  milliseconds interval_;  // its next sleep (poll_min after work)
  TimePoint found_at_{};   // when an idle worker last found work
  TimePoint heated_at_{};  // the last news Heat acted on
};

}  // namespace outbox::relay_internal

#endif  // OUTBOX_SRC_RELAY_IDLE_POLLER_H_
