// The inbox's apply strategy (src/inbox/apply.h) on a fake InboxSession: a
// database of stamps and effects in memory, with transactions and one
// savepoint, whose handler behaves as the message's payload says. The stores'
// SQL is proven against the real servers (inbox_e2e_test, postgres_inbox_test,
// mariadb_inbox_test); this proves the passes and the outcomes.
#include <gtest/gtest.h>

#include <set>

#include "inbox/apply.h"

namespace outbox::inbox_apply {
namespace {

// Payloads: "ok" applies; "perm" / "trans" fail so; "commit-breaks" applies
// but makes the COMMIT that includes it fail (a deferred constraint);
// "lost" loses the connection.
class FakeSession final : public InboxSession {
 public:
  Status Begin() override {
    log.push_back("BEGIN");
    if (in_txn_) return Status::Internal("BEGIN inside a transaction");
    in_txn_ = true;
    pending_.clear();
    return Status::Ok();
  }
  Status Savepoint() override {
    if (!in_txn_) return Status::Internal("SAVEPOINT outside a transaction");
    savepoint_ = pending_;
    return Status::Ok();
  }
  Status ReleaseSavepoint() override { return Status::Ok(); }
  Status RollbackToSavepoint() override {
    pending_ = savepoint_;
    return Status::Ok();
  }
  Result<bool> Stamp(const InboundMessage& m, const std::string& key) override {
    if (m.payload == "stamp-deadlock") return Status::Internal("deadlock detected", /*retryable=*/true);
    if (stamps.count(key) || pending_stamps().count(key)) {
      ++duplicates;
      return false;
    }
    pending_.push_back({key, m.payload});
    return true;
  }
  HandlerResult RunHandler(const InboundMessage& m) override {
    ++runs[m.payload + "@" + std::to_string(m.offset)];
    if (m.payload == "perm") return HandlerResult::Permanent("bad data");
    if (m.payload == "trans") return HandlerResult::Transient("try later");
    if (m.payload == "lost") lost_ = true;
    return HandlerResult::Ok();
  }
  Status Commit() override {
    log.push_back("COMMIT");
    in_txn_ = false;
    if (lost_) return Status::Unavailable("connection lost");
    for (const auto& [key, payload] : pending_) {
      if (payload == "commit-breaks") {
        pending_.clear();
        return Status::InvalidArgument("deferred constraint broken");
      }
    }
    for (const auto& [key, payload] : pending_) {
      stamps.insert(key);
      effects.push_back(key);
    }
    pending_.clear();
    return Status::Ok();
  }
  void Rollback() override {
    log.push_back("ROLLBACK");
    in_txn_ = false;
    pending_.clear();
  }
  MessageOutcome OwnFailure(const Status& st) const override {
    return {st.retryable() ? Outcome::kTransient : Outcome::kPermanent, st.message()};
  }

  std::set<std::string> stamps;      // committed
  std::vector<std::string> effects;  // committed, in order
  std::map<std::string, int> runs;   // handler runs per payload@offset
  std::vector<std::string> log;
  int duplicates = 0;
  bool in_transaction() const { return in_txn_; }

 private:
  std::set<std::string> pending_stamps() const {
    std::set<std::string> s;
    for (const auto& p : pending_) s.insert(p.first);
    return s;
  }
  bool in_txn_ = false, lost_ = false;
  std::vector<std::pair<std::string, std::string>> pending_, savepoint_;  // key, payload
};

std::vector<InboundMessage> Msgs(const std::vector<std::string>& payloads) {
  std::vector<InboundMessage> out;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    InboundMessage m;
    m.topic = "t";
    m.offset = static_cast<std::int64_t>(i);
    m.payload = payloads[i];
    out.push_back(m);
  }
  return out;
}
std::vector<std::string> Keys(std::size_t n) {
  std::vector<std::string> k;
  for (std::size_t i = 0; i < n; ++i) k.push_back("k" + std::to_string(i));
  return k;
}

// After every call, whatever it returned, no transaction is left open.
class ApplyTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_FALSE(s.in_transaction()) << "a transaction was left open"; }
  FakeSession s;
};

TEST_F(ApplyTest, AFailedHandlerUndoesItsOwnWritesOnlyAndTheRestCommitTogether) {
  auto msgs = Msgs({"ok", "perm", "ok", "trans"});
  auto out = Apply(s, msgs, Keys(4), {});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*out)[1].outcome, Outcome::kPermanent);
  EXPECT_EQ((*out)[1].error, "bad data");
  EXPECT_EQ((*out)[2].outcome, Outcome::kApplied);
  EXPECT_EQ((*out)[3].outcome, Outcome::kTransient);
  EXPECT_EQ(s.effects, (std::vector<std::string>{"k0", "k2"}));
  EXPECT_EQ(s.log, (std::vector<std::string>{"BEGIN", "COMMIT"})) << "one transaction";
}

TEST_F(ApplyTest, AHandlerThatFailedIsNotRunAgainWhenTheCommitFailsToo) {
  auto msgs = Msgs({"perm", "commit-breaks", "ok"});
  auto out = Apply(s, msgs, Keys(3), {});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].outcome, Outcome::kPermanent);
  EXPECT_EQ(s.runs["perm@0"], 1) << "once per delivery, across the passes";
  EXPECT_EQ((*out)[1].outcome, Outcome::kPermanent);
  EXPECT_EQ((*out)[2].outcome, Outcome::kApplied);
  EXPECT_EQ(s.effects, (std::vector<std::string>{"k2"}));
}

