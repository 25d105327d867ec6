// Logger: one line per notable event (never per message), human-readable by
// default or JSON. Fields are key/value pairs.
//
// Thread-safety: safe for concurrent use; lines are never interleaved.
#ifndef OUTBOX_LOG_H_
#define OUTBOX_LOG_H_

#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace outbox {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

using LogField = std::pair<std::string_view, std::string>;

class Logger {
 public:
  virtual ~Logger() = default;
  virtual void Log(LogLevel level, std::string_view message,
                   std::initializer_list<LogField> fields = {}) = 0;
  void Info(std::string_view m, std::initializer_list<LogField> f = {}) { Log(LogLevel::kInfo, m, f); }
  void Warn(std::string_view m, std::initializer_list<LogField> f = {}) { Log(LogLevel::kWarn, m, f); }
  void Error(std::string_view m, std::initializer_list<LogField> f = {}) { Log(LogLevel::kError, m, f); }
};

// Writes to a FILE* (stderr by default): "2026-11-29T21:00:00.123Z INFO message k=v"
// or {"ts":"…","level":"info","msg":"…","k":"v"}.
class StreamLogger final : public Logger {
 public:
  StreamLogger(bool json, LogLevel min_level, std::FILE* out = stderr)
      : json_(json), min_(min_level), out_(out) {}
  void Log(LogLevel level, std::string_view message,
           std::initializer_list<LogField> fields) override;

 private:
  bool json_;
  LogLevel min_;
  std::FILE* out_;
  std::mutex mu_;
};

// Discards everything (tests, benchmarks).
class NullLogger final : public Logger {
 public:
  void Log(LogLevel, std::string_view, std::initializer_list<LogField>) override {}
};

}  // namespace outbox

#endif  // OUTBOX_LOG_H_
