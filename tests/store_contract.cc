// The store contract: every transition, fencing, lease expiry, order per
// aggregate, dedup, validation. See store_contract.h.
#include "store_contract.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace outbox::testing {
namespace {

using std::chrono::milliseconds;

Event Ev(const std::string& agg, int n, std::optional<std::string> dedup = std::nullopt) {
  Event e;
  e.aggregate_type = "order";
  e.aggregate_id = agg;
  e.event_type = "OrderChanged";
  e.payload = "{\"agg\":\"" + agg + "\",\"n\":" + std::to_string(n) + "}";
  e.headers = {{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
               {"n", std::to_string(n)}};
  e.dedup_key = std::move(dedup);
  return e;
}

ClaimOptions Opts(int batch = 100, milliseconds lease = milliseconds(60'000)) {
  ClaimOptions o;
  o.batch_size = batch;
  o.lease = lease;
  o.owner = "test-relay";
  return o;
}

std::vector<Ticket> Tickets(const ClaimResult& c) {
  std::vector<Ticket> t;
  for (const auto& e : c.events) t.push_back(e.ticket);
  return t;
}

std::vector<std::string> AggIds(const ClaimResult& c) {
  std::vector<std::string> v;
  for (const auto& e : c.events) v.push_back(e.event.aggregate_id);
  return v;
}

}  // namespace

void StoreContractTest::SetUp() {
  harness_ = GetParam()();
  bool skip = false;
  if (!harness_->SetUp(&skip)) {
    if (skip) GTEST_SKIP() << "store unavailable and OUTBOX_ALLOW_SKIP=1";
    FAIL() << "store harness unavailable";
  }
  store_ = harness_->NewStore();
  ASSERT_NE(store_, nullptr);
}

TEST_P(StoreContractTest, ClaimReturnsCommittedEventsInOrderWithAllFields) {
  std::vector<Event> evs = {Ev("a", 1, "d-1"), Ev("b", 1), Ev("a", 2)};
  auto enq = harness_->Enqueue(evs, /*one_txn=*/false);
  ASSERT_TRUE(enq.ok()) << enq.status().ToString();
  auto c = store_->Claim(Opts());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->events.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const ClaimedEvent& ce = c->events[i];
    EXPECT_EQ(ce.event_id, (*enq)[i].event_id);
    EXPECT_EQ(ce.event.aggregate_type, "order");
    EXPECT_EQ(ce.event.aggregate_id, evs[i].aggregate_id);
    EXPECT_EQ(ce.event.event_type, evs[i].event_type);
    EXPECT_EQ(ce.event.payload, evs[i].payload);
    EXPECT_EQ(ce.event.dedup_key, evs[i].dedup_key);
    EXPECT_EQ(ce.attempts, 1);
    std::map<std::string, std::string> h;
    for (const auto& x : ce.event.headers) h[x.name] = x.value;
    EXPECT_EQ(h["traceparent"], evs[i].headers[0].value);
    EXPECT_EQ(h["n"], evs[i].headers[1].value);
    if (i > 0) {
      EXPECT_LT(c->events[i - 1].ticket.seq, ce.ticket.seq);
    }
    if (harness_->PerRowState()) {
      EXPECT_EQ(harness_->Row(ce.ticket.seq)->status, "PROCESSING");
      EXPECT_EQ(harness_->Row(ce.ticket.seq)->lease_owner, "test-relay");
    } else {
      EXPECT_EQ(harness_->Row(ce.ticket.seq)->status, "PENDING");  // nothing written per claim
    }
  }
  // Everything is leased: nothing more to claim.
  auto again = store_->Claim(Opts());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->events.empty());

  auto m = store_->MarkSent(Tickets(*c));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->applied, 3u);
  EXPECT_TRUE(m->refused.empty());
  auto s = store_->Stats();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->pending + s->processing + s->failed, 0);
}

TEST_P(StoreContractTest, BinaryPayloadRoundTrips) {
  Event e = Ev("bin", 1);
  e.payload = std::string("\0\x01\xff\xfe\\x00'\"", 9);
  ASSERT_TRUE(harness_->Enqueue(std::span(&e, 1)).ok());
  auto c = store_->Claim(Opts());
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 1u);
  EXPECT_EQ(c->events[0].event.payload, e.payload);
}

