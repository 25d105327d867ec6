// Unit tests of the relay's shared waits as pure state machines: the broker
// outage gate (outage_gate.h) and the idle poller (idle_poller.h). The
// relay's threads, clock and condition variable are not involved.
#include <gtest/gtest.h>

#include "idle_poller.h"
#include "outage_gate.h"

namespace outbox::relay_internal {
namespace {

using std::chrono::milliseconds;
using TimePoint = std::chrono::steady_clock::time_point;

const TimePoint kT0 = TimePoint() + std::chrono::hours(1);

TEST(OutageGateTest, WhileTheBrokerAnswersEveryWorkerClaims) {
  OutageGate g(milliseconds(100), milliseconds(1000));
  TimePoint until;
  EXPECT_EQ(g.TakeTurn(kT0, milliseconds(20), &until), OutageGate::Turn::kClaim);
  EXPECT_EQ(g.TakeTurn(kT0, milliseconds(20), &until), OutageGate::Turn::kClaim);
  EXPECT_FALSE(g.InOutage());
  EXPECT_FALSE(g.Down());
  EXPECT_EQ(g.NextDelay(), milliseconds(100));
}

TEST(OutageGateTest, AnOutageStopsClaimsUntilItsBackoffEndsThenOneWorkerProbes) {
  OutageGate g(milliseconds(100), milliseconds(1000));
  g.EndRound(kT0, /*outage=*/true, milliseconds(0), false, false, "connection refused");
  EXPECT_TRUE(g.InOutage());
  EXPECT_TRUE(g.Down());
  EXPECT_EQ(g.DownError(), "connection refused");
  TimePoint until;
  EXPECT_EQ(g.TakeTurn(kT0 + milliseconds(50), milliseconds(20), &until), OutageGate::Turn::kWait);
  EXPECT_EQ(until, kT0 + milliseconds(100));  // the backoff's end
  // At the end one worker probes; the others wait a poll at a time for its round.
  EXPECT_EQ(g.TakeTurn(kT0 + milliseconds(100), milliseconds(20), &until), OutageGate::Turn::kProbe);
  EXPECT_EQ(g.TakeTurn(kT0 + milliseconds(101), milliseconds(20), &until), OutageGate::Turn::kWait);
  EXPECT_EQ(until, kT0 + milliseconds(121));
  // The probe acked: everyone claims, the backoff starts again from base.
  g.EndRound(kT0 + milliseconds(110), false, milliseconds(0), /*broker_answered=*/true, /*probing=*/true, "");
  EXPECT_EQ(g.TakeTurn(kT0 + milliseconds(111), milliseconds(20), &until), OutageGate::Turn::kClaim);
  EXPECT_FALSE(g.Down());
  EXPECT_EQ(g.NextDelay(), milliseconds(100));
}

TEST(OutageGateTest, TheBackoffDoublesToItsMaximumWhileProbesFail) {
  OutageGate g(milliseconds(100), milliseconds(350));
  TimePoint now = kT0;
  std::vector<milliseconds> delays;
  for (int i = 0; i < 4; ++i) {
    delays.push_back(g.NextDelay());
    g.EndRound(now, true, milliseconds(0), false, i > 0, "down");
    TimePoint until;
    now += delays.back();
    ASSERT_EQ(g.TakeTurn(now, milliseconds(20), &until), OutageGate::Turn::kProbe) << i;
  }
  EXPECT_EQ(delays, (std::vector<milliseconds>{milliseconds(100), milliseconds(200), milliseconds(350),
                                               milliseconds(350)}));
}

TEST(OutageGateTest, ARetryAfterMovesTheEndButNotTheDoubling) {
  OutageGate g(milliseconds(100), milliseconds(1000));
  g.EndRound(kT0, true, /*at_least=*/milliseconds(5000), false, false, "429");
  TimePoint until;
  EXPECT_EQ(g.TakeTurn(kT0 + milliseconds(4999), milliseconds(20), &until), OutageGate::Turn::kWait);
  EXPECT_EQ(until, kT0 + milliseconds(5000));
  EXPECT_EQ(g.NextDelay(), milliseconds(200));  // doubling from base, not from 5 s
}

TEST(OutageGateTest, ALaterReportNeverShortensAnOutageAnotherWorkerExtended) {
  OutageGate g(milliseconds(100), milliseconds(1000));
  g.EndRound(kT0, true, milliseconds(3000), false, false, "first");
  // A second worker's batch of the same outage, which started earlier, ends now.
  g.EndRound(kT0 + milliseconds(10), true, milliseconds(0), false, false, "second");
  TimePoint until;
  EXPECT_EQ(g.TakeTurn(kT0 + milliseconds(500), milliseconds(20), &until), OutageGate::Turn::kWait);
  EXPECT_EQ(until, kT0 + milliseconds(3000));
  EXPECT_EQ(g.DownError(), "second");  // /readyz names the latest error
}

TEST(OutageGateTest, AProbeThatDidNotPublishLetsAnotherWorkerProbe) {
  OutageGate g(milliseconds(100), milliseconds(1000));
  g.EndRound(kT0, true, milliseconds(0), false, false, "down");
  TimePoint until;
  ASSERT_EQ(g.TakeTurn(kT0 + milliseconds(100), milliseconds(20), &until), OutageGate::Turn::kProbe);
  g.EndProbe();  // its claim came back empty
  EXPECT_EQ(g.TakeTurn(kT0 + milliseconds(101), milliseconds(20), &until), OutageGate::Turn::kProbe);
  EXPECT_TRUE(g.InOutage());  // nothing was learnt about the broker
}

TEST(OutageGateTest, ABatchTheBrokerDidNotAnswerEndsDownButKeepsTheBackoff) {
  // Not an outage, yet nothing the broker answered (every event refused
  // before it reached the broker, e.g. too large): readiness comes back, and
  // the doubling goes on from where it was until the broker answers.
  OutageGate g(milliseconds(100), milliseconds(1000));
  g.EndRound(kT0, true, milliseconds(0), false, false, "down");
  g.EndRound(kT0 + milliseconds(100), false, milliseconds(0), /*broker_answered=*/false, true, "");
  EXPECT_FALSE(g.Down());
  EXPECT_TRUE(g.InOutage());
  EXPECT_EQ(g.NextDelay(), milliseconds(200));
}

TEST(OutageGateTest, TheErrorReportedIsCappedAt500Bytes) {
  OutageGate g(milliseconds(100), milliseconds(1000));
  g.EndRound(kT0, true, milliseconds(0), false, false, std::string(501, 'e'));
  EXPECT_EQ(g.DownError().size(), 500u);
  g.EndRound(kT0, true, milliseconds(0), false, false, "");
  EXPECT_EQ(g.DownError(), "no answer");
}

// A worker polling its own share (a log schema) is heated by the others' work:
// back at its poll_min, then doubling after poll_hot as before; old news changes nothing.
TEST(IdlePollerTest, AnOwnPollerIsHeatedByWorkFoundElsewhere) {
  IdlePoller p(milliseconds(2), milliseconds(20), milliseconds(20));
  p.Found(kT0);
  for (int t = 30; t <= 60; t += 10) (void)p.Next(0, kT0 + milliseconds(t), milliseconds(0));
  EXPECT_EQ(p.interval(), milliseconds(20)) << "backed off";
  p.Heat(kT0 + milliseconds(65), milliseconds(8));
  EXPECT_EQ(p.interval(), milliseconds(8)) << "the others' work: its next sleep at the relay's share";
  EXPECT_EQ(p.Next(0, kT0 + milliseconds(70), milliseconds(0)).sleep, milliseconds(8));
  EXPECT_EQ(p.interval(), milliseconds(16)) << "then doubling: its own poll_hot has passed";
  p.Heat(kT0 + milliseconds(65), milliseconds(8));
  EXPECT_EQ(p.interval(), milliseconds(16)) << "the same news twice";
  p.Heat(kT0 + milliseconds(75), milliseconds(8));
  EXPECT_EQ(p.interval(), milliseconds(8)) << "news again";
  p.Found(kT0 + milliseconds(100));
  p.Heat(kT0 + milliseconds(101), milliseconds(8));
  EXPECT_EQ(p.interval(), milliseconds(2)) << "its own work keeps poll_min";
}

TEST(IdlePollerTest, TheFirstIdleWorkerPollsAndTheOthersWaitForAHandover) {
  IdlePoller p(milliseconds(2), milliseconds(20), milliseconds(100));
  const IdlePoller::Wait first = p.Next(0, kT0, milliseconds(0));
  EXPECT_TRUE(first.polls);
  EXPECT_EQ(first.sleep, milliseconds(2));
  EXPECT_EQ(p.poller(), 0);
  const IdlePoller::Wait second = p.Next(1, kT0, milliseconds(0));
  EXPECT_FALSE(second.polls);
  EXPECT_EQ(second.sleep, IdlePoller::kSafetyNetMin);  // 4 x poll_max is shorter
  EXPECT_EQ(p.poller(), 0);
}

TEST(IdlePollerTest, TheIntervalStaysShortWhileHotThenDoublesToPollMax) {
  IdlePoller p(milliseconds(2), milliseconds(20), milliseconds(100));
  p.Found(kT0);
  EXPECT_EQ(p.Next(0, kT0 + milliseconds(50), milliseconds(0)).sleep, milliseconds(2));
  EXPECT_EQ(p.interval(), milliseconds(2));  // found work 50 ms ago: still hot
  std::vector<milliseconds> sleeps;
  for (int i = 0; i < 6; ++i) sleeps.push_back(p.Next(0, kT0 + milliseconds(200 + i), milliseconds(0)).sleep);
  EXPECT_EQ(sleeps, (std::vector<milliseconds>{milliseconds(2), milliseconds(4), milliseconds(8), milliseconds(16),
                                               milliseconds(20), milliseconds(20)}));
}

TEST(IdlePollerTest, ASlowEmptyClaimLengthensThePollersSleep) {
  IdlePoller p(milliseconds(2), milliseconds(20), milliseconds(100));
  EXPECT_EQ(p.Next(0, kT0, milliseconds(35)).sleep, milliseconds(35));
}

TEST(IdlePollerTest, FindingWorkFreesTheRoleAndResetsTheInterval) {
  IdlePoller p(milliseconds(2), milliseconds(20), milliseconds(100));
  for (int i = 0; i < 5; ++i) (void)p.Next(0, kT0 + std::chrono::seconds(1), milliseconds(0));
  ASSERT_EQ(p.interval(), milliseconds(20));
  p.Found(kT0 + std::chrono::seconds(2));
  EXPECT_EQ(p.poller(), -1);
  EXPECT_EQ(p.interval(), milliseconds(2));
  // Whoever asks next polls, at poll_min.
  const IdlePoller::Wait w = p.Next(3, kT0 + std::chrono::seconds(2), milliseconds(0));
  EXPECT_TRUE(w.polls);
  EXPECT_EQ(w.sleep, milliseconds(2));
}

TEST(IdlePollerTest, ABusyWorkerRunningOutTakesOverABackedOffPoller) {
  IdlePoller p(milliseconds(2), milliseconds(20), milliseconds(100));
  for (int i = 0; i < 5; ++i) (void)p.Next(0, kT0 + std::chrono::seconds(1), milliseconds(0));
  ASSERT_EQ(p.interval(), milliseconds(20));
  p.RanOut(1, kT0 + std::chrono::seconds(2));
  EXPECT_EQ(p.poller(), 1);
  EXPECT_EQ(p.interval(), milliseconds(2));
  // Worker 0, the old poller, now waits as the others do.
  EXPECT_FALSE(p.Next(0, kT0 + std::chrono::seconds(2), milliseconds(0)).polls);
}

TEST(IdlePollerTest, ABusyWorkerRunningOutLeavesAnUnbackedPollerInPlace) {
  IdlePoller p(milliseconds(2), milliseconds(20), milliseconds(100));
  p.Found(kT0);
  (void)p.Next(0, kT0 + milliseconds(1), milliseconds(0));
  ASSERT_EQ(p.interval(), milliseconds(2));
  p.RanOut(1, kT0 + milliseconds(2));
  EXPECT_EQ(p.poller(), 0);  // polling at poll_min already
}

TEST(IdlePollerTest, OnlyThePollerLeavingFreesTheRole) {
  IdlePoller p(milliseconds(2), milliseconds(20), milliseconds(100));
  (void)p.Next(0, kT0, milliseconds(0));
  EXPECT_FALSE(p.Leave(1));
  EXPECT_EQ(p.poller(), 0);
  EXPECT_TRUE(p.Leave(0));
  EXPECT_EQ(p.poller(), -1);
}

TEST(IdlePollerTest, TheSafetyNetIsFourPollMaxesWhenLongerThanASecond) {
  IdlePoller p(milliseconds(2), milliseconds(400), milliseconds(100));
  (void)p.Next(0, kT0, milliseconds(0));
  EXPECT_EQ(p.Next(1, kT0, milliseconds(0)).sleep, milliseconds(1600));
}

}  // namespace
}  // namespace outbox::relay_internal
