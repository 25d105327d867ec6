// Status and Result<T>: errors as values across outbox APIs.
//
// The relay's central decision — retry, set aside, stop — is data, so every
// fallible call returns a Status (or a Result<T>) that says what went wrong, in
// words an operator can act on, and whether trying again may help.
//
// Thread-safety: plain values; safe to copy and share like std::string.
#ifndef OUTBOX_STATUS_H_
#define OUTBOX_STATUS_H_

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace outbox {

enum class Code {
  kOk = 0,
  kInvalidArgument,     // the caller's input breaks the contract; never retried
  kAlreadyExists,       // e.g. a dedup key that is already enqueued
  kNotFound,
  kFailedPrecondition,  // e.g. enqueue outside an open transaction
  kFenced,              // a transition refused because another claim holds the row
  kUnavailable,         // database or broker unreachable; retry with backoff
  kDeadlineExceeded,
  kInternal,            // a bug or an unexpected server answer
  // The server refused this role or user: a missing privilege, a failed
  // authentication. A configuration error, not an outage; not retryable (the
  // caller cannot fix it), though a daemon such as the relay keeps trying with
  // backoff until an operator grants the privilege.
  kPermissionDenied,
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg), false);
  }
  static Status AlreadyExists(std::string msg) {
    return Status(Code::kAlreadyExists, std::move(msg), false);
  }
  static Status NotFound(std::string msg) {
    return Status(Code::kNotFound, std::move(msg), false);
  }
  static Status FailedPrecondition(std::string msg) {
    return Status(Code::kFailedPrecondition, std::move(msg), false);
  }
  static Status Fenced(std::string msg) { return Status(Code::kFenced, std::move(msg), false); }
  static Status Unavailable(std::string msg) {
    return Status(Code::kUnavailable, std::move(msg), true);
  }
  static Status DeadlineExceeded(std::string msg) {
    return Status(Code::kDeadlineExceeded, std::move(msg), true);
  }
  static Status PermissionDenied(std::string msg) {
    return Status(Code::kPermissionDenied, std::move(msg), false);
  }
  static Status Internal(std::string msg, bool retryable = false) {
    return Status(Code::kInternal, std::move(msg), retryable);
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  // True when the same call may succeed later without any change by the caller.
  bool retryable() const { return retryable_; }
  const std::string& message() const { return message_; }
  // "Unavailable: connection refused (retryable)" — for logs and test output.
  std::string ToString() const;

 private:
  Status(Code code, std::string msg, bool retryable)
      : code_(code), retryable_(retryable), message_(std::move(msg)) {}

  Code code_ = Code::kOk;
  bool retryable_ = false;
  std::string message_;
};

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result built from an OK Status has no value");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // REQUIRES: ok()
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace outbox

#define OUTBOX_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::outbox::Status outbox_status_ = (expr); \
    if (!outbox_status_.ok()) return outbox_status_; \
  } while (0)

#endif  // OUTBOX_STATUS_H_
