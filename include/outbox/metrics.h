// Metrics: counters, gauges and histograms rendered in the Prometheus text
// exposition format (version 0.0.4).
//
// Metrics are created once at start-up (Add*), then updated lock-free from any
// thread. References returned by Add* stay valid for the registry's lifetime.
//
// Thread-safety: Add* and Render are safe to call concurrently with updates.
#ifndef OUTBOX_METRICS_H_
#define OUTBOX_METRICS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "outbox/thread_annotations.h"

namespace outbox {

class Counter {
 public:
  void Inc(std::uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{0};
};

class Gauge {
 public:
  void Set(double v) { v_.store(v, std::memory_order_relaxed); }
  double Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);
  // Approximate quantile from the buckets (for logs and tests; Prometheus
  // computes its own).
  double Quantile(double q) const;
  std::uint64_t Count() const { return count_.load(std::memory_order_relaxed); }

 private:
  friend class MetricsRegistry;
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;  // non-cumulative
  std::atomic<std::uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// A Prometheus label value with backslash, quote and newline escaped.
std::string PrometheusLabelValue(const std::string& value);

class MetricsRegistry {
 public:
  // `labels` is the rendered label set without braces, e.g. `class="fatal"`;
  // several metrics may share a name with different labels (same help/type).
  Counter& AddCounter(const std::string& name, const std::string& help,
                      const std::string& labels = "");
  Gauge& AddGauge(const std::string& name, const std::string& help,
                  const std::string& labels = "");
  Histogram& AddHistogram(const std::string& name, const std::string& help,
                          std::vector<double> upper_bounds, const std::string& labels = "");

  // A gauge family whose samples are read at render time: `read` returns
  // (labels, value) pairs, e.g. one per partition. It runs on the rendering
  // thread, under the registry's lock: it must be quick, must not call back into
  // the registry, and must stay callable for the registry's lifetime.
  using GaugeSamples = std::vector<std::pair<std::string, double>>;
  void AddGaugeFunction(const std::string& name, const std::string& help,
                        std::function<GaugeSamples()> read);

  std::string RenderPrometheus() const;

 private:
  struct Entry {
    std::string name, help, type, labels;
    Counter* counter = nullptr;
    Gauge* gauge = nullptr;
    Histogram* histogram = nullptr;
    std::function<GaugeSamples()> read;
  };
  // Appends one entry's samples (the caller holds mu_ and wrote HELP and TYPE).
  static void RenderEntry(const Entry& e, std::string& out);
  mutable Mutex mu_;
  std::vector<Entry> entries_ OUTBOX_GUARDED_BY(mu_);
  std::deque<Counter> counters_ OUTBOX_GUARDED_BY(mu_);
  std::deque<Gauge> gauges_ OUTBOX_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Histogram>> histograms_ OUTBOX_GUARDED_BY(mu_);
};

}  // namespace outbox

#endif  // OUTBOX_METRICS_H_
