// outbox-consumer's effects (handlers.h).
#include "handlers.h"

#include <httplib.h>
#include <mysql.h>
#include <strings.h>

#include <nlohmann/json.hpp>

namespace outbox::consumer_daemon {
namespace {

constexpr std::size_t kErrorBodyBytes = 200;

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string HeadersJson(const InboundMessage& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : m.headers) j[name] = value;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A header that may go on the request as it is: a token name, a value without
// line breaks, and not one that frames the request or is ours.
bool Forwardable(const std::string& name, const std::string& value) {
  if (name.empty() || value.find_first_of("\r\n") != std::string::npos) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) {
      return false;
    }
  }
  for (const char* own : {"content-length", "transfer-encoding", "host", "connection", "keep-alive",
                          "upgrade", "te", "trailer", "idempotency-key", "content-type"}) {
    if (strcasecmp(name.c_str(), own) == 0) return false;
  }
  return strncasecmp(name.c_str(), "outbox-topic", 12) != 0 &&
         strncasecmp(name.c_str(), "outbox-partition", 16) != 0 &&
         strncasecmp(name.c_str(), "outbox-offset", 13) != 0 &&
         strncasecmp(name.c_str(), "outbox-key", 10) != 0;
}

// MariaDB: a failed statement's class. The errors that carry a general
// SQLSTATE (HY000) but pass on a later try are named by number.
HandlerResult MariaDbFailure(MYSQL* c, const std::string& what) {
  const unsigned no = mysql_errno(c);
  const std::string state = mysql_sqlstate(c);
  std::string m = what + ": " + mysql_error(c) + " [SQLSTATE " + state + ", error " +
                  std::to_string(no) + "]";
  const bool transient = no == 1205 /* lock wait timeout */ || no == 1213 /* deadlock */ ||
                         no == 1317 /* interrupted */ || no == 1969 /* statement timeout */ ||
                         no == 2006 || no == 2013 /* connection lost */ ||
                         SqlHandlerErrorClass(state) == ErrorClass::kTransient;
  return transient ? HandlerResult::Transient(std::move(m)) : HandlerResult::Permanent(std::move(m));
}

std::string MariaDbQuoted(MYSQL* c, const std::string& s) {
  std::string out(s.size() * 2 + 1, '\0');
  const unsigned long n = mysql_real_escape_string(c, out.data(), s.data(), s.size());
  out.resize(n);
  return "'" + out + "'";
}

class HttpPoster final : public HttpEffect {
 public:
  HttpPoster(const HandlerConfig& h, std::string origin, std::string path)
      : url_(h.http), path_(std::move(path)), dedup_(MakeDedup(h.dedup)), client_(origin) {
    client_.set_keep_alive(true);
    client_.set_tcp_nodelay(true);
    client_.set_connection_timeout(h.timeout);
    client_.set_read_timeout(h.timeout);
    client_.set_write_timeout(h.timeout);
    if (origin.rfind("https", 0) == 0) client_.enable_server_certificate_verification(true);
  }

  HandlerResult Post(const InboundMessage& m) override {
    auto key = dedup_(m);  // the engine computed it already: it is there
    httplib::Headers headers;
    for (const auto& [name, value] : m.headers) {
      if (Forwardable(name, value)) headers.emplace(name, value);
    }
    headers.emplace("Idempotency-Key", key.ok() ? *key : "");
    headers.emplace("Outbox-Topic", m.topic);
    headers.emplace("Outbox-Partition", std::to_string(m.partition));
    headers.emplace("Outbox-Offset", std::to_string(m.offset));
    if (!m.key_is_null && m.key.find_first_of("\r\n") == std::string::npos) {
      headers.emplace("Outbox-Key", m.key);
    }
    const std::string* type = m.Header("content-type");
    if (!type) type = m.Header("Content-Type");
    const std::string content_type =
        type && type->find_first_of("\r\n") == std::string::npos ? *type : "application/octet-stream";
    httplib::Result r = client_.Post(path_, headers, m.payload, content_type);
    if (!r) {
      return HandlerResult::Transient("POST " + url_ + ": " + httplib::to_string(r.error()));
    }
    const int status = r->status;
    if (status >= 200 && status < 300) return HandlerResult::Ok();
    std::string m_text = "HTTP " + std::to_string(status) + " from POST " + url_ + ": " +
                         r->body.substr(0, kErrorBodyBytes);
    if (status == 408 || status == 429 || status >= 500) return HandlerResult::Transient(m_text);
    return HandlerResult::Permanent(m_text);
  }

 private:
  std::string url_, path_;
  DedupKeyFn dedup_;
  httplib::Client client_;
};

}  // namespace