TEST_F(ApplyTest, AStampErrorOfItsOwnFailsItsMessageAloneAndHoldsItsKey) {
  auto msgs = Msgs({"stamp-deadlock", "ok", "ok"});
  std::vector<std::string> order = {"a", "a", "b"};
  auto out = Apply(s, msgs, Keys(3), order);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].outcome, Outcome::kTransient) << "a deadlock is retried";
  EXPECT_EQ((*out)[1].outcome, Outcome::kHeld);
  EXPECT_EQ((*out)[2].outcome, Outcome::kApplied);
}

TEST(InboxApplyTest, ACopyIsADuplicateAndItsHandlerDoesNotRun) {
  FakeSession s;
  s.stamps = {"k1"};
  auto msgs = Msgs({"ok", "ok"});
  std::vector<std::string> keys = {"k0", "k1"};
  auto out = Apply(s, msgs, keys, {});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[1].outcome, Outcome::kDuplicate);
  EXPECT_EQ(s.runs.count("ok@1"), 0u);
  EXPECT_EQ(s.duplicates, 1);
}

TEST_F(ApplyTest, OrderedModeHoldsTheLaterMessagesOfAKeyBehindATransientFailure) {
  auto msgs = Msgs({"trans", "ok", "ok", "perm", "ok"});
  std::vector<std::string> order = {"a", "a", "b", "c", "c"};
  auto out = Apply(s, msgs, Keys(5), order);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].outcome, Outcome::kTransient);
  EXPECT_EQ((*out)[1].outcome, Outcome::kHeld) << "behind a's transient failure";
  EXPECT_EQ((*out)[2].outcome, Outcome::kApplied);
  EXPECT_EQ((*out)[3].outcome, Outcome::kPermanent);
  EXPECT_EQ((*out)[4].outcome, Outcome::kApplied) << "a permanent failure holds nothing";
  EXPECT_EQ(s.runs.count("ok@1"), 0u) << "a held message is not run";
}

TEST_F(ApplyTest, ACommitThatFailsIsRedoneOneTransactionPerMessageAndFailsItsOwnMessageAlone) {
  auto msgs = Msgs({"ok", "commit-breaks", "ok"});
  auto out = Apply(s, msgs, Keys(3), {});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*out)[1].outcome, Outcome::kPermanent);
  EXPECT_EQ((*out)[1].error, "commit failed: deferred constraint broken");
  EXPECT_EQ((*out)[2].outcome, Outcome::kApplied);
  EXPECT_EQ(s.effects, (std::vector<std::string>{"k0", "k2"}));
  EXPECT_EQ(s.log, (std::vector<std::string>{"BEGIN", "COMMIT", "BEGIN", "COMMIT", "BEGIN", "COMMIT",
                                             "BEGIN", "COMMIT"}));
}

TEST_F(ApplyTest, ALostConnectionFailsTheWholeCallAndNothingCounts) {
  auto msgs = Msgs({"ok", "lost"});
  auto out = Apply(s, msgs, Keys(2), {});
  EXPECT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kUnavailable);
  EXPECT_TRUE(s.effects.empty());
}

TEST(InboxApplyTest, AFastPassHandlerFailureIsKeptNotRunAgainAndTheOthersRedo) {
  FakeSession s;
  auto msgs = Msgs({"ok", "ok", "ok"});
  int fast_runs = 0;
  FastPass fast = [&](const std::vector<bool>& todo, std::vector<MessageOutcome>& out,
                      std::map<std::size_t, HandlerResult>& failed) -> Result<PassEnd> {
    ++fast_runs;
    EXPECT_EQ(todo.size(), 3u);
    out[0] = {Outcome::kApplied, ""};
    failed[1] = HandlerResult::Permanent("failed in the fast pass");
    return PassEnd::kHandlerFailed;
  };
  auto out = Apply(s, msgs, Keys(3), {}, fast);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(fast_runs, 1);
  EXPECT_EQ((*out)[1].outcome, Outcome::kPermanent);
  EXPECT_EQ((*out)[1].error, "failed in the fast pass");
  EXPECT_EQ(s.runs.count("ok@1"), 0u) << "a handler runs once per delivery";
  EXPECT_EQ(s.runs["ok@0"], 1);
  EXPECT_EQ(s.effects, (std::vector<std::string>{"k0", "k2"}));
}

TEST(InboxApplyTest, AnEmptyOrNonUtf8KeyFailsAloneBeforeAnythingRuns) {
  FakeSession s;
  auto msgs = Msgs({"ok", "ok", "ok"});
  std::vector<std::string> keys = {"k0", "", std::string("\xff\xfe", 2)};
  auto out = Apply(s, msgs, keys, {});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*out)[1].outcome, Outcome::kPermanent);
  EXPECT_EQ((*out)[2].outcome, Outcome::kPermanent);
  EXPECT_EQ(s.effects, (std::vector<std::string>{"k0"}));
  std::vector<std::string> short_keys = {"k0"};
  EXPECT_EQ(Apply(s, msgs, short_keys, {}).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace outbox::inbox_apply