// What trace shows of an event: its headers, its payload's size and first
// bytes (raw, binary included); a list carries none of them.
TEST_P(StoreContractTest, FindCarriesHeadersAndThePayloadsFirstBytes) {
  Event big = Ev("big", 1, "dedup-big");
  big.payload = std::string(5000, 'p');
  Event bin = Ev("bin", 2, "dedup-bin");
  bin.payload = std::string("\0\x01\xff\xfe", 4);
  ASSERT_TRUE(harness_->Enqueue(std::vector<Event>{big, bin}).ok());
  auto f = store_->Find("dedup-big");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->size(), 1u);
  EXPECT_EQ((*f)[0].payload_bytes, 5000);
  EXPECT_EQ((*f)[0].payload_preview, std::string(static_cast<std::size_t>(kPayloadPreviewBytes), 'p'));
  EXPECT_NE((*f)[0].headers.find("traceparent"), std::string::npos) << (*f)[0].headers;
  f = store_->Find("dedup-bin");
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 1u);
  EXPECT_EQ((*f)[0].payload_bytes, 4);
  EXPECT_EQ((*f)[0].payload_preview, bin.payload);
  ListFilter lf;
  lf.limit = 10;
  auto l = store_->List(lf);
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ((*l)[0].payload_bytes, -1);
  EXPECT_TRUE((*l)[0].payload_preview.empty());
}

TEST_P(StoreContractTest, LiveLeaseIsExclusiveAcrossSessions) {
  std::vector<Event> evs;
  for (int i = 0; i < 20; ++i) evs.push_back(Ev("agg" + std::to_string(i), 1));
  ASSERT_TRUE(harness_->Enqueue(evs).ok());
  auto other = NewStore();
  auto a = store_->Claim(Opts(10));
  auto b = other->Claim(Opts(100));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->events.size(), 10u);
  if (harness_->PerRowState()) {
    EXPECT_EQ(b->events.size(), 10u);
  } else {
    EXPECT_TRUE(b->events.empty()) << "the first relay leases every slot until the second is seen";
  }
  std::set<std::int64_t> seen;
  for (const auto& e : a->events) seen.insert(e.ticket.seq);
  for (const auto& e : b->events) EXPECT_TRUE(seen.insert(e.ticket.seq).second);
}

TEST_P(StoreContractTest, ExpiredLeaseIsReclaimedAndTheOldClaimIsFenced) {
  Event e = Ev("x", 1);
  ASSERT_TRUE(harness_->Enqueue(std::span(&e, 1)).ok());
  // A zero lease expires at once: the deterministic stand-in for a stalled relay.
  auto first = store_->Claim(Opts(10, milliseconds(0)));
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->events.size(), 1u);
  auto other = NewStore();
  auto second = other->Claim(Opts(10));
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->events.size(), 1u);
  EXPECT_EQ(second->events[0].attempts, 2);
  EXPECT_NE(second->events[0].ticket.token, first->events[0].ticket.token);

  // The stalled relay wakes up: every transition it tries is refused and reported.
  const Ticket stale = first->events[0].ticket;
  auto ms = store_->MarkSent(std::span(&stale, 1));
  ASSERT_TRUE(ms.ok());
  EXPECT_EQ(ms->applied, 0u);
  ASSERT_EQ(ms->refused.size(), 1u);
  EXPECT_EQ(ms->refused[0].seq, stale.seq);
  RescheduleItem ri{stale, milliseconds(0), "late"};
  auto rs = store_->Reschedule(std::span(&ri, 1));
  ASSERT_TRUE(rs.ok());
  EXPECT_EQ(rs->refused.size(), 1u);
  FailItem fi{stale, "late"};
  auto mf = store_->MarkFailed(std::span(&fi, 1));
  ASSERT_TRUE(mf.ok());
  EXPECT_EQ(mf->refused.size(), 1u);
  EXPECT_EQ(harness_->Row(stale.seq)->status, harness_->PerRowState() ? "PROCESSING" : "PENDING");

  // The current holder's transition applies.
  const Ticket cur = second->events[0].ticket;
  auto ok = other->MarkSent(std::span(&cur, 1));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->applied, 1u);
}

