// The rabbitmq.* keys, read alike by outbox-relay (relay.transport =
// rabbitmq) and outbox-consumer (handlers with broker = "rabbitmq"): the URL
// (printed without its password), the exchanges, the timeout and TLS.
#ifndef OUTBOX_SRC_CONFIG_RABBITMQ_KEYS_H_
#define OUTBOX_SRC_CONFIG_RABBITMQ_KEYS_H_

#include <functional>

#include "config.h"
#include "outbox/rabbitmq.h"

namespace outbox::config {

// `exchange_template`: the relay's rabbitmq.exchange_template key too (the
// consumer subscribes to exchanges by name).
template <class T>
void AddRabbitMqKeys(Schema<T>& s, std::function<RabbitMqTransportOptions&(T&)> o,
                     bool exchange_template) {
  Key<T> url = String<T>("rabbitmq.url", "OUTBOX_RABBITMQ_URL",
                         [o](T& c) -> std::string& { return o(c).url; });
  url.get = [o](const T& c) { return RedactAmqpUrl(o(const_cast<T&>(c)).url); };
  s.keys.push_back(url);
  if (exchange_template) {
    s.keys.push_back(String<T>("rabbitmq.exchange_template", "OUTBOX_RABBITMQ_EXCHANGE_TEMPLATE",
                               [o](T& c) -> std::string& { return o(c).exchange_template; }));
  }
  s.keys.push_back(String<T>("rabbitmq.exchange_type", "OUTBOX_RABBITMQ_EXCHANGE_TYPE",
                             [o](T& c) -> std::string& { return o(c).exchange_type; }));
  s.keys.push_back(Boolean<T>("rabbitmq.declare", "OUTBOX_RABBITMQ_DECLARE",
                              [o](T& c) -> bool& { return o(c).declare; }));
  s.keys.push_back(Span<T, std::chrono::milliseconds>(
      "rabbitmq.timeout_ms", "OUTBOX_RABBITMQ_TIMEOUT_MS", 1, 24LL * 3600 * 1000,
      [o](T& c) -> std::chrono::milliseconds& { return o(c).timeout; }));
  s.keys.push_back(Boolean<T>("rabbitmq.tls_verify", "OUTBOX_RABBITMQ_TLS_VERIFY",
                              [o](T& c) -> bool& { return o(c).tls_verify; }));
  s.keys.push_back(String<T>("rabbitmq.tls_ca_file", "OUTBOX_RABBITMQ_TLS_CA_FILE",
                             [o](T& c) -> std::string& { return o(c).tls_ca_file; }));
  s.keys.push_back(String<T>("rabbitmq.tls_cert_file", "OUTBOX_RABBITMQ_TLS_CERT_FILE",
                             [o](T& c) -> std::string& { return o(c).tls_cert_file; }));
  s.keys.push_back(String<T>("rabbitmq.tls_key_file", "OUTBOX_RABBITMQ_TLS_KEY_FILE",
                             [o](T& c) -> std::string& { return o(c).tls_key_file; }));
}

}  // namespace outbox::config

#endif  // OUTBOX_SRC_CONFIG_RABBITMQ_KEYS_H_
