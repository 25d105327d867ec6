#include "core/fault.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace outbox::fault {
namespace {

struct Action {
  std::string kind;  // crash, abort, error, delay
  long delay_ms = 0;
  long on_pass = 0;  // 0 = every pass
  long passes = 0;
  std::string tag;   // non-empty: only passes whose tags include it count
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Action, std::less<>> actions;
};

Registry& Reg() {
  static Registry r;
  return r;
}

[[maybe_unused]] bool Load() {
  const char* env = std::getenv("OUTBOX_FAULTS");
  if (!env || !*env) return false;
  std::string spec = env;
  std::size_t pos = 0;
  while (pos < spec.size()) {
    std::size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    Action a;
    std::string act = item.substr(eq + 1);
    if (auto slash = act.find('/'); slash != std::string::npos) {
      a.tag = act.substr(slash + 1);
      act = act.substr(0, slash);
    }
    auto at = act.find('@');
    if (at != std::string::npos) {
      a.on_pass = std::atol(act.c_str() + at + 1);
      act = act.substr(0, at);
    }
    if (act.rfind("delay:", 0) == 0) {
      a.kind = "delay";
      a.delay_ms = std::atol(act.c_str() + 6);
    } else {
      a.kind = act;
    }
    Reg().actions[item.substr(0, eq)] = a;
  }
  return !Reg().actions.empty();
}

}  // namespace

bool AnyArmed() {
#if defined(OUTBOX_FAULT_POINTS) && OUTBOX_FAULT_POINTS
  static const bool armed = Load();
  return armed;
#else
  return false;  // compiled out: OUTBOX_FAULTS is not even read
#endif
}

bool Hit(std::string_view name, std::span<const std::string> tags) {
  Action a;
  {
    std::lock_guard<std::mutex> l(Reg().mu);
    auto it = Reg().actions.find(name);
    if (it == Reg().actions.end()) return false;
    if (!it->second.tag.empty() &&
        std::find(tags.begin(), tags.end(), it->second.tag) == tags.end()) {
      return false;
    }
    ++it->second.passes;
    if (it->second.on_pass != 0 && it->second.passes != it->second.on_pass) return false;
    a = it->second;
  }
  if (a.kind == "crash") _exit(70);
  if (a.kind == "abort") std::abort();
  if (a.kind == "delay") std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
  return a.kind == "error";
}

}  // namespace outbox::fault