TEST_P(StoreContractTest, RescheduleDelaysTheRowAndKeepsTheError) {
  Event e = Ev("r", 1);
  ASSERT_TRUE(harness_->Enqueue(std::span(&e, 1)).ok());
  auto c = store_->Claim(Opts());
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 1u);
  RescheduleItem later{c->events[0].ticket, milliseconds(3'600'000), "broker timeout"};
  auto rs = store_->Reschedule(std::span(&later, 1));
  ASSERT_TRUE(rs.ok());
  EXPECT_EQ(rs->applied, 1u);
  auto row = harness_->Row(c->events[0].ticket.seq);
  EXPECT_EQ(row->status, "PENDING");
  EXPECT_EQ(row->last_error, "broker timeout");
  auto none = store_->Claim(Opts());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->events.empty()) << "a row rescheduled an hour ahead was claimed";
}

TEST_P(StoreContractTest, RescheduledRowComesBackWithAttemptsCounted) {
  Event e = Ev("r", 1);
  ASSERT_TRUE(harness_->Enqueue(std::span(&e, 1)).ok());
  auto c = store_->Claim(Opts());
  ASSERT_TRUE(c.ok());
  RescheduleItem now{c->events[0].ticket, milliseconds(0), "retriable"};
  ASSERT_TRUE(store_->Reschedule(std::span(&now, 1)).ok());
  auto again = store_->Claim(Opts());
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->events.size(), 1u);
  EXPECT_EQ(again->events[0].attempts, 2);
}

// An attempt that did not implicate the event (held behind an earlier one, or
// the broker down for the whole batch) is given back.
TEST_P(StoreContractTest, RescheduleCanGiveTheClaimsAttemptBack) {
  Event e = Ev("g", 1);
  ASSERT_TRUE(harness_->Enqueue(std::span(&e, 1)).ok());
  for (int i = 0; i < 5; ++i) {
    auto c = store_->Claim(Opts());
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(c->events.size(), 1u);
    EXPECT_EQ(c->events[0].attempts, 1) << "round " << i;
    RescheduleItem back{c->events[0].ticket, milliseconds(0), "broker unavailable", false};
    ASSERT_TRUE(store_->Reschedule(std::span(&back, 1)).ok());
  }
}

// The claim's byte bound: it stops before going over batch_bytes (payloads), in
// a run and between heads; a row larger than the bound still comes, alone.
TEST_P(StoreContractTest, AClaimStopsBeforeGoingOverBatchBytes) {
  auto big = [](const std::string& agg, char c) {
    Event e = Ev(agg, 0);
    e.payload = std::string(4000, c);
    return e;
  };
  std::vector<Event> evs = {big("a", '1'), big("a", '2'), big("a", '3'), big("b", '4'),
                            big("c", '5')};
  ASSERT_TRUE(harness_->Enqueue(evs).ok());
  for (bool ordered : {true, false}) {
    ClaimOptions o = Opts(100);
    o.ordered = ordered;
    o.batch_bytes = 10'000;  // two rows of 4,000 bytes, not three
    auto c = store_->Claim(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->events.size(), 2u) << "ordered=" << ordered;
    EXPECT_EQ(c->events[0].event.payload, std::string(4000, '1'));
    EXPECT_EQ(c->events[1].event.payload, std::string(4000, '2'));
    ASSERT_TRUE(store_->Reschedule(std::vector<RescheduleItem>{
                    {c->events[0].ticket, milliseconds(0), "x", false},
                    {c->events[1].ticket, milliseconds(0), "x", false}}).ok());
    o.batch_bytes = 100;  // smaller than any row: one row comes anyway
    auto one = store_->Claim(o);
    ASSERT_TRUE(one.ok());
    ASSERT_EQ(one->events.size(), 1u);
    ASSERT_TRUE(store_->Reschedule(std::vector<RescheduleItem>{
                    {one->events[0].ticket, milliseconds(0), "x", false}}).ok());
  }
}

