// outbox::config: a tool's configuration from a TOML file, the OUTBOX_*
// environment and command-line overrides (in increasing precedence) into typed
// options, strictly: every value is parsed where it enters, an unknown key or a
// bad value is an error naming the key (and its file or variable), and Print
// writes the effective configuration back as TOML with secrets redacted.
//
// A tool describes its keys once, as a Schema of its own options struct T
// (outbox-relay's in tools/outbox_relay/relay_config.cc); the shared sections —
// `[database]` (StoreOptions) and `[kafka.properties]` — come from
// AddDatabaseKeys and AddKafkaProperties, so every tool reads them alike.
//
// Environment: a key's variable is OUTBOX_<SECTION>_<KEY> in upper case; an
// OUTBOX_X_FILE variable stands for OUTBOX_X with the file's content (for
// secrets); a map section takes OUTBOX_<PREFIX>_<NAME> with Confluent's
// convention ("_" is ".", "__" is "_", "___" is "-").
//
// Internal to outbox's tools (not installed): the daemons and outboxctl link
// outbox::config; no tool includes another tool's code.
//
// Thread-safety: a Schema is immutable once built and may be shared; Load and
// Print keep no state.
#ifndef OUTBOX_SRC_CONFIG_CONFIG_H_
#define OUTBOX_SRC_CONFIG_CONFIG_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "outbox/open.h"
#include "outbox/status.h"
#include "outbox/store.h"

