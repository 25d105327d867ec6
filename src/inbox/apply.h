// The inbox's apply strategy (InboxStore::Apply), for every store: a batch in
// as few transactions as its failures allow, with ordered mode's holds. The
// stores keep only their SQL, behind InboxSession; this is the one place that
// decides which passes run and what each message's outcome is.
//
//   0. The store's own fast pass, when it has one (PostgreSQL: every stamp and
//      every handler in one pipelined transaction, no savepoints). Committed:
//      done. A handler failed: pass 1, keeping that handler's result (it is
//      not run twice for one delivery). The COMMIT failed: pass 2.
//   1. One transaction, a savepoint per message: a failed handler or stamp
//      undoes its own writes only; the others commit together. MariaDB starts
//      here. The COMMIT failed: pass 2.
//   2. One transaction per message (a deferred constraint or a serialization
//      failure at COMMIT is that message's own outcome).
//
// Ordered mode (order keys given): a message whose order key had a transient
// failure earlier in the same pass is kHeld, not run. A lost connection, a
// timeout or a refused privilege fails the whole call (nothing of the pass
// counts; the engine consumes the batch again). The fault point
// Inbox::InsideTransaction fires before each COMMIT of passes 1 and 2 (a
// store's fast pass fires it itself).
//
// A handler runs at most once per message and call (a pass after the one it
// failed in keeps its result).
//
// Layering: the stores link this (outbox_inbox_apply, core only), the one thing
// of src/inbox they link: the strategy is the inbox's, the SQL the store's.
//
// Thread-safety: a call uses its session alone; one call at a time per session.
#ifndef OUTBOX_SRC_INBOX_APPLY_H_
#define OUTBOX_SRC_INBOX_APPLY_H_

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "outbox/inbox.h"
#include "outbox/status.h"

namespace outbox::inbox_apply {

// One store session's statements, for the passes. Each returns the database's
// error as a Status (a lost connection as kUnavailable).
class InboxSession {
 public:
  virtual ~InboxSession() = default;
  virtual Status Begin() = 0;
  virtual Status Savepoint() = 0;
  // After a message applied or was a copy (a store may keep the savepoint for
  // the next SAVEPOINT to replace).
  virtual Status ReleaseSavepoint() = 0;
  // Undoes what ran since Savepoint(); the transaction goes on.
  virtual Status RollbackToSavepoint() = 0;
  // Inserts the message's stamp; true when it is new; a copy's duplicate is
  // counted here (when the store counts them).
  virtual Result<bool> Stamp(const InboundMessage& m, const std::string& key) = 0;
  // Runs the handler in the open transaction; exceptions become transient.
  virtual HandlerResult RunHandler(const InboundMessage& m) = 0;
  // COMMIT; a failed one has rolled the transaction back.
  virtual Status Commit() = 0;
  virtual void Rollback() = 0;
  // A statement or COMMIT error that is one message's own (isolable): its
  // outcome, by this store's reading of its errors.
  virtual MessageOutcome OwnFailure(const Status& st) const = 0;
};

// How a pass over the batch ended when it did not return an error.
enum class PassEnd { kCommitted, kHandlerFailed, kCommitFailed };

// A store's fast pass: sets the outcome of each message in `todo` it decided,
// and in `failed` the handler results that failed (kHandlerFailed; kept by the
// next pass), having rolled back whatever did not commit.
using FastPass = std::function<Result<PassEnd>(const std::vector<bool>& todo, std::vector<MessageOutcome>& out,
                                               std::map<std::size_t, HandlerResult>& failed)>;

// Whether an error is one message's own rather than the session's: anything
// but a lost connection, a timeout or a refused privilege.
bool Isolable(const Status& st);
// A handler's failure as an outcome.
MessageOutcome FromHandler(const HandlerResult& hr);

// InboxStore::Apply's contract (inbox.h): one outcome per message. Keys that
// are empty or not UTF-8 fail alone (kPermanent) before anything runs.
// REQUIRES: keys.size() == msgs.size(); order_keys empty or of that size.
Result<std::vector<MessageOutcome>> Apply(InboxSession& session, std::span<const InboundMessage> msgs,
                                          std::span<const std::string> keys,
                                          std::span<const std::string> order_keys,
                                          const FastPass& fast = nullptr);

}  // namespace outbox::inbox_apply

#endif  // OUTBOX_SRC_INBOX_APPLY_H_
