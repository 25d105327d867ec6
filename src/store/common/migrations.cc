#include "migrations.h"

#include <cctype>

namespace outbox::store {
namespace {

bool IsDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool OnlyCommentsAndBlanks(std::string_view statement) {
  std::size_t pos = 0;
  while (pos < statement.size()) {
    std::size_t end = statement.find('\n', pos);
    if (end == std::string_view::npos) end = statement.size();
    std::string_view line = statement.substr(pos, end - pos);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) {
      line.remove_prefix(1);
    }
    if (!line.empty() && !line.starts_with("--")) return false;
    pos = end + 1;
  }
  return true;
}

}  // namespace

Result<std::vector<Migration>> ParseMigrations(std::span<const EmbeddedFile> files) {
  std::vector<Migration> out;
  for (const EmbeddedFile& f : files) {
    const std::string name(f.name);
    if (name.size() < 10 || !IsDigits(name.substr(0, 4)) || name[4] != '_' ||
        !name.ends_with(".sql")) {
      return Status::Internal("migration file " + name + ": the name is not NNNN_name.sql");
    }
    Migration m;
    m.version = std::stoi(name.substr(0, 4));
    m.name = name;
    m.text = f.text;
    if (m.version != static_cast<int>(out.size()) + 1) {
      return Status::Internal("migration file " + name + ": expected version " +
                              std::to_string(out.size() + 1) + " (versions go 1, 2, ... without a gap)");
    }
    const std::string_view first = f.text.substr(0, f.text.find('\n'));
    if (!first.starts_with("-- ") || TrimRight(first.substr(3)).empty()) {
      return Status::Internal("migration file " + name +
                              ": the first line is not \"-- <description>\"");
    }
    m.description = std::string(TrimRight(first.substr(3)));
    out.push_back(std::move(m));
  }
  return out;
}

Status RunMigrations(MigrationTarget& target, std::span<const Migration> migrations, int up_to,
                     std::vector<int>* applied_now) {
  OUTBOX_RETURN_IF_ERROR(target.Begin());
  std::vector<int> applied;
  auto run = [&]() -> Status {
    auto have = target.AppliedVersions();
    if (!have.ok()) return have.status();
    for (const Migration& m : migrations) {
      if (up_to > 0 && m.version > up_to) break;
      if (have->count(m.version)) continue;
      OUTBOX_RETURN_IF_ERROR(target.Apply(m));
      applied.push_back(m.version);
    }
    return Status::Ok();
  };
  Status st = run();
  Status ended = target.End(st.ok());
  if (!st.ok()) return st;
  OUTBOX_RETURN_IF_ERROR(ended);
  if (applied_now) *applied_now = std::move(applied);
  return Status::Ok();
}

void CompareVersions(std::span<const Migration> migrations, const std::set<int>& applied,
                     SchemaCheck* check) {
  std::set<int> known;
  for (const Migration& m : migrations) {
    known.insert(m.version);
    if (!applied.count(m.version)) check->pending.push_back(m.version);
  }
  for (int v : applied) {
    check->applied.push_back(v);
    if (!known.count(v)) check->unknown.push_back(v);
  }
}

void NoteVersionsAsDrift(std::string_view set_name, std::span<const Migration> migrations,
                         const std::set<int>& applied, SchemaCheck* check) {
  SchemaCheck other;
  CompareVersions(migrations, applied, &other);
  const std::string prefix = std::string(set_name) + " migration ";
  for (int v : other.pending) check->drift.push_back(prefix + std::to_string(v) + ": not applied");
  for (int v : other.unknown) {
    check->drift.push_back(prefix + std::to_string(v) + ": unknown to this binary");
  }
}

std::vector<std::string> CompareCatalogs(const Catalog& live, const Catalog& reference) {
  std::vector<std::string> out;
  for (const auto& [name, definition] : reference) {
    auto it = live.find(name);
    if (it == live.end()) {
      out.push_back(name + ": missing");
    } else if (it->second != definition) {
      out.push_back(name + ": differs from what the migrations install");
    }
  }
  for (const auto& [name, definition] : live) {
    if (!reference.count(name)) out.push_back(name + ": not installed by the migrations");
  }
  return out;
}

std::string ReplaceAll(std::string text, std::string_view from, std::string_view to) {
  if (from.empty()) return text;
  for (std::size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

std::vector<std::string> SplitStatements(std::string_view script) {
  std::vector<std::string> out;
  std::string delimiter = ";";
  std::string current;
  std::size_t pos = 0;
  while (pos < script.size()) {
    std::size_t end = script.find('\n', pos);
    if (end == std::string_view::npos) end = script.size();
    const std::string_view line = script.substr(pos, end - pos);
    pos = end + 1;
    if (line.starts_with("DELIMITER ")) {
      delimiter = std::string(TrimRight(line.substr(10)));
      continue;
    }
    const std::string_view trimmed = TrimRight(line);
    if (trimmed.ends_with(delimiter)) {
      current.append(trimmed.substr(0, trimmed.size() - delimiter.size()));
      if (!OnlyCommentsAndBlanks(current)) out.push_back(std::move(current));
      current.clear();
    } else {
      current.append(line);
      current.push_back('\n');
    }
  }
  if (!OnlyCommentsAndBlanks(current)) out.push_back(std::move(current));
  return out;
}

}  // namespace outbox::store
