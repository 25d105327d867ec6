// HttpReceiver: an HTTP server on a free loopback port in the calling process
// (cpp-httplib), answering every POST with `handle` on its own threads: the
// receiver of the HTTP transport's tests, the relay's HTTP delivery tests and
// relay_bench --http-drain.
//
// Thread-safety: `handle` runs on the server's threads, several at once.
// Lifetime: listening once constructed; the destructor stops and joins.
#ifndef OUTBOX_TESTS_HTTP_RECEIVER_H_
#define OUTBOX_TESTS_HTTP_RECEIVER_H_

#include <httplib.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>

namespace outbox::testing {

class HttpReceiver {
 public:
  using Handle = std::function<void(const httplib::Request&, httplib::Response&)>;

  // `threads`: the server's pool (httplib's default is 8); requests per
  // keep-alive connection are not limited.
  explicit HttpReceiver(Handle handle, std::size_t threads = 8) : handle_(std::move(handle)) {
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server_.set_keep_alive_max_count(1'000'000);
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      handle_(req, res);
    });
    // Bound and listening after this: a connection waits in the backlog until
    // the server thread accepts it.
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be lost (and the join would hang).
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~HttpReceiver() {
    server_.stop();
    thread_.join();
  }
  HttpReceiver(const HttpReceiver&) = delete;
  HttpReceiver& operator=(const HttpReceiver&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  Handle handle_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_HTTP_RECEIVER_H_