TEST_P(StoreContractTest, MarkFailedKeepsTheRowWithItsError) {
  Event e = Ev("f", 1);
  ASSERT_TRUE(harness_->Enqueue(std::span(&e, 1)).ok());
  auto c = store_->Claim(Opts());
  ASSERT_TRUE(c.ok());
  FailItem fi{c->events[0].ticket, "MSG_SIZE_TOO_LARGE: message too large"};
  auto mf = store_->MarkFailed(std::span(&fi, 1));
  ASSERT_TRUE(mf.ok());
  EXPECT_EQ(mf->applied, 1u);
  auto row = harness_->Row(c->events[0].ticket.seq);
  EXPECT_EQ(row->status, "FAILED");
  EXPECT_EQ(row->last_error, fi.error);
  auto s = store_->Stats();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->failed, 1);
  // Purge never removes FAILED rows.
  auto p = store_->PurgeSent(std::chrono::seconds(0), 100);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, 0);
  EXPECT_EQ(harness_->Row(c->events[0].ticket.seq)->status, "FAILED");
}

// The dashboard's last hour: sent and failed per minute, and who claimed.
// SentDelete stores keep no SENT rows, so only the failure is counted there.
TEST_P(StoreContractTest, RecentActivityCountsSentAndFailedAndNamesTheClaimer) {
  std::vector<Event> evs = {Ev("a", 1), Ev("b", 1), Ev("c", 1)};
  ASSERT_TRUE(harness_->Enqueue(evs, /*one_txn=*/false).ok());
  ClaimOptions o = Opts();
  o.owner = "relay-activity";
  auto c = store_->Claim(o);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 3u);
  std::vector<Ticket> sent = {c->events[0].ticket, c->events[1].ticket};
  ASSERT_TRUE(store_->MarkSent(sent).ok());
  FailItem fi{c->events[2].ticket, "fatal"};
  ASSERT_TRUE(store_->MarkFailed(std::span(&fi, 1)).ok());
  const bool deletes_sent = !harness_->Row(c->events[0].ticket.seq).has_value();
  auto a = store_->RecentActivity(std::chrono::hours(1));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::int64_t n_sent = 0, n_failed = 0;
  const std::int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  for (const auto& m : a->minutes) {
    n_sent += m.sent;
    n_failed += m.failed;
    EXPECT_EQ(m.minute % 60, 0);
    EXPECT_LE(std::abs(m.minute - now_s), 180) << "the minute is the database's, in UTC";
  }
  // The log keeps no send time per event: it counts only what failed.
  const bool sends_kept = !deletes_sent && harness_->PerRowState();
  EXPECT_EQ(n_sent, sends_kept ? 2 : 0);
  EXPECT_EQ(n_failed, 1);
  ASSERT_EQ(a->relays.size(), 1u);
  EXPECT_EQ(a->relays[0].relay, "relay-activity");
  EXPECT_EQ(a->relays[0].role, "claims");
  if (harness_->PerRowState()) {
    EXPECT_EQ(a->relays[0].rows, deletes_sent ? 1 : 3);
  }
  EXPECT_FALSE(a->relays[0].last_seen.empty());
}

TEST_P(StoreContractTest, LaterEventOfAnAggregateWaitsWhileAnEarlierOneIsInFlight) {
  std::vector<Event> evs = {Ev("a", 1), Ev("a", 2), Ev("b", 1)};
  ASSERT_TRUE(harness_->Enqueue(evs, /*one_txn=*/false).ok());
  auto first = store_->Claim(Opts(1));
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->events.size(), 1u);
  EXPECT_EQ(first->events[0].event.payload, evs[0].payload);
  // Another relay must not take a/2 while a/1 is in flight; b/1 is free (the
  // log: the first relay leases every slot, so the other takes nothing).
  auto other = NewStore();
  auto second = other->Claim(Opts(100));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(AggIds(*second), harness_->PerRowState() ? std::vector<std::string>{"b"}
                                                     : std::vector<std::string>{});
  ASSERT_TRUE(store_->MarkSent(Tickets(*first)).ok());
  if (!harness_->PerRowState()) other = std::move(store_);  // the holder goes on
  auto third = other->Claim(Opts(harness_->PerRowState() ? 100 : 1));
  ASSERT_TRUE(third.ok());
  ASSERT_EQ(third->events.size(), 1u);
  EXPECT_EQ(third->events[0].event.payload, evs[1].payload);
}

