#include "plan.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <set>

#include "outbox/event.h"

namespace outbox::inbox_internal {

std::pair<std::string, int> SplitRetry(const std::string& topic) {
  auto pos = topic.rfind(".retry.");
  if (pos == std::string::npos) return {topic, 0};
  const std::string digits = topic.substr(pos + 7);
  if (digits.empty() || digits.size() > 4 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return {topic, 0};
  }
  const int n = std::atoi(digits.c_str());
  if (n <= 0) return {topic, 0};
  return {topic.substr(0, pos), n};
}

Result<std::string> DedupKey(const DedupKeyFn& dedup, const InboundMessage& m) {
  Result<std::string> k = Status::Internal("no dedup key function");
  try {
    k = dedup(m);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("dedup key function threw: ") + e.what());
  } catch (...) {
    return Status::InvalidArgument("dedup key function threw a non-standard exception");
  }
  if (!k.ok()) return Status::InvalidArgument("no dedup key: " + k.status().message());
  if (k->empty()) return Status::InvalidArgument("no dedup key: empty");
  if (!IsValidText(*k)) {
    return Status::InvalidArgument("dedup key is not valid UTF-8 text (or holds a NUL byte)");
  }
  return k;
}

Intake PlanIntake(std::span<const InboundMessage> messages, std::int64_t now_ms,
                  const DedupKeyFn& dedup, const std::string& group) {
  Intake in;
  in.outcomes.resize(messages.size());
  in.taken.assign(messages.size(), false);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const InboundMessage& m = messages[i];
    TopicPartition tp{m.topic, m.partition};
    if (in.pauses.count(tp)) continue;  // behind a held message of its partition
    in.first_offsets.emplace(tp, m.offset);
    if (const std::string* owner = m.Header(kGroup); owner && !group.empty() && *owner != group) {
      in.taken[i] = true;  // another group's copy: not ours to apply, wait for or count
      ++in.other_groups;
      continue;
    }
    if (SplitRetry(m.topic).second > 0) {
      const std::string* due = m.Header(kDueAt);
      const std::int64_t due_ms = due ? std::atoll(due->c_str()) : 0;
      if (due_ms > now_ms) {
        in.pauses[tp] = {m.offset, due_ms};
        continue;
      }
    }
    in.taken[i] = true;
    Result<std::string> key = DedupKey(dedup, m);
    if (!key.ok()) {
      in.outcomes[i] = MessageOutcome{Outcome::kPermanent, key.status().message()};
      continue;
    }
    in.apply.push_back(i);
    in.keys.push_back(std::move(key).value());
  }
  return in;
}