DedupKeyFn MakeDedup(const DedupRule& rule) {
  switch (rule.kind) {
    case DedupRule::Kind::kHeader:
      return [name = rule.arg](const InboundMessage& m) -> Result<std::string> {
        const std::string* v = m.Header(name);
        if (!v || v->empty()) return Status::InvalidArgument("dedup: message has no " + name + " header");
        return *v;
      };
    case DedupRule::Kind::kPayload:
      return [pointer = rule.arg](const InboundMessage& m) -> Result<std::string> {
        const std::string what = "dedup payload:" + pointer;
        nlohmann::json doc = nlohmann::json::parse(m.payload, nullptr, /*allow_exceptions=*/false);
        if (doc.is_discarded()) return Status::InvalidArgument(what + ": the payload is not JSON");
        const nlohmann::json::json_pointer p(pointer);
        if (!doc.contains(p)) return Status::InvalidArgument(what + ": no such member");
        const nlohmann::json& v = doc.at(p);
        if (v.is_string()) return v.get<std::string>();
        if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
        return Status::InvalidArgument(what + ": not a string or an integer");
      };
    default:
      return DedupByEventId();
  }
}

std::vector<std::optional<std::string>> SqlParams(const InboundMessage& m) {
  std::vector<std::optional<std::string>> p(4);
  if (!m.payload_is_null) p[0] = "\\x" + Hex(m.payload);
  p[1] = HeadersJson(m);
  if (const std::string* id = m.EventId()) p[2] = *id;
  if (!m.key_is_null) p[3] = m.key;
  return p;
}

SinkHandler PostgresSqlHandler(std::string sql) {
  return [sql = std::move(sql)](const InboundMessage& m, StatementSink& sink) {
    // PostgreSQL text cannot hold a NUL byte, and libpq would cut the key at it:
    // the effect would run with another key. Refused instead (MariaDB keeps it).
    if (m.key.find('\0') != std::string::npos) {
      return HandlerResult::Permanent(
          "the message key holds a NUL byte, which PostgreSQL text ($4) cannot hold");
    }
    sink.Add(sql, SqlParams(m), {17 /* bytea */, 3802 /* jsonb */, 25 /* text */, 25 /* text */});
    return HandlerResult::Ok();
  };
}

SqlTemplate SplitPlaceholders(const std::string& sql) {
  SqlTemplate t;
  t.pieces.emplace_back();
  char quote = 0;
  for (std::size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (quote) {
      t.pieces.back() += c;
      if (c == '\\' && i + 1 < sql.size()) {
        t.pieces.back() += sql[++i];
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '\'' || c == '"' || c == '`') quote = c;
    if (c == '$' && i + 1 < sql.size() && sql[i + 1] >= '1' && sql[i + 1] <= '4' &&
        (i + 2 >= sql.size() || !std::isdigit(static_cast<unsigned char>(sql[i + 2])))) {
      t.params.push_back(static_cast<std::size_t>(sql[i + 1] - '1'));
      t.pieces.emplace_back();
      ++i;
      continue;
    }
    t.pieces.back() += c;
  }
  return t;
}

MariaDbHandler MariaDbSqlHandler(std::string sql) {
  return [t = SplitPlaceholders(sql)](const InboundMessage& m, MYSQL* c) -> HandlerResult {
    const auto params = SqlParams(m);
    std::string q = t.pieces[0];
    for (std::size_t i = 0; i < t.params.size(); ++i) {
      const std::size_t p = t.params[i];
      if (!params[p]) {
        q += "NULL";
      } else if (p == 0) {
        q += m.payload.empty() ? "''" : "X'" + Hex(m.payload) + "'";
      } else {
        q += MariaDbQuoted(c, *params[p]);
      }
      q += t.pieces[i + 1];
    }
    if (mysql_real_query(c, q.data(), q.size()) != 0) return MariaDbFailure(c, "handler sql");
    for (;;) {  // a CALL returns its results and a status; every one is read
      if (MYSQL_RES* r = mysql_store_result(c)) mysql_free_result(r);
      else if (mysql_errno(c) != 0) return MariaDbFailure(c, "handler sql");
      const int next = mysql_next_result(c);
      if (next > 0) return MariaDbFailure(c, "handler sql");
      if (next < 0) break;
    }
    return HandlerResult::Ok();
  };
}

Result<std::unique_ptr<HttpEffect>> HttpEffect::Create(const HandlerConfig& h) {
  const auto scheme_end = h.http.find("://");
  const auto slash = h.http.find('/', scheme_end + 3);
  const std::string origin = h.http.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/" : h.http.substr(slash);
  return std::unique_ptr<HttpEffect>(new HttpPoster(h, origin, path));
}

}  // namespace outbox::consumer_daemon