TEST_P(StoreContractTest, ARetryingEventHoldsBackOnlyItsOwnAggregate) {
  std::vector<Event> evs = {Ev("a", 1), Ev("a", 2), Ev("b", 1), Ev("b", 2)};
  ASSERT_TRUE(harness_->Enqueue(evs).ok());
  auto c = store_->Claim(Opts(100));
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 4u);
  // a/1 fails retriably: a/1 and a/2 go back (a/2 was never published).
  std::vector<RescheduleItem> back;
  std::vector<Ticket> sent;
  for (const auto& e : c->events) {
    if (e.event.aggregate_id == "a") {
      back.push_back({e.ticket, milliseconds(3'600'000), "retriable"});
    } else {
      sent.push_back(e.ticket);
    }
  }
  ASSERT_TRUE(store_->Reschedule(back).ok());
  ASSERT_TRUE(store_->MarkSent(sent).ok());
  std::vector<Event> more = {Ev("a", 3), Ev("b", 3)};
  ASSERT_TRUE(harness_->Enqueue(more).ok());
  auto next = store_->Claim(Opts(100));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(AggIds(*next), std::vector<std::string>{"b"}) << "a/3 jumped ahead of a/1";
}

TEST_P(StoreContractTest, FailedEventHoldsItsAggregateWhenOrderedButNotWhenUnordered) {
  std::vector<Event> evs = {Ev("a", 1), Ev("a", 2)};
  ASSERT_TRUE(harness_->Enqueue(evs).ok());
  auto c = store_->Claim(Opts(1));
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 1u);
  FailItem fi{c->events[0].ticket, "fatal"};
  ASSERT_TRUE(store_->MarkFailed(std::span(&fi, 1)).ok());
  auto held = store_->Claim(Opts(100));
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(held->events.empty()) << "a/2 passed a FAILED a/1 in ordered mode";
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->held_aggregates, 1);
  ClaimOptions unordered = Opts(100);
  unordered.ordered = false;
  auto passed = store_->Claim(unordered);
  ASSERT_TRUE(passed.ok());
  ASSERT_EQ(passed->events.size(), 1u);
  EXPECT_EQ(passed->events[0].event.payload, evs[1].payload);
}

TEST_P(StoreContractTest, PassPolicyLetsLaterEventsGoPastAFailedOneInOrder) {
  std::vector<Event> evs = {Ev("a", 1), Ev("a", 2), Ev("a", 3)};
  ASSERT_TRUE(harness_->Enqueue(evs, /*one_txn=*/false).ok());
  ClaimOptions pass = Opts(1);
  pass.failed_holds_aggregate = false;
  auto c = store_->Claim(pass);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 1u);
  FailItem fi{c->events[0].ticket, "fatal"};
  ASSERT_TRUE(store_->MarkFailed(std::span(&fi, 1)).ok());
  pass.batch_size = 100;
  auto next = store_->Claim(pass);
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->events.size(), 2u) << "a/2 and a/3 come as one run, still in order";
  EXPECT_EQ(next->events[0].event.payload, evs[1].payload);
  EXPECT_EQ(next->events[1].event.payload, evs[2].payload);
}

