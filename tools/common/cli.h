// What the tools (outbox-relay, outbox-consumer, outboxctl, outbox-mock-kafka) share on
// the command line: CLI11 (Debian's libcli11-dev) parsing with our exit codes,
// and progress lines for long operations on a terminal.
//
// Thread-safety: none needed (used from main). Header-only.
#ifndef OUTBOX_TOOLS_COMMON_CLI_H_
#define OUTBOX_TOOLS_COMMON_CLI_H_

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "outbox/parse.h"

namespace outbox::tools {

// Exit code of a usage error (bad flag, bad value, missing argument): nothing
// was touched.
inline constexpr int kExitUsage = 2;

// Parses argv into `app`. Returns nullopt when the tool should go on; otherwise
// the exit code: 0 after --help (on stdout, per subcommand) or --version, 2
// after a usage error, printed on stderr as "TOOL: MESSAGE" with a pointer to
// --help.
inline std::optional<int> ParseOrExit(CLI::App& app, int argc, const char* const* argv,
                                      const std::string& tool) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    // The subcommand whose help to point at: the deepest one that was given.
    const CLI::App* deepest = &app;
    for (;;) {
      auto subs = deepest->get_subcommands();
      if (subs.empty()) break;
      deepest = subs.front();
    }
    std::string where = tool;
    for (const CLI::App* a = deepest; a != &app && a != nullptr; a = a->get_parent()) {
      where.insert(tool.size(), " " + a->get_name());
    }
    std::cerr << tool << ": " << e.what() << "\n"
              << "run `" << where << " --help` for usage\n";
    return kExitUsage;
  }
  return std::nullopt;
}

// A CLI11 check for a duration flag (seconds, or 90s, 15m, 12h, 7d; at most
// `max_seconds`); the error names the flag.
inline CLI::Validator Duration(const std::string& flag, long long max_seconds) {
  return CLI::Validator(
      [flag, max_seconds](std::string& v) -> std::string {
        auto r = outbox::ParseSeconds(flag, v, max_seconds);
        if (r.ok()) return std::string();
        // CLI11 puts the flag's name in front already.
        std::string m = r.status().message();
        if (m.rfind(flag + ": ", 0) == 0) m.erase(0, flag.size() + 2);
        return m;
      },
      "DURATION");
}

// A progress line on stderr, rewritten in place at most ten times a second, only
// when stderr is a terminal (never in logs, pipes or scripts). Done() clears it.
class Progress {
 public:
  Progress() : enabled_(::isatty(STDERR_FILENO) == 1) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { Done(); }

  void Update(const std::string& text) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (shown_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    shown_ = true;
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
    std::fflush(stderr);
  }
  void Done() {
    if (!enabled_ || !shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace outbox::tools

#endif  // OUTBOX_TOOLS_COMMON_CLI_H_
