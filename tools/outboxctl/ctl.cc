#include "ctl.h"

#include <algorithm>
#include <iostream>

#include "outbox/mariadb.h"
#include "outbox/postgres.h"

namespace outbox::ctl {

using nlohmann::json;

int Usage(const std::string& error) {
  std::cerr << "outboxctl: " << error << "\nrun `outboxctl --help` for usage\n";
  return kExitUsage;
}

int Fail(const std::string& msg, bool json_out) {
  if (json_out) std::cout << json{{"ok", false}, {"error", msg}}.dump() << "\n";
  std::cerr << "outboxctl: " << msg << "\n";
  return kExitFailed;
}
int Fail(const outbox::Status& st, bool json_out) { return Fail(st.ToString(), json_out); }

std::string Text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

void PrintRows(const json& rows, const std::vector<std::string>& cols) {
  auto cell = [](const json& r, const std::string& c) {
    return r.contains(c) && !r[c].is_null() ? Text(r[c]) : std::string();
  };
  std::vector<std::size_t> w(cols.size());
  for (std::size_t j = 0; j < cols.size(); ++j) {
    w[j] = cols[j].size();
    for (const auto& r : rows) w[j] = std::max(w[j], std::min<std::size_t>(60, cell(r, cols[j]).size()));
  }
  auto line = [&](auto get) {
    std::string out;
    for (std::size_t j = 0; j < cols.size(); ++j) {
      std::string v = get(j).substr(0, 60);
      out += v + std::string(w[j] - std::min(w[j], v.size()) + 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::cout << out << "\n";
  };
  line([&](std::size_t j) {
    std::string h = cols[j];
    for (auto& ch : h) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return h;
  });
  for (const auto& r : rows) line([&](std::size_t j) { return cell(r, cols[j]); });
}

outbox::Result<std::unique_ptr<outbox::Store>> OpenOutboxStore(const Options& o) {
  return outbox::ctl::OpenOutboxStore(o.db, o.schema);
}

outbox::Result<std::unique_ptr<outbox::InboxView>> OpenOperatorInbox(const Options& o,
                                                                      const std::string& consumer) {
  return outbox::ctl::OpenOperatorInbox(o.inbox_db, o.inbox_schema, consumer);
}

// The database URL is needed and well-formed; exit code, or nullopt.
std::optional<int> CheckDb(const Options& o, const std::string& command) {
  if (o.db.empty()) {
    return Usage(command + ": no database: pass --db URL, set OUTBOX_DATABASE_URL (or OUTBOX_PG_URL), "
                 "or --config a file with database.url");
  }
  if (auto st = outbox::ValidateSchemaName(o.schema); !st.ok()) return Usage("--schema: " + st.message());
  if (outbox::IsMariaDbUrl(o.db)) {
    if (auto st = outbox::ValidateMariaDbUrl(o.db); !st.ok()) return Usage("--db: " + st.message());
  }
  return std::nullopt;
}

std::optional<int> CheckInboxDb(const Options& o) {
  if (outbox::IsMariaDbUrl(o.inbox_db)) {
    if (auto st = outbox::ValidateMariaDbUrl(o.inbox_db); !st.ok()) return Usage("--inbox-db: " + st.message());
  }
  return std::nullopt;
}

CLI::Validator SchemaName() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        auto st = outbox::ValidateSchemaName(v);
        return st.ok() ? std::string() : st.message();
      },
      "SCHEMA");
}

}  // namespace outbox::ctl
