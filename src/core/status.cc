#include "outbox/status.h"

namespace outbox {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kNotFound: return "NotFound";
    case Code::kFailedPrecondition: return "FailedPrecondition";
    case Code::kFenced: return "Fenced";
    case Code::kUnavailable: return "Unavailable";
    case Code::kDeadlineExceeded: return "DeadlineExceeded";
    case Code::kInternal: return "Internal";
    case Code::kPermissionDenied: return "PermissionDenied";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  s += ": ";
  s += message_;
  if (retryable_) s += " (retryable)";
  return s;
}

}  // namespace outbox
