// Fault points: named places in the relay and the inbox where a test can make
// the process crash, fail or stall, to prove the crash matrix on real processes.
//
// Armed from the environment: OUTBOX_FAULTS="name=action[,name=action...]" where
// action is `crash` (_exit(70), as a SIGKILL would leave things), `abort`,
// `error`, or `delay:MS`; `@N` after the action fires only on the N-th pass
// (e.g. `Inbox::AfterCommitBeforeOffsetCommit=crash@3`); `/TAG` after that
// fires only on passes tagged TAG, and `@N` then counts only those (the relay's
// Relay::AfterPublishBeforeMarkSent is tagged with the event types of the
// batch's acked events: `=crash@1/PaymentAuthorized` crashes on the first batch
// that published one, so a copy of it is certain). Unarmed, a fault point
// costs one relaxed atomic load. Internal (not installed): only builds with the
// CMake option OUTBOX_FAULT_POINTS, a private definition (the dev, asan, tsan
// and `demo` presets turn it on; it is off by default and in the release
// preset), have them; elsewhere OUTBOX_FAULT is `false` and OUTBOX_FAULTS is
// ignored.
//
// The names, in one list (also in docs/testing.md):
//   Relay::AfterClaim                     rows claimed (leased), nothing published
//   Relay::AfterPublishBeforeMarkSent     broker acked, rows not yet marked SENT
//   Relay::MarkSent                       `error`: the mark-sent call fails
//   Relay::MarkFailed                     `error`: the mark-failed call fails
//   Stream::AfterPublish                  cdc: streamed rows acked, not yet marked
//                                         SENT, slot position not confirmed
//   Stream::MarkSent                      cdc: `error`: the stream's mark-sent fails
//   Inbox::InsideTransaction              after the handler ran, before COMMIT
//   Inbox::AfterCommitBeforeOffsetCommit  effect committed, Kafka offset not yet
//
// Thread-safety: safe from any thread.
#ifndef OUTBOX_SRC_CORE_FAULT_H_
#define OUTBOX_SRC_CORE_FAULT_H_

#include <atomic>
#include <span>
#include <string>
#include <string_view>

namespace outbox::fault {

inline constexpr std::string_view kRelayAfterClaim = "Relay::AfterClaim";
inline constexpr std::string_view kRelayAfterPublishBeforeMarkSent =
    "Relay::AfterPublishBeforeMarkSent";
inline constexpr std::string_view kRelayMarkSent = "Relay::MarkSent";
inline constexpr std::string_view kRelayMarkFailed = "Relay::MarkFailed";
inline constexpr std::string_view kStreamAfterPublish = "Stream::AfterPublish";
inline constexpr std::string_view kStreamMarkSent = "Stream::MarkSent";
inline constexpr std::string_view kInboxInsideTransaction = "Inbox::InsideTransaction";
inline constexpr std::string_view kInboxAfterCommitBeforeOffsetCommit =
    "Inbox::AfterCommitBeforeOffsetCommit";

// True once OUTBOX_FAULTS named at least one point (read at first use).
bool AnyArmed();

// Runs the armed action for `name`: crashes, aborts or sleeps as configured.
// Returns true when the action is `error` (the caller fails the operation).
// `tags` describe this pass (an action with `/TAG` ignores passes without it).
bool Hit(std::string_view name, std::span<const std::string> tags = {});

// The cheap check to put in code: `if (OUTBOX_FAULT(kName)) return error;`
#if defined(OUTBOX_FAULT_POINTS) && OUTBOX_FAULT_POINTS
#define OUTBOX_FAULT(name) (::outbox::fault::AnyArmed() && ::outbox::fault::Hit(name))
// `tags` (a std::vector<std::string>) is evaluated only when a point is armed.
#define OUTBOX_FAULT_TAGGED(name, tags) \
  (::outbox::fault::AnyArmed() && ::outbox::fault::Hit(name, tags))
#else
#define OUTBOX_FAULT(name) ((void)(name), false)
#define OUTBOX_FAULT_TAGGED(name, tags) ((void)(name), false)
#endif

}  // namespace outbox::fault

#endif  // OUTBOX_SRC_CORE_FAULT_H_