namespace outbox::config {

// One key of T's configuration.
template <class T>
struct Key {
  std::string name;  // "section.key"
  std::string env;   // OUTBOX_SECTION_KEY
  std::function<Status(T&, const std::string&)> set;  // errors name the key
  std::function<std::string(const T&)> get;
  bool quoted = true;   // printed as a TOML string
  bool secret = false;  // printed as "***"
  // In a file, the TOML type the value must have ("boolean", "integer"; ""
  // any): `ordered = "yes"` or `batch_size = "500"` is a type error naming the
  // key, not a string coerced. The environment and --set give text.
  std::string toml_type = "";
};

// A section whose keys are free-form names into a map (kafka.properties).
template <class T>
struct MapSection {
  std::string prefix;      // "kafka.properties."
  std::string env_prefix;  // "OUTBOX_KAFKA_PROPERTIES_"
  std::function<std::map<std::string, std::string>&(T&)> field;
  std::function<bool(const std::string&)> secret;  // names whose values Print redacts
  std::string print_after;  // Print writes the section after this key ("" = at the end)
  // Names that mean the same (HTTP headers ignore case): each name is stored as
  // this returns it, so a later source replaces an earlier one. Unset: as given.
  std::function<std::string(const std::string&)> normalize;
  std::string Name(const std::string& name) const { return normalize ? normalize(name) : name; }
};

// An array of tables (`[[handler]]`): element i's keys arrive as
// "<name>.<i>.<key>" (0-based, in document order), and --set addresses them
// so. The environment does not reach them.
template <class T>
struct TableArray {
  std::string name;  // "handler"
  std::size_t max_elements = 64;
  // Sets element `index`'s `key` (growing the array to hold it). Errors name the key.
  std::function<Status(T&, std::size_t index, const std::string& key, const std::string& value)>
      set;
  std::function<std::string(const T&)> print;  // every element as [[name]] tables
  std::function<std::string(const std::string& key)> toml_type;  // Key::toml_type of a sub-key
};

template <class T>
struct Schema {
  std::string docs;  // where the keys are documented, named in "unknown key" errors
  std::vector<Key<T>> keys;
  std::vector<MapSection<T>> maps;
  std::vector<TableArray<T>> arrays;
  // Variables accepted as another name of a key (OUTBOX_PG_URL -> database.url).
  std::vector<std::pair<std::string, std::string>> env_aliases;
  // Keys under these prefixes belong to another tool reading the same file
  // (outboxctl reads the relay's): accepted and ignored.
  std::vector<std::string> ignored_prefixes;
};

// Where values come from, in increasing precedence.
struct Sources {
  std::string file_text;  // the TOML document ("" = none)
  std::string file_name;  // names it in errors
  std::map<std::string, std::string> env;  // the process's OUTBOX_* variables
  std::vector<std::pair<std::string, std::string>> overrides;  // --set KEY=VALUE, in order
};

// --- What Load builds on (not templates). ---

// "config key NAME: invalid value "V" (WANT)".
Status BadValue(const std::string& key, const std::string& value, const std::string& want);
// The TOML document as (section.key, value) pairs in document order; nested
// tables are flattened (kafka.properties' dotted names stay whole), an array of
// tables gives "name.<i>.key" (TableArray). A syntax error names
// file:line:column; any other array names its key.
Result<std::vector<std::pair<std::string, std::string>>> FlattenToml(const std::string& text,
                                                                     const std::string& file_name);
// The same, with each value's TOML type ("string", "integer", "boolean",
// "float", "date-time"), same index.
struct TomlValues {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<std::string> types;
};
Result<TomlValues> FlattenTomlTyped(const std::string& text, const std::string& file_name);
// A TOML value of the wrong type for its key: "config key NAME: a TOML WANT is
// expected (...), not the TYPE VALUE".
Status WrongTomlType(const std::string& key, const std::string& want, const std::string& got,
                     const std::string& value);
// The environment with every OUTBOX_X_FILE replaced by OUTBOX_X = the file's
// content (one trailing newline dropped). Both set, or an unreadable file, is
// an error naming the variable.
Result<std::map<std::string, std::string>> ResolveFileVariables(
    const std::map<std::string, std::string>& env);
// OUTBOX_KAFKA_PROPERTIES_SASL_PASSWORD with prefix OUTBOX_KAFKA_PROPERTIES_ -> sasl.password.
std::string MapNameFromEnv(const std::string& var, const std::string& env_prefix);
// The OUTBOX_* variables of this process's environment.
std::map<std::string, std::string> OutboxEnvironment();
// A file's text; "" for an empty path. InvalidArgument naming it when unreadable.
Result<std::string> ReadFile(const std::string& path);
// A TOML basic string.
std::string Quote(const std::string& s);
// "handler.2.topic" with name "handler" -> index 2, sub "topic". False when
// `key` is not of that array, or the index is not a number below `max`.
bool SplitArrayKey(const std::string& key, const std::string& name, std::size_t max,
                   std::size_t& index, std::string& sub);

// --- Key builders: strict parsing, errors name the key. ---

template <class T>
Key<T> String(std::string name, std::string env, std::function<std::string&(T&)> field) {
  return {name, env,
          [field](T& c, const std::string& v) {
            field(c) = v;
            return Status::Ok();
          },
          [field](const T& c) { return field(const_cast<T&>(c)); }, true};
}

Result<long long> ParseIntegerValue(const std::string& key, const std::string& v, long long lo,
                                    long long hi);
Result<bool> ParseBoolValue(const std::string& key, const std::string& v);
Result<double> ParseNumberValue(const std::string& key, const std::string& v, double lo, double hi);

template <class T, class Rep>
Key<T> Integer(std::string name, std::string env, long long lo, long long hi,
               std::function<Rep&(T&)> field) {
  return {name, env,
          [name, lo, hi, field](T& c, const std::string& v) -> Status {
            auto n = ParseIntegerValue(name, v, lo, hi);
            if (!n.ok()) return n.status();
            field(c) = static_cast<Rep>(*n);
            return Status::Ok();
          },
          [field](const T& c) {
            return std::to_string(static_cast<long long>(field(const_cast<T&>(c))));
          },
          false, false, "integer"};
}

// A duration in the unit of `Duration` (the key's name says which: _ms, _s).
template <class T, class Duration>
Key<T> Span(std::string name, std::string env, long long lo, long long hi,
            std::function<Duration&(T&)> field) {
  return {name, env,
          [name, lo, hi, field](T& c, const std::string& v) -> Status {
            auto n = ParseIntegerValue(name, v, lo, hi);
            if (!n.ok()) return n.status();
            field(c) = Duration(*n);
            return Status::Ok();
          },
          [field](const T& c) { return std::to_string(field(const_cast<T&>(c)).count()); },
          false, false, "integer"};
}

template <class T>
Key<T> Boolean(std::string name, std::string env, std::function<bool&(T&)> field) {
  return {name, env,
          [name, field](T& c, const std::string& v) -> Status {
            auto b = ParseBoolValue(name, v);
            if (!b.ok()) return b.status();
            field(c) = *b;
            return Status::Ok();
          },
          [field](const T& c) { return std::string(field(const_cast<T&>(c)) ? "true" : "false"); },
          false, false, "boolean"};
}

// One of named values ("update" or "delete").
template <class T, class E>
Key<T> Choice(std::string name, std::string env, std::vector<std::pair<std::string, E>> choices,
              std::function<E&(T&)> field) {
  std::string want;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    want += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i].first;
  }
  return {name, env,
          [name, choices, want, field](T& c, const std::string& v) -> Status {
            for (const auto& [text, value] : choices) {
              if (text == v) {
                field(c) = value;
                return Status::Ok();
              }
            }
            return BadValue(name, v, want);
          },
          [choices, field](const T& c) {
            for (const auto& [text, value] : choices) {
              if (value == field(const_cast<T&>(c))) return text;
            }
            return std::string();
          },
          true};
}

