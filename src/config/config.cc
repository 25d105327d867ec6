// outbox::config's non-template parts (config.h).
#include "config.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "outbox/parse.h"

extern char** environ;

namespace outbox::config {
namespace {

std::string TomlType(const toml::node& n) {
  if (n.is_string()) return "string";
  if (n.is_integer()) return "integer";
  if (n.is_boolean()) return "boolean";
  if (n.is_floating_point()) return "float";
  return "date-time";
}

std::string TomlScalar(const toml::node& n) {
  if (auto s = n.as_string()) return s->get();
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto b = n.as_boolean()) return b->get() ? "true" : "false";
  if (auto f = n.as_floating_point()) {
    std::ostringstream o;
    o << f->get();
    return o.str();
  }
  return "";
}

Status Flatten(const toml::table& t, const std::string& prefix, const std::string& file_name,
               TomlValues& out) {
  for (const auto& [k, node] : t) {
    const std::string key = prefix + std::string(k.str());
    if (const toml::table* sub = node.as_table()) {
      // kafka.properties keys may contain dots: "bootstrap.servers" = "..." (quoted),
      // or nested tables; flatten either way.
      OUTBOX_RETURN_IF_ERROR(Flatten(*sub, key + ".", file_name, out));
      continue;
    }
    if (const toml::array* arr = node.as_array(); arr && arr->is_array_of_tables()) {
      for (std::size_t i = 0; i < arr->size(); ++i) {
        OUTBOX_RETURN_IF_ERROR(
            Flatten(*arr->get(i)->as_table(), key + "." + std::to_string(i) + ".", file_name, out));
      }
      continue;
    }
    if (node.is_array()) {
      return Status::InvalidArgument(file_name + ": config key " + key +
                                     ": arrays are not supported");
    }
    out.pairs.emplace_back(key, TomlScalar(node));
    out.types.push_back(TomlType(node));
  }
  return Status::Ok();
}

}  // namespace

bool SplitArrayKey(const std::string& key, const std::string& name, std::size_t max,
                   std::size_t& index, std::string& sub) {
  if (key.size() <= name.size() + 1 || key.compare(0, name.size(), name) != 0 ||
      key[name.size()] != '.') {
    return false;
  }
  const std::size_t dot = key.find('.', name.size() + 1);
  if (dot == std::string::npos || dot + 1 == key.size()) return false;
  auto n = ParseInteger("index", key.substr(name.size() + 1, dot - name.size() - 1), 0,
                        static_cast<long long>(max) - 1);
  if (!n.ok()) return false;
  index = static_cast<std::size_t>(*n);
  sub = key.substr(dot + 1);
  return true;
}

Status BadValue(const std::string& key, const std::string& value, const std::string& want) {
  return Status::InvalidArgument("config key " + key + ": invalid value \"" + value + "\" (" +
                                 want + ")");
}

Result<long long> ParseIntegerValue(const std::string& key, const std::string& v, long long lo,
                                    long long hi) {
  auto n = ParseInteger("config key " + key, v, lo, hi);
  if (!n.ok()) {
    return BadValue(key, v, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return n;
}

Result<bool> ParseBoolValue(const std::string& key, const std::string& v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return BadValue(key, v, "true or false");
}

Result<double> ParseNumberValue(const std::string& key, const std::string& v, double lo,
                                double hi) {
  auto d = ParseNumber("config key " + key, v, lo, hi);
  if (!d.ok()) {
    return BadValue(key, v, "a number in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return d;
}

Status WrongTomlType(const std::string& key, const std::string& want, const std::string& got,
                     const std::string& value) {
  const std::string example = want == "boolean" ? " (true or false, unquoted)"
                              : want == "integer" ? " (a number, unquoted)"
                                                  : "";
  return Status::InvalidArgument("config key " + key + ": a TOML " + want + " is expected" + example +
                                 ", not the " + got + " " +
                                 (got == "string" ? Quote(value) : value));
}

Result<std::vector<std::pair<std::string, std::string>>> FlattenToml(const std::string& text,
                                                                     const std::string& file_name) {
  auto typed = FlattenTomlTyped(text, file_name);
  if (!typed.ok()) return typed.status();
  return std::move(typed->pairs);
}

Result<TomlValues> FlattenTomlTyped(const std::string& text, const std::string& file_name) {
  toml::table parsed;
  try {  // toml++ reports syntax errors by exception; they stop here
    parsed = toml::parse(text, file_name);
  } catch (const toml::parse_error& err) {
    return Status::InvalidArgument(file_name + ":" + std::to_string(err.source().begin.line) + ":" +
                                   std::to_string(err.source().begin.column) + ": " +
                                   std::string(err.description()));
  }
  TomlValues out;
  OUTBOX_RETURN_IF_ERROR(Flatten(parsed, "", file_name, out));
  return out;
}

Result<std::map<std::string, std::string>> ResolveFileVariables(
    const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> out = env;
  const std::string suffix = "_FILE";
  for (const auto& [var, path] : env) {
    if (var.size() <= suffix.size() ||
        var.compare(var.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string target = var.substr(0, var.size() - suffix.size());
    if (env.count(target)) {
      return Status::InvalidArgument("environment " + var + " and " + target +
                                     " are both set; set one");
    }
    std::ifstream f(path, std::ios::binary);
    if (!f) return Status::InvalidArgument("environment " + var + ": cannot read " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string value = ss.str();
    if (!value.empty() && value.back() == '\n') value.pop_back();
    if (!value.empty() && value.back() == '\r') value.pop_back();
    out.erase(var);
    out[target] = value;
  }
  return out;
}

std::string MapNameFromEnv(const std::string& var, const std::string& env_prefix) {
  const std::string rest = var.substr(env_prefix.size());
  std::string out;
  for (std::size_t i = 0; i < rest.size();) {
    if (rest[i] == '_') {
      std::size_t n = 0;
      while (i + n < rest.size() && rest[i + n] == '_') ++n;
      out += n == 1 ? "." : n == 2 ? "_" : n == 3 ? "-" : std::string(n, '_');
      i += n;
    } else {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(rest[i])));
      ++i;
    }
  }
  return out;
}

std::map<std::string, std::string> OutboxEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos || kv.rfind("OUTBOX_", 0) != 0) continue;
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

Result<std::string> ReadFile(const std::string& path) {
  if (path.empty()) return std::string();
  // A directory opens as a stream and reads as nothing: it would pass for an
  // empty file, and a daemon would start on defaults.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument("cannot read config file " + path + ": it is a directory");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return Status::InvalidArgument("cannot read config file " + path + ": " +
                                   std::strerror(errno));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Status::InvalidArgument("cannot read config file " + path + ": read error");
  return ss.str();
}

std::string Quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

bool IsSecretKafkaProperty(const std::string& name) {
  for (const char* w : {"password", "secret", "key", "token", "credential",
                        "sasl.oauthbearer.config", "sasl.jaas.config"}) {
    if (name.find(w) != std::string::npos) return true;
  }
  return false;
}

}  // namespace outbox::config
