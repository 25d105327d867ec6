#include "outbox/log.h"

#include <chrono>
#include <cstdio>

#include "outbox/time.h"

namespace outbox {
namespace {

std::string Now() { return FormatRfc3339(std::chrono::system_clock::now(), 3); }

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

bool NeedsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

}  // namespace

void StreamLogger::Log(LogLevel level, std::string_view message,
                       std::initializer_list<LogField> fields) {
  if (level < min_) return;
  std::string line;
  if (json_) {
    line = "{\"ts\":\"" + Now() + "\",\"level\":\"" + LevelName(level) + "\",\"msg\":";
    AppendJsonString(line, message);
    for (const auto& [k, v] : fields) {
      line += ',';
      AppendJsonString(line, k);
      line += ':';
      AppendJsonString(line, v);
    }
    line += "}\n";
  } else {
    line = Now() + " " + LevelName(level) + " " + std::string(message);
    for (const auto& [k, v] : fields) {
      line += ' ';
      line += k;
      line += '=';
      if (NeedsQuotes(v)) {
        AppendJsonString(line, v);
      } else {
        line += v;
      }
    }
    line += '\n';
  }
  std::lock_guard<std::mutex> l(mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace outbox