// --- The shared sections. ---

// [database]: url (redacted when printed), schema, sent_mode,
// statement_timeout_ms, connect_timeout_s into a StoreOptions.
template <class T>
void AddDatabaseKeys(Schema<T>& s, std::function<StoreOptions&(T&)> db);
// [kafka.properties]: librdkafka properties; those naming a password, secret,
// key, token or credential are redacted when printed.
template <class T>
void AddKafkaProperties(Schema<T>& s, std::function<std::map<std::string, std::string>&(T&)> props,
                        std::string print_after = "");

// librdkafka properties that carry credentials: every password, secret, key or
// token, and the SASL configurations that embed them.
bool IsSecretKafkaProperty(const std::string& name);

// --- Loading and printing. ---

// Applies `key` = `value` to `out` (a map section's key, or a declared one).
template <class T>
Status Set(const Schema<T>& s, T& out, const std::string& key, const std::string& value) {
  for (const MapSection<T>& m : s.maps) {
    if (key.rfind(m.prefix, 0) == 0 && key.size() > m.prefix.size()) {
      m.field(out)[m.Name(key.substr(m.prefix.size()))] = value;
      return Status::Ok();
    }
  }
  for (const Key<T>& k : s.keys) {
    if (k.name == key) return k.set(out, value);
  }
  for (const TableArray<T>& a : s.arrays) {
    std::size_t index = 0;
    std::string sub;
    if (!SplitArrayKey(key, a.name, a.max_elements, index, sub)) continue;
    return a.set(out, index, sub, value);
  }
  for (const std::string& p : s.ignored_prefixes) {
    if (key.rfind(p, 0) == 0) return Status::Ok();
  }
  return Status::InvalidArgument("unknown config key " + key + " (see " + s.docs +
                                 " for the keys)");
}

// The TOML type a file value of `key` must have ("" any).
template <class T>
std::string ExpectedTomlType(const Schema<T>& s, const std::string& key) {
  for (const Key<T>& k : s.keys) {
    if (k.name == key) return k.toml_type;
  }
  for (const TableArray<T>& a : s.arrays) {
    std::size_t index = 0;
    std::string sub;
    if (a.toml_type && SplitArrayKey(key, a.name, a.max_elements, index, sub)) return a.toml_type(sub);
  }
  return "";
}

