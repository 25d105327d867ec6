#include "pgoutput.h"

#include <cstdio>

#include "headers_json.h"

namespace outbox::pg::pgoutput {
namespace {

// A bounds-checked big-endian reader over one message.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool U8(std::uint8_t* v) {
    if (b_.size() - pos_ < 1) return false;
    *v = static_cast<std::uint8_t>(b_[pos_++]);
    return true;
  }
  bool U16(std::uint16_t* v) {
    std::uint64_t x;
    if (!Int(2, &x)) return false;
    *v = static_cast<std::uint16_t>(x);
    return true;
  }
  bool U32(std::uint32_t* v) {
    std::uint64_t x;
    if (!Int(4, &x)) return false;
    *v = static_cast<std::uint32_t>(x);
    return true;
  }
  bool U64(std::uint64_t* v) { return Int(8, v); }
  bool I64(std::int64_t* v) {
    std::uint64_t x;
    if (!Int(8, &x)) return false;
    *v = static_cast<std::int64_t>(x);
    return true;
  }
  bool CString(std::string* s) {
    const auto end = b_.find('\0', pos_);
    if (end == std::string_view::npos) return false;
    s->assign(b_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }
  bool Bytes(std::size_t n, std::string_view* out) {
    if (b_.size() - pos_ < n) return false;
    *out = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  std::string_view Rest() const { return b_.substr(pos_); }

 private:
  bool Int(int n, std::uint64_t* v) {
    if (b_.size() - pos_ < static_cast<std::size_t>(n)) return false;
    std::uint64_t x = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
      x = (x << 8) | static_cast<std::uint8_t>(b_[pos_ + i]);
    }
    pos_ += static_cast<std::size_t>(n);
    *v = x;
    return true;
  }
  std::string_view b_;
  std::size_t pos_ = 0;
};

// PostgreSQL µs since 2000 -> Unix µs, for times a system_clock can hold
// (before ~2262); false for anything else (a corrupt or hostile stream).
bool ToUnixUs(std::int64_t pg_us, std::int64_t* unix_us) {
  constexpr std::int64_t kMaxUnixUs = 9'000'000'000'000'000;  // ~2255
  if (pg_us < -kPgEpochUnixUs || pg_us > kMaxUnixUs - kPgEpochUnixUs) return false;
  *unix_us = pg_us + kPgEpochUnixUs;
  return true;
}

Status Malformed(std::string_view what) {
  return Status::Internal("replication stream: malformed " + std::string(what));
}

void PutU64(std::string* s, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t BigEndian(std::string_view b) {
  std::uint64_t x = 0;
  for (char c : b) x = (x << 8) | static_cast<std::uint8_t>(c);
  return x;
}

}  // namespace

Result<Frame> DecodeFrame(std::string_view bytes) {
  Reader r(bytes);
  std::uint8_t tag;
  if (!r.U8(&tag)) return Malformed("frame (empty)");
  if (tag == 'w') {
    XLogData x;
    if (!r.U64(&x.start) || !r.U64(&x.wal_end) || !r.I64(&x.send_time_us) ||
        !ToUnixUs(x.send_time_us, &x.send_time_us)) {
      return Malformed("XLogData header");
    }
    x.data = r.Rest();
    return Frame(x);
  }
  if (tag == 'k') {
    Keepalive k;
    std::uint8_t reply;
    if (!r.U64(&k.wal_end) || !r.I64(&k.send_time_us) || !r.U8(&reply) ||
        !ToUnixUs(k.send_time_us, &k.send_time_us)) {
      return Malformed("keepalive");
    }
    k.reply_requested = reply != 0;
    return Frame(k);
  }
  return Malformed("frame (tag " + std::to_string(static_cast<int>(tag)) + ")");
}

std::string StatusUpdate(std::uint64_t lsn, std::int64_t now_unix_us, bool reply_requested) {
  std::string s;
  s.reserve(34);
  s.push_back('r');
  PutU64(&s, lsn);  // written
  PutU64(&s, lsn);  // flushed: what the slot's confirmed position follows
  PutU64(&s, lsn);  // applied
  PutU64(&s, static_cast<std::uint64_t>(now_unix_us - kPgEpochUnixUs));
  s.push_back(reply_requested ? 1 : 0);
  return s;
}

Result<Message> DecodeMessage(std::string_view bytes) {
  Reader r(bytes);
  std::uint8_t tag;
  if (!r.U8(&tag)) return Malformed("message (empty)");
  switch (tag) {
    case 'B': {
      Begin b;
      std::uint32_t xid;
      if (!r.U64(&b.final_lsn) || !r.I64(&b.commit_time_us) || !r.U32(&xid) ||
          !ToUnixUs(b.commit_time_us, &b.commit_time_us)) {
        return Malformed("Begin");
      }
      return Message(b);
    }
    case 'C': {
      Commit c;
      std::uint8_t flags;
      if (!r.U8(&flags) || !r.U64(&c.commit_lsn) || !r.U64(&c.end_lsn) ||
          !r.I64(&c.commit_time_us) || !ToUnixUs(c.commit_time_us, &c.commit_time_us)) {
        return Malformed("Commit");
      }
      return Message(c);
    }
    case 'R': {
      Relation rel;
      std::uint8_t identity;
      std::uint16_t n;
      if (!r.U32(&rel.id) || !r.CString(&rel.nspname) || !r.CString(&rel.relname) ||
          !r.U8(&identity) || !r.U16(&n)) {
        return Malformed("Relation");
      }
      for (std::uint16_t i = 0; i < n; ++i) {
        Column c;
        std::uint8_t flags;
        std::uint32_t typmod;
        if (!r.U8(&flags) || !r.CString(&c.name) || !r.U32(&c.type_oid) || !r.U32(&typmod)) {
          return Malformed("Relation column");
        }
        rel.columns.push_back(std::move(c));
      }
      return Message(std::move(rel));
    }
    case 'I': {
      Insert ins;
      std::uint8_t n_tag;
      std::uint16_t n;
      if (!r.U32(&ins.relation) || !r.U8(&n_tag) || n_tag != 'N' || !r.U16(&n)) {
        return Malformed("Insert");
      }
      ins.values.reserve(n);
      for (std::uint16_t i = 0; i < n; ++i) {
        std::uint8_t kind;
        if (!r.U8(&kind)) return Malformed("Insert column");
        if (kind == 'n') {
          ins.values.emplace_back(std::nullopt);
          continue;
        }
        if (kind != 'b' && kind != 't') return Malformed("Insert column kind");
        std::uint32_t len;
        std::string_view v;
        if (!r.U32(&len) || !r.Bytes(len, &v)) return Malformed("Insert column value");
        // Text-format columns would need each type's parser; the stream asks
        // for binary, so a text column means a server we do not understand.
        if (kind == 't') return Malformed("Insert column (text format; binary was asked for)");
        ins.values.emplace_back(v);
      }
      return Message(std::move(ins));
    }
    case 'M': {
      LogicalMessage m;
      std::uint8_t flags;
      std::uint32_t len;
      std::string_view content;
      if (!r.U8(&flags) || !r.U64(&m.lsn) || !r.CString(&m.prefix) || !r.U32(&len) ||
          !r.Bytes(len, &content)) {
        return Malformed("Message");
      }
      m.transactional = (flags & 1) != 0;
      return Message(std::move(m));
    }
    default:
      return Message(Other{static_cast<char>(tag)});
  }
}

Result<OutboxLayout> LayoutOf(const Relation& rel) {
  OutboxLayout l;
  const std::pair<const char*, int*> wanted[] = {
      {"seq", &l.seq},           {"event_id", &l.event_id},
      {"aggregate_type", &l.aggregate_type}, {"aggregate_id", &l.aggregate_id},
      {"event_type", &l.event_type}, {"payload", &l.payload},
      {"headers", &l.headers},   {"dedup_key", &l.dedup_key},
      {"created_at", &l.created_at}};
  for (std::size_t i = 0; i < rel.columns.size(); ++i) {
    for (const auto& [name, slot] : wanted) {
      if (rel.columns[i].name == name) *slot = static_cast<int>(i);
    }
  }
  for (const auto& [name, slot] : wanted) {
    if (*slot < 0) {
      return Status::FailedPrecondition("replication stream: table " + rel.nspname + "." +
                                        rel.relname + " has no column " + name +
                                        " (is the publication on the outbox table?)");
    }
  }
  return l;
}

Result<ClaimedEvent> EventOf(const Insert& ins, const OutboxLayout& l) {
  auto col = [&](int i) -> Value {
    return static_cast<std::size_t>(i) < ins.values.size() ? ins.values[static_cast<std::size_t>(i)]
                                                           : Value();
  };
  auto required = [&](int i, const char* name, std::string_view* out) -> Status {
    Value v = col(i);
    if (!v) return Malformed(std::string("outbox row (") + name + " is NULL or missing)");
    *out = *v;
    return Status::Ok();
  };
  std::string_view seq, id, type, agg, etype, payload, headers, created;
  OUTBOX_RETURN_IF_ERROR(required(l.seq, "seq", &seq));
  OUTBOX_RETURN_IF_ERROR(required(l.event_id, "event_id", &id));
  OUTBOX_RETURN_IF_ERROR(required(l.aggregate_type, "aggregate_type", &type));
  OUTBOX_RETURN_IF_ERROR(required(l.aggregate_id, "aggregate_id", &agg));
  OUTBOX_RETURN_IF_ERROR(required(l.event_type, "event_type", &etype));
  OUTBOX_RETURN_IF_ERROR(required(l.payload, "payload", &payload));
  OUTBOX_RETURN_IF_ERROR(required(l.headers, "headers", &headers));
  OUTBOX_RETURN_IF_ERROR(required(l.created_at, "created_at", &created));
  if (seq.size() != 8 || id.size() != 16 || created.size() != 8) {
    return Malformed("outbox row (seq, event_id or created_at of the wrong size)");
  }
  // jsonb's binary form: a version byte (1), then the text.
  if (headers.empty() || headers[0] != 1) return Malformed("outbox row (headers jsonb version)");
  ClaimedEvent ce;
  ce.ticket = Ticket{static_cast<std::int64_t>(BigEndian(seq)), 0};
  char uuid[37];
  const auto* u = reinterpret_cast<const unsigned char*>(id.data());
  std::snprintf(uuid, sizeof uuid,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
                u[15]);
  ce.event_id = uuid;
  ce.event.aggregate_type.assign(type);
  ce.event.aggregate_id.assign(agg);
  ce.event.event_type.assign(etype);
  ce.event.payload.assign(payload);
  auto parsed = store_common::ParseHeadersJson(std::string(headers.substr(1)));
  if (!parsed.ok()) return parsed.status();
  ce.event.headers = std::move(parsed).value();
  if (Value d = col(l.dedup_key)) ce.event.dedup_key = std::string(*d);
  std::int64_t created_us = 0;
  if (!ToUnixUs(static_cast<std::int64_t>(BigEndian(created)), &created_us)) {
    return Malformed("outbox row (created_at out of range)");
  }
  ce.created_at = std::chrono::system_clock::time_point(std::chrono::microseconds(created_us));
  return ce;
}

}  // namespace outbox::pg::pgoutput