std::string CutUtf8(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t n = max_bytes;
  // Step back over continuation bytes so a multi-byte character is not split.
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

std::string FirstLine(const std::string& text, std::size_t max_bytes) {
  std::string line = text.substr(0, text.find_first_of("\r\n"));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
  return CutUtf8(line, max_bytes);
}

std::string OrderKey(const InboundMessage& m) {
  if (IsValidText(m.key)) return m.key;
  static const char kHex[] = "0123456789abcdef";
  std::string out = "hex:";
  for (char ch : m.key) {
    const auto c = static_cast<unsigned char>(ch);
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

OutboundMessage FailureCopy(const InboundMessage& m, const MessageOutcome& o, int attempt,
                            const std::string& now_rfc3339) {
  OutboundMessage out;
  out.key = m.key;
  out.key_is_null = m.key_is_null;
  out.payload = m.payload;
  out.payload_is_null = m.payload_is_null;
  out.headers = m.headers;
  if (!m.Header(kOrigTopic)) {
    out.headers[kOrigTopic] = m.topic;
    out.headers[kOrigPartition] = std::to_string(m.partition);
    out.headers[kOrigOffset] = std::to_string(m.offset);
    out.headers[kFirstFailure] = now_rfc3339;
  }
  out.headers[kAttempt] = std::to_string(attempt);
  out.headers[kErrClass] = o.outcome == Outcome::kPermanent ? "permanent" : "transient";
  out.headers[kErrMessage] = FirstLine(o.error, kErrMessageMaxBytes);
  out.headers[kErrDetail] = CutUtf8(o.error, kErrDetailMaxBytes);
  out.headers.erase(kDueAt);
  return out;
}

std::size_t ForwardBytes(const OutboundMessage& m) {
  constexpr std::size_t kHeaderFraming = 8;  // two varint lengths and slack
  std::size_t n = m.key.size() + (m.payload_is_null ? 0 : m.payload.size());
  for (const auto& [k, v] : m.headers) n += k.size() + v.size() + kHeaderFraming;
  return n;
}

bool BoundForward(OutboundMessage& out, std::size_t max_bytes, const std::string& dlt_topic) {
  const std::size_t whole = ForwardBytes(out);
  if (whole <= max_bytes) return false;
  // The diagnostic detail goes first: without it the copy may go whole.
  out.headers.erase(kErrDetail);
  if (ForwardBytes(out) <= max_bytes) return false;
  const std::size_t value_bytes = out.payload_is_null ? 0 : out.payload.size();
  out.topic = dlt_topic;
  out.headers.erase(kDueAt);
  out.headers[kOrigSize] = std::to_string(value_bytes);
  const std::string why = " to fit forward_max_bytes=" + std::to_string(max_bytes) + " (the copy was " +
                          std::to_string(whole) + " bytes)";
  // The note as long as it can get (the kept size has at most as many digits).
  out.headers[kTruncated] = "value cut to " + std::to_string(value_bytes) + " bytes" + why;
  const std::string value = std::move(out.payload);
  out.payload.clear();
  const std::size_t rest = ForwardBytes(out);
  if (rest <= max_bytes) {
    const std::size_t keep = std::min(value.size(), max_bytes - rest);
    out.payload = value.substr(0, keep);
    out.headers[kTruncated] = "value cut to " + std::to_string(keep) + " bytes" + why;
    return true;
  }
  // The rest alone is too large (the event's headers, or the key): keep only
  // the consumer's own headers and a short event id, each at most 1,000 bytes
  // (an upstream copy may have carried long ones), and a key of 256 bytes.
  static const std::set<std::string> kKept = {kOrigTopic, kOrigPartition, kOrigOffset, kErrClass,
                                              kErrMessage, kAttempt,      kFirstFailure, kOrigSize};
  for (auto it = out.headers.begin(); it != out.headers.end();) {
    const bool keep = kKept.count(it->first) > 0 || (it->first == "outbox-event-id" && it->second.size() <= 256);
    if (keep) it->second = CutUtf8(it->second, 1000);
    it = keep ? std::next(it) : out.headers.erase(it);
  }
  std::string parts = "value left out, headers other than the event id and the consumer's left out";
  if (out.key.size() > 256) {
    out.key = CutUtf8(out.key, 256);
    parts += ", key cut to 256 bytes";
  }
  out.headers[kTruncated] = parts + why;
  return true;
}

Forwards PlanForwards(std::span<const InboundMessage> messages,
                      std::span<const std::optional<MessageOutcome>> outcomes,
                      const ConsumerOptions& options, std::int64_t now_ms,
                      const std::string& now_rfc3339) {
  Forwards f;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (!outcomes[i]) continue;
    const MessageOutcome& o = *outcomes[i];
    if (o.outcome != Outcome::kPermanent && o.outcome != Outcome::kTransient) continue;
    const InboundMessage& m = messages[i];
    auto [base, retry_n] = SplitRetry(m.topic);
    const int attempt = retry_n + 1;
    OutboundMessage out = FailureCopy(m, o, attempt, now_rfc3339);
    if (!options.group.empty()) out.headers[kGroup] = options.group;
    ForwardKind kind;
    if (o.outcome == Outcome::kTransient &&
        static_cast<std::size_t>(attempt) <= options.retry_delays.size()) {
      out.topic = base + ".retry." + std::to_string(attempt);
      out.headers[kDueAt] = std::to_string(
          now_ms + options.retry_delays[static_cast<std::size_t>(attempt - 1)].count());
      kind = ForwardKind::kRetry;
    } else {
      out.topic = base + options.dlt_suffix;
      kind = ForwardKind::kDeadLetter;
    }
    if (BoundForward(out, options.forward_max_bytes, base + options.dlt_suffix)) {
      kind = ForwardKind::kDeadLetter;  // a cut copy is not retried
    }
    f.messages.push_back(std::move(out));
    f.kinds.push_back(kind);
    f.classes.push_back(o.outcome);
  }
  return f;
}

std::vector<ParkedMessage> PlanParking(std::span<const InboundMessage> messages, Intake& in,
                                       const std::vector<std::string>& dedup_keys,
                                       const std::vector<bool>& pre_parked,
                                       const ConsumerOptions& options) {
  std::vector<ParkedMessage> park;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (!in.taken[i] || !in.outcomes[i]) continue;
    MessageOutcome& o = *in.outcomes[i];
    ParkedMessage p;
    if (pre_parked[i] || o.outcome == Outcome::kHeld) {
      p.attempts = 0;  // waits behind its key's head; due when it is the head
    } else if (o.outcome == Outcome::kTransient && !options.retry_delays.empty()) {
      p.attempts = 1;
      p.last_error = o.error;
      p.delay = options.retry_delays[0];
    } else {
      continue;
    }
    p.order_key = OrderKey(messages[i]);
    p.dedup_key = dedup_keys[i];
    p.message = messages[i];
    park.push_back(std::move(p));
    o = {Outcome::kHeld, ""};
  }
  return park;
}

ParkedPlan PlanParked(std::span<const ParkedMessage> due, std::span<const MessageOutcome> outcomes,
                      const ConsumerOptions& options, const std::string& now_rfc3339) {
  ParkedPlan plan;
  for (std::size_t i = 0; i < due.size(); ++i) {
    const ParkedMessage& p = due[i];
    const MessageOutcome& o = outcomes[i];
    switch (o.outcome) {
      case Outcome::kApplied:
      case Outcome::kDuplicate:
        (o.outcome == Outcome::kApplied ? plan.applied : plan.duplicates) += 1;
        plan.unpark.push_back(p.id);
        break;
      case Outcome::kHeld:
        break;
      case Outcome::kTransient:
        if (static_cast<std::size_t>(p.attempts) < options.retry_delays.size()) {
          plan.retries.push_back(
              {p.id, p.attempts + 1, o.error, options.retry_delays[static_cast<std::size_t>(p.attempts)]});
          break;
        }
        [[fallthrough]];
      case Outcome::kPermanent: {
        OutboundMessage out = FailureCopy(p.message, o, p.attempts + 1, now_rfc3339);
        if (!options.group.empty()) out.headers[kGroup] = options.group;
        out.topic = SplitRetry(p.message.topic).first + options.dlt_suffix;
        (void)BoundForward(out, options.forward_max_bytes, out.topic);
        plan.dead_letters.push_back(std::move(out));
        plan.dead_ids.push_back(p.id);
        plan.dead_classes.push_back(o.outcome);
        break;
      }
    }
  }
  return plan;
}

namespace {

// ApplyBySplitting's state: the outcomes so far and the order keys held.
class Splitter {
 public:
  Splitter(std::size_t count, std::span<const std::string> order_keys, const ApplyFn& apply)
      : order_keys_(order_keys), apply_(apply), out_(count) {}

  // Applies the messages at `idx`, in halves once a part fails; `failed` is
  // the error of the whole part when it is already known.
  Status Part(std::vector<std::size_t> idx, const Status* failed) {
    std::erase_if(idx, [&](std::size_t i) {
      if (order_keys_.empty() || !blocked_.count(order_keys_[i])) return false;
      out_[i] = {Outcome::kHeld, ""};
      return true;
    });
    if (idx.empty()) return Status::Ok();
    Status err = failed ? *failed : Status::Ok();
    if (!failed) {
      auto r = apply_(idx);
      if (r.ok()) {
        applied_any_ = true;
        for (std::size_t j = 0; j < idx.size(); ++j) Set(idx[j], std::move((*r)[j]));
        return Status::Ok();
      }
      err = r.status();
      if (!SplitsOn(err)) return err;
    }
    if (idx.size() == 1) {
      ++failed_alone_;
      Set(idx[0], {Outcome::kTransient, "failed alone (its batch failed twice the same way): " +
                                            err.ToString()});
      return Status::Ok();
    }
    const auto mid = idx.begin() + static_cast<std::ptrdiff_t>(idx.size() / 2);
    OUTBOX_RETURN_IF_ERROR(Part(std::vector<std::size_t>(idx.begin(), mid), nullptr));
    return Part(std::vector<std::size_t>(mid, idx.end()), nullptr);
  }

  bool applied_any() const { return applied_any_; }
  int failed_alone() const { return failed_alone_; }
  std::vector<MessageOutcome> take() { return std::move(out_); }

 private:
  void Set(std::size_t i, MessageOutcome o) {
    const bool blocks = o.outcome == Outcome::kTransient || o.outcome == Outcome::kHeld;
    if (!order_keys_.empty() && blocks) blocked_.insert(order_keys_[i]);
    out_[i] = std::move(o);
  }

  std::span<const std::string> order_keys_;
  const ApplyFn& apply_;
  std::vector<MessageOutcome> out_;
  std::set<std::string> blocked_;
  bool applied_any_ = false;
  int failed_alone_ = 0;
};

}  // namespace

bool SplitsOn(const Status& st) {
  return !st.retryable() && st.code() != Code::kPermissionDenied &&
         st.code() != Code::kFailedPrecondition;
}

Result<std::vector<MessageOutcome>> ApplyBySplitting(std::size_t count,
                                                     std::span<const std::string> order_keys,
                                                     const Status& failed, const ApplyFn& apply) {
  std::vector<std::size_t> all(count);
  for (std::size_t i = 0; i < count; ++i) all[i] = i;
  Splitter splitter(count, order_keys, apply);
  // The whole batch is not tried a third time: it is split at once.
  OUTBOX_RETURN_IF_ERROR(splitter.Part(std::move(all), &failed));
  // Messages held behind a key's failed one were not tried: they say nothing.
  if (!splitter.applied_any() && splitter.failed_alone() > 1) return failed;
  return splitter.take();
}

std::map<TopicPartition, std::int64_t> PlanCommit(std::span<const InboundMessage> messages,
                                                  const std::vector<bool>& taken) {
  std::map<TopicPartition, std::int64_t> next;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (!taken[i]) continue;
    auto& v = next[{messages[i].topic, messages[i].partition}];
    v = std::max(v, messages[i].offset + 1);
  }
  return next;
}

}  // namespace outbox::inbox_internal