TEST_P(StoreContractTest, AHotAggregateComesAsOneContiguousRun) {
  std::vector<Event> evs;
  for (int i = 0; i < 50; ++i) evs.push_back(Ev("hot", i));
  evs.push_back(Ev("cold", 0));
  ASSERT_TRUE(harness_->Enqueue(evs).ok());
  auto c = store_->Claim(Opts(100));
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 51u);
  int n = 0;
  for (const auto& e : c->events) {
    if (e.event.aggregate_id == "hot") {
      EXPECT_EQ(e.event.payload, evs[static_cast<std::size_t>(n++)].payload);
    }
  }
  EXPECT_EQ(n, 50);
  // A batch limit cuts the run, keeping a prefix (the log: on the relay that
  // holds the slots, once its page is settled).
  auto other = NewStore();
  if (!harness_->PerRowState()) {
    ASSERT_TRUE(store_->MarkSent(Tickets(*c)).ok());
    other = std::move(store_);
  }
  std::vector<Event> more;
  for (int i = 0; i < 10; ++i) more.push_back(Ev("hot2", i));
  ASSERT_TRUE(harness_->Enqueue(more).ok());
  auto cut = other->Claim(Opts(4));
  ASSERT_TRUE(cut.ok());
  ASSERT_EQ(cut->events.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(cut->events[static_cast<std::size_t>(i)].event.payload, more[static_cast<std::size_t>(i)].payload);
}

TEST_P(StoreContractTest, RowClaimedMaxAttemptsTimesEndsFailedNotInALoop) {
  Event e = Ev("poison", 1);
  ASSERT_TRUE(harness_->Enqueue(std::span(&e, 1)).ok());
  ClaimOptions o = Opts(10, milliseconds(0));  // each claim "crashes": lease lapses
  o.max_attempts = 3;
  for (int i = 1; i <= 3; ++i) {
    auto c = store_->Claim(o);
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(c->events.size(), 1u) << "claim " << i;
    EXPECT_EQ(c->events[0].attempts, i);
  }
  auto last = store_->Claim(o);
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->events.empty());
  ASSERT_EQ(last->expired_to_failed.size(), 1u);
  auto row = harness_->Row(last->expired_to_failed[0]);
  EXPECT_EQ(row->status, "FAILED");
  EXPECT_EQ(row->attempts, 3);
  ASSERT_TRUE(row->last_error.has_value());
  EXPECT_NE(row->last_error->find("max_attempts"), std::string::npos) << *row->last_error;
  auto after = store_->Claim(o);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->events.empty());
  EXPECT_TRUE(after->expired_to_failed.empty());
}

TEST_P(StoreContractTest, DuplicateDedupKeyWritesNothing) {
  Event e = Ev("d", 1, "order-1-created");
  auto first = harness_->Enqueue(std::span(&e, 1));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE((*first)[0].enqueued);
  Event again = Ev("d", 2, "order-1-created");
  auto second = harness_->Enqueue(std::span(&again, 1));
  ASSERT_TRUE(second.ok()) << "a duplicate dedup key is not an error";
  EXPECT_FALSE((*second)[0].enqueued);
  EXPECT_EQ((*second)[0].event_id, (*first)[0].event_id);
  EXPECT_EQ(harness_->CountRows(), 1);
}

TEST_P(StoreContractTest, InvalidEventIsRejectedNamingTheField) {
  Event e = Ev("v", 1);
  e.event_type.clear();
  auto r = harness_->Enqueue(std::span(&e, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("event_type"), std::string::npos) << r.status().message();
  EXPECT_EQ(harness_->CountRows(), 0);
}

TEST_P(StoreContractTest, MarkSentTwiceIsHarmless) {
  Event e = Ev("m", 1);
  ASSERT_TRUE(harness_->Enqueue(std::span(&e, 1)).ok());
  auto c = store_->Claim(Opts());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(store_->MarkSent(Tickets(*c)).ok());
  // e.g. the reply to the first mark was lost and the relay retries it.
  auto again = store_->MarkSent(Tickets(*c));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->applied + again->refused.size(), 1u);
  auto none = store_->Claim(Opts());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->events.empty());
}

