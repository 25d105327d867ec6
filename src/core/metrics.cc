#include "outbox/metrics.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace outbox {
namespace {

// The shortest decimal that reads back as `v` (0.0025, not
// 0.0025000000000000001), as the Prometheus clients print.
std::string FormatDouble(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

void AtomicAdd(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      buckets_(new std::atomic<std::uint64_t>[bounds_.size() + 1]) {
  for (std::size_t i = 0; i <= bounds_.size(); ++i) buckets_[i] = 0;
}

std::string PrometheusLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void Histogram::Observe(double v) {
  std::size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

double Histogram::Quantile(double q) const {
  const std::uint64_t total = Count();
  if (total == 0) return 0;
  const double target = q * static_cast<double>(total);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    seen += buckets_[i].load(std::memory_order_relaxed);
    if (static_cast<double>(seen) >= target) return bounds_[i];
  }
  return bounds_.empty() ? 0 : bounds_.back();
}

Counter& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                     const std::string& labels) {
  MutexLock l(mu_);
  counters_.emplace_back();
  entries_.push_back({name, help, "counter", labels, &counters_.back(), nullptr, nullptr, {}});
  return counters_.back();
}

Gauge& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                 const std::string& labels) {
  MutexLock l(mu_);
  gauges_.emplace_back();
  entries_.push_back({name, help, "gauge", labels, nullptr, &gauges_.back(), nullptr, {}});
  return gauges_.back();
}

Histogram& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                         std::vector<double> upper_bounds,
                                         const std::string& labels) {
  MutexLock l(mu_);
  histograms_.push_back(std::make_unique<Histogram>(std::move(upper_bounds)));
  entries_.push_back(
      {name, help, "histogram", labels, nullptr, nullptr, histograms_.back().get(), {}});
  return *histograms_.back();
}

void MetricsRegistry::AddGaugeFunction(const std::string& name, const std::string& help,
                                       std::function<GaugeSamples()> read) {
  MutexLock l(mu_);
  Entry e{name, help, "gauge", "", nullptr, nullptr, nullptr, std::move(read)};
  entries_.push_back(std::move(e));
}

std::string MetricsRegistry::RenderPrometheus() const {
  MutexLock l(mu_);
  // A family's samples must be contiguous: entries of one name (several
  // consumers' in one process) are rendered together, in order of first use.
  std::vector<std::string> names;
  std::map<std::string, std::vector<const Entry*>> by_name;
  for (const Entry& e : entries_) {
    auto& v = by_name[e.name];
    if (v.empty()) names.push_back(e.name);
    v.push_back(&e);
  }
  std::string out;
  for (const std::string& name : names) {
    const std::vector<const Entry*>& family = by_name[name];
    out += "# HELP " + name + " " + family.front()->help + "\n# TYPE " + name + " " +
           family.front()->type + "\n";
    for (const Entry* e : family) RenderEntry(*e, out);
  }
  return out;
}

void MetricsRegistry::RenderEntry(const Entry& e, std::string& out) {
  const std::string lbl = e.labels.empty() ? "" : "{" + e.labels + "}";
  if (e.counter) {
    out += e.name + lbl + " " + std::to_string(e.counter->Value()) + "\n";
  } else if (e.gauge) {
    out += e.name + lbl + " " + FormatDouble(e.gauge->Value()) + "\n";
  } else if (e.read) {
    for (const auto& [labels, value] : e.read()) {
      out += e.name + (labels.empty() ? "" : "{" + labels + "}") + " " + FormatDouble(value) + "\n";
    }
  } else {
    const Histogram& h = *e.histogram;
    const std::string le_prefix = e.labels.empty() ? "{le=\"" : "{" + e.labels + ",le=\"";
    std::uint64_t cum = 0;
    for (std::size_t i = 0; i < h.bounds_.size(); ++i) {
      cum += h.buckets_[i].load(std::memory_order_relaxed);
      out += e.name + "_bucket" + le_prefix + FormatDouble(h.bounds_[i]) + "\"} " +
             std::to_string(cum) + "\n";
    }
    cum += h.buckets_[h.bounds_.size()].load(std::memory_order_relaxed);
    out += e.name + "_bucket" + le_prefix + "+Inf\"} " + std::to_string(cum) + "\n";
    out += e.name + "_sum" + lbl + " " + FormatDouble(h.sum_.load(std::memory_order_relaxed)) + "\n";
    out += e.name + "_count" + lbl + " " + std::to_string(cum) + "\n";
  }
}

}  // namespace outbox