// file < env (and its aliases, and map sections' variables) < overrides, onto
// `out` (which holds the defaults). Nothing is validated across keys here: the
// tool does that after.
template <class T>
Status Load(const Schema<T>& s, const Sources& src, T& out) {
  auto env = ResolveFileVariables(src.env);
  if (!env.ok()) return env.status();
  if (!src.file_text.empty()) {
    auto values = FlattenTomlTyped(src.file_text, src.file_name);
    if (!values.ok()) return values.status();
    for (std::size_t i = 0; i < values->pairs.size(); ++i) {
      const auto& [key, value] = values->pairs[i];
      const std::string want = ExpectedTomlType(s, key);
      Status st = !want.empty() && want != values->types[i]
                      ? WrongTomlType(key, want, values->types[i], value)
                      : Set(s, out, key, value);
      if (!st.ok()) return Status::InvalidArgument(src.file_name + ": " + st.message());
    }
  }
  auto from_env = [&](const std::string& var, const std::string& key) -> Status {
    auto it = env->find(var);
    if (it == env->end()) return Status::Ok();
    Status st = Set(s, out, key, it->second);
    return st.ok() ? st : Status::InvalidArgument("environment " + var + ": " + st.message());
  };
  for (const auto& [var, key] : s.env_aliases) OUTBOX_RETURN_IF_ERROR(from_env(var, key));
  for (const Key<T>& k : s.keys) OUTBOX_RETURN_IF_ERROR(from_env(k.env, k.name));
  for (const MapSection<T>& m : s.maps) {
    for (const auto& [var, value] : *env) {
      if (var.rfind(m.env_prefix, 0) != 0 || var.size() == m.env_prefix.size()) continue;
      m.field(out)[m.Name(MapNameFromEnv(var, m.env_prefix))] = value;
    }
  }
  for (const auto& [key, value] : src.overrides) OUTBOX_RETURN_IF_ERROR(Set(s, out, key, value));
  return Status::Ok();
}

// "key=VARIABLE" for each declared key whose value comes from the environment
// (a variable, or an alias such as OUTBOX_PG_URL) and no --set replaces, comma
// separated: what a start-up log line names (never the values). The last
// variable read wins, as in Load.
template <class T>
std::string FromEnvironment(const Schema<T>& s, const Sources& src) {
  std::map<std::string, std::string> by_key;
  for (const auto& [var, key] : s.env_aliases) {
    if (src.env.count(var) || src.env.count(var + "_FILE")) by_key[key] = var;
  }
  for (const Key<T>& k : s.keys) {
    if (!k.env.empty() && (src.env.count(k.env) || src.env.count(k.env + "_FILE"))) by_key[k.name] = k.env;
  }
  // A --set replaces the key, and every other name its variable sets
  // (OUTBOX_KAFKA_BOOTSTRAP is kafka.bootstrap and its property alike).
  for (const auto& [key, value] : src.overrides) {
    auto it = by_key.find(key);
    if (it == by_key.end()) continue;
    const std::string var = it->second;
    std::erase_if(by_key, [&](const auto& kv) { return kv.second == var; });
  }
  std::string out;
  for (const auto& [key, var] : by_key) out += (out.empty() ? "" : ",") + key + "=" + var;
  return out;
}

// The effective configuration as TOML, sections in key order, secrets as "***".
template <class T>
std::string Print(const Schema<T>& s, const T& c) {
  std::string out, section;
  auto print_map = [&](const MapSection<T>& m) {
    out += "\n[" + m.prefix.substr(0, m.prefix.size() - 1) + "]\n";
    for (const auto& [name, value] : m.field(const_cast<T&>(c))) {
      out += Quote(name) + " = " + Quote(m.secret && m.secret(name) ? "***" : value) + "\n";
    }
    section = m.prefix;
  };
  for (const Key<T>& k : s.keys) {
    const auto dot = k.name.find('.');
    const std::string sec = k.name.substr(0, dot);
    if (sec != section) {
      if (!section.empty()) out += "\n";
      out += "[" + sec + "]\n";
      section = sec;
    }
    const std::string v = k.secret ? "***" : k.get(c);
    out += k.name.substr(dot + 1) + " = " + (k.quoted ? Quote(v) : v) + "\n";
    for (const MapSection<T>& m : s.maps) {
      if (m.print_after == k.name) print_map(m);
    }
  }
  for (const MapSection<T>& m : s.maps) {
    if (m.print_after.empty()) print_map(m);
  }
  for (const TableArray<T>& a : s.arrays) out += a.print(c);
  return out;
}