TEST_P(StoreContractTest, PurgeRemovesOnlySentRowsOlderThanRetentionInBatches) {
  std::vector<Event> evs;
  for (int i = 0; i < 7; ++i) evs.push_back(Ev("p" + std::to_string(i), 1));
  ASSERT_TRUE(harness_->Enqueue(evs).ok());
  auto c = store_->Claim(Opts(5));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(store_->MarkSent(Tickets(*c)).ok());
  auto kept = store_->PurgeSent(std::chrono::hours(1), 100);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, 0) << "rows younger than the retention were purged";
  if (!harness_->PerRowState()) {
    // The log purges whole partitions, never the one producers write
    // (LogStoreTest.RotationTruncatesPassedPartitionsAndGivesTheDiskBack).
    auto none = store_->PurgeSent(std::chrono::seconds(0), 3);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(*none, 0);
    EXPECT_EQ(harness_->CountRows(), 7);
    return;
  }
  std::int64_t before = harness_->CountRows();
  auto p1 = store_->PurgeSent(std::chrono::seconds(0), 3);
  ASSERT_TRUE(p1.ok());
  auto p2 = store_->PurgeSent(std::chrono::seconds(0), 3);
  ASSERT_TRUE(p2.ok());
  // In delete mode MarkSent already removed them; in update mode purge does.
  EXPECT_EQ(*p1 + *p2 + (7 - before), 5);
  EXPECT_LE(*p1, 3);
  EXPECT_EQ(harness_->CountRows(), 2);  // the two unclaimed rows stay
}

TEST_P(StoreContractTest, StatsCountStatesAndOldestUnsentAge) {
  std::vector<Event> evs = {Ev("s1", 1), Ev("s2", 1), Ev("s3", 1)};
  ASSERT_TRUE(harness_->Enqueue(evs).ok());
  std::this_thread::sleep_for(milliseconds(20));  // measure an age, not a race
  auto c = store_->Claim(Opts(1));
  ASSERT_TRUE(c.ok());
  auto s = store_->Stats();
  ASSERT_TRUE(s.ok());
  // The log cannot tell a claimed event from a pending one (nothing is written per claim).
  EXPECT_EQ(s->pending, harness_->PerRowState() ? 2 : 3);
  EXPECT_EQ(s->processing, harness_->PerRowState() ? 1 : 0);
  EXPECT_GE(s->oldest_unsent_age.count(), 20);
}

TEST_P(StoreContractTest, ConcurrentRelaysNeverShareAClaimAndKeepAggregateOrder) {
  constexpr int kAggregates = 40, kPerAggregate = 25, kThreads = 4;
  std::vector<Event> evs;
  for (int n = 0; n < kPerAggregate; ++n) {
    for (int a = 0; a < kAggregates; ++a) evs.push_back(Ev("c" + std::to_string(a), n));
  }
  ASSERT_TRUE(harness_->Enqueue(evs).ok());

  std::mutex mu;
  std::map<std::int64_t, int> claims_per_seq;
  // For each aggregate, the payload "n" values in the order they were claimed.
  std::map<std::string, std::vector<std::string>> claim_order;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto store = NewStore();
      ClaimOptions o = Opts(16);
      o.owner = "relay-" + std::to_string(t);
      int idle = 0;
      while (idle < 3) {
        auto c = store->Claim(o);
        if (!c.ok()) {
          ++errors;
          return;
        }
        if (c->events.empty()) {
          ++idle;
          std::this_thread::sleep_for(milliseconds(5));
          continue;
        }
        idle = 0;
        {
          std::lock_guard<std::mutex> lock(mu);
          for (const auto& e : c->events) {
            ++claims_per_seq[e.ticket.seq];
            claim_order[e.event.aggregate_id].push_back(e.event.payload);
          }
        }
        auto m = store->MarkSent(Tickets(*c));
        if (!m.ok() || !m->refused.empty()) ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(claims_per_seq.size(), evs.size());
  for (const auto& [seq, n] : claims_per_seq) EXPECT_EQ(n, 1) << "seq " << seq << " claimed twice";
  for (int a = 0; a < kAggregates; ++a) {
    const auto& got = claim_order["c" + std::to_string(a)];
    ASSERT_EQ(got.size(), static_cast<std::size_t>(kPerAggregate));
    for (int n = 0; n < kPerAggregate; ++n) {
      EXPECT_EQ(got[static_cast<std::size_t>(n)], Ev("c" + std::to_string(a), n).payload);
    }
  }
}

}  // namespace outbox::testing

