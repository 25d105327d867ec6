// The shared migration runner (store/common/migrations.h) against a fake
// target, and the frozen files both stores embed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "migrations.h"

namespace outbox::pg {
std::span<const store::EmbeddedFile> OutboxMigrationFiles();
std::span<const store::EmbeddedFile> InboxMigrationFiles();
}  // namespace outbox::pg
namespace outbox::maria {
std::span<const store::EmbeddedFile> OutboxMigrationFiles();
std::span<const store::EmbeddedFile> InboxMigrationFiles();
}  // namespace outbox::maria

namespace outbox::store {
namespace {

class FakeTarget : public MigrationTarget {
 public:
  std::set<int> applied;
  std::vector<std::string> calls;
  int fail_version = 0;

  Status Begin() override {
    calls.push_back("begin");
    return Status::Ok();
  }
  Result<std::set<int>> AppliedVersions() override { return applied; }
  Status Apply(const Migration& m) override {
    calls.push_back("apply " + std::to_string(m.version) + " " + m.description);
    if (m.version == fail_version) return Status::Internal("boom");
    applied.insert(m.version);
    return Status::Ok();
  }
  Status End(bool ok) override {
    calls.push_back(ok ? "commit" : "rollback");
    return Status::Ok();
  }
};

constexpr EmbeddedFile kThree[] = {
    {"0001_first.sql", "-- the first\nCREATE TABLE a ();\n"},
    {"0002_second.sql", "-- the second\nCREATE TABLE b ();\n"},
    {"0003_third.sql", "-- the third\nCREATE TABLE c ();\n"},
};

TEST(Migrations, ParsesVersionNameAndDescription) {
  auto m = ParseMigrations(kThree);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[1].version, 2);
  EXPECT_EQ((*m)[1].name, "0002_second.sql");
  EXPECT_EQ((*m)[1].description, "the second");
  EXPECT_EQ((*m)[1].text, kThree[1].text);
}

TEST(Migrations, RefusesAGapABadNameOrAMissingDescription) {
  const EmbeddedFile gap[] = {kThree[0], kThree[2]};
  auto a = ParseMigrations(gap);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("0003_third.sql: expected version 2"), std::string::npos)
      << a.status().message();
  const EmbeddedFile bad_name[] = {{"1_first.sql", "-- x\n"}};
  auto b = ParseMigrations(bad_name);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("1_first.sql: the name is not NNNN_name.sql"),
            std::string::npos);
  const EmbeddedFile no_description[] = {{"0001_first.sql", "CREATE TABLE a ();\n"}};
  auto c = ParseMigrations(no_description);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("-- <description>"), std::string::npos);
}

TEST(Migrations, AppliesOnlyTheMissingVersionsInOrderUpToTheTarget) {
  auto m = ParseMigrations(kThree);
  ASSERT_TRUE(m.ok());
  FakeTarget t;
  t.applied = {1};
  std::vector<int> now;
  ASSERT_TRUE(RunMigrations(t, *m, /*up_to=*/2, &now).ok());
  EXPECT_EQ(now, std::vector<int>({2}));
  EXPECT_EQ(t.calls, std::vector<std::string>({"begin", "apply 2 the second", "commit"}));
  t.calls.clear();
  ASSERT_TRUE(RunMigrations(t, *m, /*up_to=*/0, &now).ok());
  EXPECT_EQ(now, std::vector<int>({3}));
  t.calls.clear();
  ASSERT_TRUE(RunMigrations(t, *m, 0, &now).ok());
  EXPECT_TRUE(now.empty());
  EXPECT_EQ(t.calls, std::vector<std::string>({"begin", "commit"}));
}

TEST(Migrations, AFailedFileEndsTheRunAndRollsBack) {
  auto m = ParseMigrations(kThree);
  ASSERT_TRUE(m.ok());
  FakeTarget t;
  t.fail_version = 2;
  std::vector<int> now = {42};
  Status st = RunMigrations(t, *m, 0, &now);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(now, std::vector<int>({42}));  // untouched on failure
  EXPECT_EQ(t.calls, std::vector<std::string>(
                         {"begin", "apply 1 the first", "apply 2 the second", "rollback"}));
}

TEST(Migrations, SplitsStatementsAsTheMysqlClientDoes) {
  const auto s = SplitStatements(
      "-- a description; with a semicolon\n"
      "--\n"
      "CREATE TABLE a (\n  x INT\n);\n"
      "\n"
      "-- why b\n"
      "INSERT INTO a VALUES (1);\n"
      "DELIMITER $$\n"
      "CREATE PROCEDURE p()\nBEGIN\n  SELECT 1;\n  SELECT 2;\nEND\n$$\n"
      "DELIMITER ;\n"
      "-- trailing comment\n");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], "-- a description; with a semicolon\n--\nCREATE TABLE a (\n  x INT\n)");
  EXPECT_EQ(s[1], "\n-- why b\nINSERT INTO a VALUES (1)");
  EXPECT_EQ(s[2], "CREATE PROCEDURE p()\nBEGIN\n  SELECT 1;\n  SELECT 2;\nEND\n");
}

TEST(Migrations, EveryEmbeddedSetParses) {
  struct Set {
    const char* name;
    std::span<const EmbeddedFile> files;
    std::size_t at_least;
  };
  for (const Set& set : {Set{"postgres outbox", pg::OutboxMigrationFiles(), 9},
                         Set{"postgres inbox", pg::InboxMigrationFiles(), 3},
                         Set{"mariadb outbox", maria::OutboxMigrationFiles(), 1},
                         Set{"mariadb inbox", maria::InboxMigrationFiles(), 1}}) {
    auto m = ParseMigrations(set.files);
    ASSERT_TRUE(m.ok()) << set.name << ": " << m.status().ToString();
    EXPECT_GE(m->size(), set.at_least) << set.name;
  }
  // MariaDB runs a file statement by statement: its procedure stays whole.
  auto maria = ParseMigrations(maria::OutboxMigrationFiles());
  ASSERT_TRUE(maria.ok());
  const auto statements = SplitStatements((*maria)[0].text);
  ASSERT_EQ(statements.size(), 5u);
  EXPECT_NE(statements[4].find("CREATE OR REPLACE PROCEDURE outbox_enqueue"), std::string::npos);
  EXPECT_TRUE(statements[4].ends_with("END\n")) << statements[4].substr(statements[4].size() - 40);
}

}  // namespace
}  // namespace outbox::store
