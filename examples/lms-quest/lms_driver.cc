// lms-driver: simulates users completing lessons against lms-service at a
// steady rate. Picks --completions distinct (user, lesson) pairs out of
// --users × --lessons (seeded, so a run can be repeated), sends them over
// --connections keep-alive connections, paced to --rate per second (0: as fast
// as the service answers). A share of users click twice (--repeat-percent):
// the LMS answers "already completed" and enqueues nothing. Unavailable answers
// and connection errors are retried with backoff until the completion is recorded.
//
//   lms-driver --port-file PATH | --port N  [--host 127.0.0.1] [--users 1000]
//              [--lessons 20] [--completions 10000] [--rate 500] [--connections 4]
//              [--repeat-percent 5] [--seed 1]
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "common.h"

namespace {

using Clock = std::chrono::steady_clock;

int ReadPort(const lms::Flags& f) {
  if (f.Str("port") != "0") return static_cast<int>(f.Int("port", 1));
  if (f.Str("port-file").empty()) f.Usage("--port or --port-file is required");
  for (int i = 0; i < 300; ++i) {
    std::ifstream in(f.Str("port-file"));
    int port = 0;
    if (in >> port && port > 0) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cerr << "lms-driver: no port in " << f.Str("port-file") << " after 30 s\n";
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  lms::Flags f(argc, argv, "lms-driver",
               {{"port-file", ""}, {"port", "0"}, {"host", "127.0.0.1"}, {"users", "1000"},
                {"lessons", "20"}, {"completions", "10000"}, {"rate", "500"}, {"connections", "4"},
                {"repeat-percent", "5"}, {"seed", "1"}});
  const long users = f.Int("users", 1), lessons = f.Int("lessons", 1);
  const long completions = f.Int("completions", 1), rate = f.Int("rate", 0);
  const long connections = f.Int("connections", 1), repeat = f.Int("repeat-percent", 0);
  if (completions > users * lessons) {
    f.Usage("--completions exceeds --users × --lessons distinct (user, lesson) pairs");
  }
  const int port = ReadPort(f);

  std::mt19937_64 rng(static_cast<std::uint64_t>(f.Int("seed", 0)));
  std::vector<std::pair<long, long>> pairs;
  pairs.reserve(static_cast<std::size_t>(users * lessons));
  for (long u = 1; u <= users; ++u) {
    for (long l = 1; l <= lessons; ++l) pairs.emplace_back(u, l);
  }
  std::shuffle(pairs.begin(), pairs.end(), rng);
  pairs.resize(static_cast<std::size_t>(completions));
  std::vector<bool> twice(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) twice[i] = static_cast<long>(rng() % 100) < repeat;

  std::atomic<std::size_t> next{0};
  std::atomic<long> recorded{0}, already{0}, retries{0}, rejected{0};
  const auto start = Clock::now();
  auto worker = [&] {
    httplib::Client cli(f.Str("host"), port);
    cli.set_keep_alive(true);
    cli.set_tcp_nodelay(true);  // else Nagle + delayed ACK add ~40 ms per request
    cli.set_connection_timeout(2);
    cli.set_read_timeout(10);
    for (std::size_t i; (i = next.fetch_add(1)) < pairs.size();) {
      if (rate > 0) {
        std::this_thread::sleep_until(start + std::chrono::microseconds(static_cast<long>(i) * 1'000'000 / rate));
      }
      const std::string body =
          nlohmann::json{{"user", pairs[i].first}, {"lesson", pairs[i].second}}.dump();
      for (int click = 0; click < (twice[i] ? 2 : 1); ++click) {
        auto backoff = std::chrono::milliseconds(50);
        for (;;) {
          auto res = cli.Post("/completions", body, "application/json");
          if (res && res->status == 201) {
            ++recorded;
            break;
          }
          if (res && res->status == 200) {
            ++already;
            break;
          }
          if (res && res->status >= 400 && res->status < 500) {
            ++rejected;
            std::cerr << "lms-driver: rejected " << body << ": " << res->status << " " << res->body << "\n";
            break;
          }
          ++retries;
          std::this_thread::sleep_for(backoff);
          backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (long t = 0; t < connections; ++t) threads.emplace_back(worker);
  std::atomic<bool> done{false};
  std::thread progress([&] {
    while (!done) {
      for (int i = 0; i < 20 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!done) {
        std::cerr << "lms-driver: " << recorded.load() << "/" << completions << " completions recorded\n";
      }
    }
  });
  for (auto& t : threads) t.join();
  done = true;
  progress.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << "lms-driver: " << recorded << " completions recorded, " << already
            << " repeated clicks answered \"already completed\", " << retries << " retried requests, "
            << rejected << " rejected, in " << static_cast<double>(static_cast<long>(secs * 10)) / 10.0 << " s\n";
  return rejected == 0 ? 0 : 1;
}