// An array of tables whose elements are E's, in field(T); `keys` are E's keys,
// named without the array's part ("topic"). Errors name the whole key
// ("handler.0.topic"); Print writes each element as a [[name]] table.
template <class T, class E>
TableArray<T> Tables(std::string name, std::function<std::vector<E>&(T&)> field,
                     std::vector<Key<E>> keys, std::string docs, std::size_t max_elements = 64) {
  TableArray<T> a;
  a.name = name;
  a.max_elements = max_elements;
  a.set = [name, field, keys, docs](T& c, std::size_t index, const std::string& sub,
                                    const std::string& value) -> Status {
    const std::string whole = name + "." + std::to_string(index) + "." + sub;
    std::vector<E>& v = field(c);
    if (index > v.size()) {
      // A gap would leave elements no source set, and their errors would name
      // them, not this key.
      return Status::InvalidArgument(
          "config key " + whole + ": there is no " + name + "." + std::to_string(index - 1) +
          " (" + std::to_string(v.size()) + " configured, numbered from 0 in file order; the next "
          "one is " + name + "." + std::to_string(v.size()) + ")");
    }
    if (v.size() == index) v.resize(index + 1);
    for (const Key<E>& k : keys) {
      if (k.name != sub) continue;
      Status st = k.set(v[index], value);
      if (st.ok()) return st;
      std::string m = st.message();
      const std::string named = "config key " + sub;
      if (m.rfind(named, 0) == 0) m = "config key " + whole + m.substr(named.size());
      return Status::InvalidArgument(m);
    }
    return Status::InvalidArgument("unknown config key " + whole + " (see " + docs +
                                   " for the keys)");
  };
  a.toml_type = [keys](const std::string& sub) {
    for (const Key<E>& k : keys) {
      if (k.name == sub) return k.toml_type;
    }
    return std::string();
  };
  a.print = [name, field, keys](const T& c) {
    std::string out;
    for (const E& e : field(const_cast<T&>(c))) {
      out += "\n[[" + name + "]]\n";
      for (const Key<E>& k : keys) {
        const std::string v = k.secret ? "***" : k.get(e);
        out += k.name + " = " + (k.quoted ? Quote(v) : v) + "\n";
      }
    }
    return out;
  };
  return a;
}

// --- Definitions of the shared sections. ---

template <class T>
void AddDatabaseKeys(Schema<T>& s, std::function<StoreOptions&(T&)> db) {
  constexpr long long kMaxMs = 24LL * 3600 * 1000;
  Key<T> url = String<T>("database.url", "OUTBOX_DATABASE_URL",
                         [db](T& c) -> std::string& { return db(c).url; });
  url.get = [db](const T& c) { return RedactDatabaseUrl(db(const_cast<T&>(c)).url); };
  s.keys.push_back(url);
  s.keys.push_back(String<T>("database.schema", "OUTBOX_DATABASE_SCHEMA",
                             [db](T& c) -> std::string& { return db(c).schema; }));
  s.keys.push_back(Choice<T, SentMode>(
      "database.sent_mode", "OUTBOX_DATABASE_SENT_MODE",
      {{"update", SentMode::kUpdate}, {"delete", SentMode::kDelete}},
      [db](T& c) -> SentMode& { return db(c).sent_mode; }));
  s.keys.push_back(Span<T, std::chrono::milliseconds>(
      "database.statement_timeout_ms", "OUTBOX_DATABASE_STATEMENT_TIMEOUT_MS", 100, kMaxMs,
      [db](T& c) -> std::chrono::milliseconds& { return db(c).statement_timeout; }));
  s.keys.push_back(Span<T, std::chrono::seconds>(
      "database.connect_timeout_s", "OUTBOX_DATABASE_CONNECT_TIMEOUT_S", 1, 3600,
      [db](T& c) -> std::chrono::seconds& { return db(c).connect_timeout; }));
  s.keys.push_back(Span<T, std::chrono::milliseconds>(
      "database.log_position_every_ms", "OUTBOX_DATABASE_LOG_POSITION_EVERY_MS", 0, 60000,
      [db](T& c) -> std::chrono::milliseconds& { return db(c).log_position_every; }));
  s.env_aliases.emplace_back("OUTBOX_PG_URL", "database.url");  // scripts/testenv's name
}

template <class T>
void AddKafkaProperties(Schema<T>& s, std::function<std::map<std::string, std::string>&(T&)> props,
                        std::string print_after) {
  s.maps.push_back({"kafka.properties.", "OUTBOX_KAFKA_PROPERTIES_", props, IsSecretKafkaProperty,
                    std::move(print_after), nullptr});
  s.env_aliases.emplace_back("OUTBOX_KAFKA_BOOTSTRAP", "kafka.properties.bootstrap.servers");
}

}  // namespace outbox::config

#endif  // OUTBOX_SRC_CONFIG_CONFIG_H_