namespace outbox::testing {
namespace {

// Operator operations: replay, skip, and the oldest event that may still be
// published (what bounds consumers' stamp retention).
TEST_P(StoreContractTest, ReplayAndSkipReleaseTheAggregateAndOldestUnsentCoversFailed) {
  auto none = store_->OldestUnsent();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  std::vector<Event> evs = {Ev("a", 1), Ev("a", 2), Ev("b", 1)};
  auto enq = harness_->Enqueue(evs, /*one_txn=*/false);
  ASSERT_TRUE(enq.ok());
  auto c = store_->Claim(Opts(1));
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 1u);
  FailItem fi{c->events[0].ticket, "fatal"};
  ASSERT_TRUE(store_->MarkFailed(std::span(&fi, 1)).ok());
  // b/1 is sent: a FAILED a/1 is now the oldest event that may still be published.
  auto rest = store_->Claim(Opts(100));
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->events.size(), 1u) << "a/2 is held behind the FAILED a/1";
  std::vector<Ticket> sent = {rest->events[0].ticket};
  ASSERT_TRUE(store_->MarkSent(sent).ok());
  auto oldest = store_->OldestUnsent();
  ASSERT_TRUE(oldest.ok());
  ASSERT_TRUE(oldest->has_value());
  EXPECT_LE(std::chrono::system_clock::now() - **oldest, std::chrono::minutes(5));

  ReplaySelection dry;
  dry.event_id = (*enq)[0].event_id;
  dry.dry_run = true;
  auto d = store_->ReplayFailed(dry);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->matched, 1);
  EXPECT_EQ(d->replayed, 0);
  EXPECT_EQ(harness_->Row(c->events[0].ticket.seq)->status, "FAILED") << "a dry run changes nothing";
  ReplaySelection by_aggregate;
  by_aggregate.aggregate_id = "a";
  auto r = store_->ReplayFailed(by_aggregate);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->replayed, 1);
  EXPECT_EQ(r->released, 1) << "a/2's attempts were reset";
  EXPECT_GE(r->oldest_age.count(), 0);
  auto again = store_->Claim(Opts(100));
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->events.size(), 2u) << "the replayed head and the event behind it";

  SkipRequest missing;
  missing.event_id = "00000000-0000-0000-0000-000000000000";
  auto m = store_->Skip(missing);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->was, "") << "no such event";
  SkipRequest skip;
  skip.event_id = (*enq)[1].event_id;  // a/2: claimed just now, cannot be skipped
  skip.by = "test";
  skip.reason = "test";
  auto s = store_->Skip(skip);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->was, "PROCESSING");
  EXPECT_EQ(s->skipped, 0);
}

TEST_P(StoreContractTest, ListAndFindShowRowsToOperators) {
  std::vector<Event> evs = {Ev("a", 1, "dk-a1"), Ev("b", 1)};
  auto enq = harness_->Enqueue(evs);
  ASSERT_TRUE(enq.ok());
  ListFilter all;
  auto rows = store_->List(all);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_LT((*rows)[0].seq, (*rows)[1].seq);
  EXPECT_EQ((*rows)[0].status, "PENDING");
  EXPECT_EQ((*rows)[0].aggregate_id, "a");
  EXPECT_FALSE((*rows)[0].created_at.empty());
  ListFilter pending_b;
  pending_b.state = "pending";
  pending_b.aggregate_id = "b";
  auto b = store_->List(pending_b);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 1u);
  ListFilter old;
  old.older_than = std::chrono::hours(1);
  EXPECT_TRUE(store_->List(old)->empty());
  auto by_dedup = store_->Find("dk-a1");
  ASSERT_TRUE(by_dedup.ok());
  ASSERT_EQ(by_dedup->size(), 1u);
  EXPECT_EQ((*by_dedup)[0].event_id, (*enq)[0].event_id);
  auto by_id = store_->Find((*enq)[1].event_id);
  ASSERT_TRUE(by_id.ok());
  ASSERT_EQ(by_id->size(), 1u);
  EXPECT_TRUE(store_->Find("no-such-key")->empty());
}

}  // namespace
}  // namespace outbox::testing
