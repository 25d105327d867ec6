// The inbox's apply strategy (apply.h): the passes, the holds, the outcomes.
#include "inbox/apply.h"

#include <set>

#include "core/fault.h"
#include "outbox/event.h"

namespace outbox::inbox_apply {
namespace {

// One call's state across its passes.
class Passes {
 public:
  Passes(InboxSession& s, std::span<const InboundMessage> msgs, std::span<const std::string> keys,
         std::span<const std::string> order_keys, std::vector<bool> todo, std::vector<MessageOutcome>& out,
         std::map<std::size_t, HandlerResult>& failed)
      : s_(s), msgs_(msgs), keys_(keys), order_keys_(order_keys), todo_(std::move(todo)), out_(out),
        failed_(failed) {}

  // Pass 1: one transaction, a savepoint per message. Status error: rolled
  // back, nothing took effect.
  Result<PassEnd> Savepoints() {
    OUTBOX_RETURN_IF_ERROR(s_.Begin());
    auto abort = [&](Status st) -> Result<PassEnd> {
      s_.Rollback();
      return st;
    };
    std::set<std::string> blocked;
    for (std::size_t i = 0; i < msgs_.size(); ++i) {
      if (!todo_[i] || DecidedBefore(i, blocked)) continue;
      if (Status sp = s_.Savepoint(); !sp.ok()) return abort(sp);
      MessageOutcome o{Outcome::kApplied, ""};
      auto fresh = s_.Stamp(msgs_[i], keys_[i]);
      if (!fresh.ok()) {
        if (!Isolable(fresh.status())) return abort(fresh.status());
        o = s_.OwnFailure(fresh.status());
      } else if (!*fresh) {
        o = {Outcome::kDuplicate, ""};
      } else if (HandlerResult hr = s_.RunHandler(msgs_[i]); hr.error != ErrorClass::kNone) {
        o = FromHandler(hr);
        failed_[i] = hr;  // a later pass keeps it, not runs it again
      }
      const bool undo = o.outcome == Outcome::kPermanent || o.outcome == Outcome::kTransient;
      // Undo this message's stamp and writes only.
      if (Status st = undo ? s_.RollbackToSavepoint() : s_.ReleaseSavepoint(); !st.ok()) return abort(st);
      out_[i] = o;
      Block(i, blocked);
    }
    if (Status f = InsideTransaction(); !f.ok()) return abort(f);
    Status st = s_.Commit();
    if (st.ok()) return PassEnd::kCommitted;
    if (!Isolable(st)) return st;
    return PassEnd::kCommitFailed;
  }

  // Pass 2: a transaction per message; a failing COMMIT is that message's own
  // outcome. Status error: the messages before are committed (a redelivery
  // absorbs them), the rest not.
  Status OneByOne() {
    std::set<std::string> blocked;
    for (std::size_t i = 0; i < msgs_.size(); ++i) {
      if (!todo_[i] || DecidedBefore(i, blocked)) continue;
      OUTBOX_RETURN_IF_ERROR(s_.Begin());
      auto fresh = s_.Stamp(msgs_[i], keys_[i]);
      MessageOutcome o{Outcome::kApplied, ""};
      if (!fresh.ok()) {
        s_.Rollback();
        if (!Isolable(fresh.status())) return fresh.status();
        out_[i] = s_.OwnFailure(fresh.status());
        Block(i, blocked);
        continue;
      }
      if (!*fresh) {
        o = {Outcome::kDuplicate, ""};
      } else if (HandlerResult hr = s_.RunHandler(msgs_[i]); hr.error != ErrorClass::kNone) {
        s_.Rollback();
        out_[i] = FromHandler(hr);
        Block(i, blocked);
        continue;
      }
      if (Status f = InsideTransaction(); !f.ok()) {
        s_.Rollback();
        return f;
      }
      out_[i] = o;
      Status st = s_.Commit();
      if (st.ok()) continue;
      if (!Isolable(st)) return st;
      out_[i] = s_.OwnFailure(st);
      out_[i].error = "commit failed: " + out_[i].error;
      Block(i, blocked);
    }
    return Status::Ok();
  }

