// The one migration runner every store shares, and the frozen migration files
// it applies. Internal to src/store.
//
// A store's schema changes are files, src/store/<db>/migrations/<set>/NNNN_name.sql,
// embedded into the library at build time (cmake/EmbedFiles.cmake) and frozen
// once released: src/store/migrations.sha256 holds each file's checksum and a
// test fails when one changes. New behaviour is a new file. A file's first line
// is "-- <description>", which the runner records with the version.
//
// The runner decides (which versions are missing, in which order) and a
// MigrationTarget does the database's part: PostgreSQL applies a whole run in
// one transaction; MariaDB commits each DDL statement on its own, so its files
// are idempotent statements and a run cut short is finished by the next one.
#ifndef OUTBOX_SRC_STORE_COMMON_MIGRATIONS_H_
#define OUTBOX_SRC_STORE_COMMON_MIGRATIONS_H_

#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/status.h"
#include "outbox/store.h"

namespace outbox::store {

// A file as embedded at build time: its name (NNNN_name.sql) and its bytes.
struct EmbeddedFile {
  std::string_view name;
  std::string_view text;
};

struct Migration {
  int version = 0;           // NNNN
  std::string name;          // the file's name
  std::string description;   // the first line, without "-- "
  std::string_view text;     // the whole file, borrowed from the embedded bytes
};

// The files of one set in version order. Fails (naming the file) when a name
// is not NNNN_name.sql, the versions are not 1, 2, ... without a gap, or a file
// does not start with "-- <description>".
Result<std::vector<Migration>> ParseMigrations(std::span<const EmbeddedFile> files);

// One database's side of a run. Not thread-safe; one run at a time.
class MigrationTarget {
 public:
  virtual ~MigrationTarget() = default;
  // Takes the set's lock (and opens a transaction where DDL is transactional)
  // and creates the versions table if missing.
  virtual Status Begin() = 0;
  virtual Result<std::set<int>> AppliedVersions() = 0;
  // Runs the file and records its version.
  virtual Status Apply(const Migration& m) = 0;
  // Commits (ok) or rolls back what can be, and releases the lock. Called once
  // after a successful Begin, whatever happened since.
  virtual Status End(bool ok) = 0;
};

// Applies, in order, every migration not yet recorded with version <= `up_to`
// (0: all). `applied_now` (optional) receives the versions applied.
Status RunMigrations(MigrationTarget& target, std::span<const Migration> migrations, int up_to = 0,
                     std::vector<int>* applied_now = nullptr);

// Fills `check`'s pending and unknown versions from the applied ones.
void CompareVersions(std::span<const Migration> migrations, const std::set<int>& applied,
                     SchemaCheck* check);

// Another set's (the inbox's, sharing the schema) missing or unknown versions,
// as lines of `check->drift`: "inbox migration 3: not applied".
void NoteVersionsAsDrift(std::string_view set_name, std::span<const Migration> migrations,
                         const std::set<int>& applied, SchemaCheck* check);

// A catalog: object name ("index outbox_claim_idx") -> its definition.
using Catalog = std::map<std::string, std::string>;

// One line per object that differs between the live catalog and the reference
// (what the migrations install): "X: differs", "X: missing", "X: not installed
// by the migrations".
std::vector<std::string> CompareCatalogs(const Catalog& live, const Catalog& reference);

// Every occurrence of `from` in `text` replaced with `to`.
std::string ReplaceAll(std::string text, std::string_view from, std::string_view to);

// Splits a script into statements as the mysql client does: a statement ends
// with the delimiter (";" unless a "DELIMITER x" line changes it) at the end of
// a line. Statements that hold only comments and blanks are dropped.
std::vector<std::string> SplitStatements(std::string_view script);

}  // namespace outbox::store

#endif  // OUTBOX_SRC_STORE_COMMON_MIGRATIONS_H_