 private:
  // Ordered mode: message i waits when an earlier message of its order key
  // failed transiently in this pass; a transient failure blocks its key.
  void Block(std::size_t i, std::set<std::string>& blocked) const {
    if (!order_keys_.empty() && out_[i].outcome == Outcome::kTransient) blocked.insert(order_keys_[i]);
  }
  // Message i's outcome is known without running it: held behind its key, or
  // its handler failed in the fast pass (not run twice for one delivery).
  bool DecidedBefore(std::size_t i, std::set<std::string>& blocked) {
    if (!order_keys_.empty() && blocked.count(order_keys_[i])) {
      out_[i] = {Outcome::kHeld, "an earlier message of its order key failed"};
      return true;
    }
    if (auto f = failed_.find(i); f != failed_.end()) {
      out_[i] = FromHandler(f->second);
      Block(i, blocked);
      return true;
    }
    return false;
  }
  static Status InsideTransaction() {
    if (OUTBOX_FAULT(fault::kInboxInsideTransaction)) {
      return Status::Internal("fault point " + std::string(fault::kInboxInsideTransaction), true);
    }
    return Status::Ok();
  }

  InboxSession& s_;
  std::span<const InboundMessage> msgs_;
  std::span<const std::string> keys_, order_keys_;
  const std::vector<bool> todo_;
  std::vector<MessageOutcome>& out_;
  std::map<std::size_t, HandlerResult>& failed_;
};

}  // namespace

bool Isolable(const Status& st) {
  return st.code() != Code::kUnavailable && st.code() != Code::kDeadlineExceeded &&
         st.code() != Code::kPermissionDenied;
}

MessageOutcome FromHandler(const HandlerResult& hr) {
  if (hr.error == ErrorClass::kPermanent) return {Outcome::kPermanent, hr.message};
  return {Outcome::kTransient, hr.error == ErrorClass::kNone ? "handler left its statement failed" : hr.message};
}

Result<std::vector<MessageOutcome>> Apply(InboxSession& session, std::span<const InboundMessage> msgs,
                                          std::span<const std::string> keys,
                                          std::span<const std::string> order_keys, const FastPass& fast) {
  if (keys.size() != msgs.size() || (!order_keys.empty() && order_keys.size() != msgs.size())) {
    return Status::InvalidArgument("inbox apply: one key (and order key) per message is required");
  }
  std::vector<MessageOutcome> out(msgs.size());
  // The engine checks keys; a direct caller may not have: a key the database
  // cannot store would fail the whole batch, so it fails alone here.
  std::vector<bool> todo(msgs.size(), true);
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    if (keys[i].empty() || !IsValidText(keys[i])) {
      out[i] = {Outcome::kPermanent, "dedup key is empty or not valid UTF-8 text"};
      todo[i] = false;
    }
  }
  std::map<std::size_t, HandlerResult> failed;
  PassEnd end = PassEnd::kHandlerFailed;  // without a fast pass: the savepoints first
  if (fast) {
    auto r = fast(todo, out, failed);
    if (!r.ok()) return r.status();
    end = *r;
  }
  Passes passes(session, msgs, keys, order_keys, std::move(todo), out, failed);
  if (end == PassEnd::kCommitted) return out;
  if (end == PassEnd::kHandlerFailed) {
    // The ones before a failed handler run again, their first writes having
    // been rolled back.
    auto r = passes.Savepoints();
    if (!r.ok()) return r.status();
    if (*r == PassEnd::kCommitted) return out;
  }
  // A COMMIT failed: which message's writes broke it is unknown. One
  // transaction per message finds it; the others apply.
  OUTBOX_RETURN_IF_ERROR(passes.OneByOne());
  return out;
}

}  // namespace outbox::inbox_apply
