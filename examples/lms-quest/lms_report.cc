// lms-report: the demo's report, computed only from what the system stored —
// the LMS database (completions, outbox rows), the broker (the topic, read from
// the beginning) and the learning-activity database (effects, rewards, missions,
// inbox stamps). It keeps no counters of its own and trusts none of the
// processes' logs.
//
//   lms-report --lms-db URL --activity-db URL --bootstrap HOST:PORT[,...]
//              [--topic outbox.event.lesson] [--quest-lessons 5] [--mission-lesson 1]
//              [--consumer learning-activity] [--outbox-schema outbox] [--inbox-schema inbox]
// Exit status: 0 when nothing was lost and nothing applied twice (and every
// reward and mission matches the completions); 1 otherwise; 2 bad usage.
#include <chrono>
#include <cstdio>
#include <set>
#include <tuple>

#include "../common/read_topic.h"
#include "common.h"

namespace {

// Runs a query that must succeed; exits 1 with the error otherwise.
lms::Res Must(PGconn* c, const std::string& sql, const std::vector<std::string>& params = {}) {
  std::string err;
  lms::Res r = lms::Query(c, sql, params, &err);
  if (!r) {
    std::cerr << "lms-report: " << err;
    std::exit(1);
  }
  return r;
}

long Long(PGresult* r, int row, int col) { return std::atol(PQgetvalue(r, row, col)); }

void Line(const char* label, const std::string& value, const std::string& note = "") {
  std::printf("  %-44s %10s%s%s\n", label, value.c_str(), note.empty() ? "" : "   ", note.c_str());
}
void Line(const char* label, long value, const std::string& note = "") {
  Line(label, std::to_string(value), note);
}

}  // namespace

int main(int argc, char** argv) {
  lms::Flags f(argc, argv, "lms-report",
               {{"lms-db", ""}, {"activity-db", ""}, {"bootstrap", ""}, {"topic", "outbox.event.lesson"},
                {"quest-lessons", "5"}, {"mission-lesson", "1"}, {"consumer", "learning-activity"},
                {"outbox-schema", "outbox"}, {"inbox-schema", "inbox"}});
  const std::string os = f.Str("outbox-schema"), is = f.Str("inbox-schema");
  const long quest_lessons = f.Int("quest-lessons", 1);
  lms::Conn lms_db = lms::Connect(f.Required("lms-db"));
  lms::Conn act_db = lms::Connect(f.Required("activity-db"));
  for (PGconn* c : {lms_db.get(), act_db.get()}) {
    if (PQstatus(c) != CONNECTION_OK) {
      std::cerr << "lms-report: " << PQerrorMessage(c);
      return 1;
    }
  }

  // --- LMS database: the source of truth for what happened.
  using Pair = std::pair<long, long>;
  std::set<Pair> completed;
  std::map<std::pair<long, std::string>, long> per_user_day;
  std::set<long> did_mission_lesson;
  {
    lms::Res r = Must(lms_db.get(),
                      "SELECT user_id, lesson_id, (completed_at AT TIME ZONE 'UTC')::date FROM lms.lesson_completion");
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      const long u = Long(r.get(), i, 0), l = Long(r.get(), i, 1);
      completed.emplace(u, l);
      ++per_user_day[{u, PQgetvalue(r.get(), i, 2)}];
      if (l == f.Int("mission-lesson")) did_mission_lesson.insert(u);
    }
  }
  std::map<std::string, long> by_status;
  long outbox_rows = 0, attempts = 0;
  {
    lms::Res r = Must(lms_db.get(), "SELECT status, count(*), coalesce(sum(attempts), 0) FROM " + os +
                                        ".outbox WHERE event_type = 'LessonCompleted' GROUP BY status");
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      by_status[PQgetvalue(r.get(), i, 0)] = Long(r.get(), i, 1);
      outbox_rows += Long(r.get(), i, 1);
      attempts += Long(r.get(), i, 2);
    }
  }
  const long without_event = std::atol(lms::Scalar(
      lms_db.get(), "SELECT count(*) FROM lms.lesson_completion c WHERE NOT EXISTS (SELECT 1 FROM " + os +
                        ".outbox o WHERE o.dedup_key = 'LessonCompleted:' || c.user_id || ':' || c.lesson_id)",
      {}, "-1").c_str());

  // --- The broker.
  example::Topic topic = example::ReadTopic(f.Required("bootstrap"), f.Str("topic"), "lms-report");
  if (!topic.error.empty()) std::cerr << "lms-report: reading the topic: " << topic.error << "\n";

  // --- Learning-activity database: the effects.
  std::map<Pair, long> effects;
  {
    lms::Res r = Must(act_db.get(),
                      "SELECT user_id, object_id, count(*) FROM activity.exp_history "
                      "WHERE event_kind = 'LessonCompleted' GROUP BY 1, 2");
    for (int i = 0; i < PQntuples(r.get()); ++i) effects[{Long(r.get(), i, 0), Long(r.get(), i, 1)}] = Long(r.get(), i, 2);
  }
  long lost = 0, doubled = 0, extra_effects = 0, phantom = 0, applied = 0;
  for (const auto& p : completed) lost += effects.count(p) ? 0 : 1;
  for (const auto& [p, n] : effects) {
    applied += n;
    doubled += n > 1 ? 1 : 0;
    extra_effects += n - 1;
    phantom += completed.count(p) ? 0 : 1;
  }
  std::set<std::pair<long, std::string>> expected_rewards;
  for (const auto& [ud, n] : per_user_day) {
    if (n >= quest_lessons) expected_rewards.insert(ud);
  }
  std::map<std::pair<long, std::string>, long> rewards;
  long points = 0, rewards_granted = 0;
  {
    lms::Res r = Must(act_db.get(), "SELECT user_id, day::text, count(*), sum(points) FROM activity.quest_reward GROUP BY 1, 2");
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      rewards[{Long(r.get(), i, 0), PQgetvalue(r.get(), i, 1)}] = Long(r.get(), i, 2);
      rewards_granted += Long(r.get(), i, 2);
      points += Long(r.get(), i, 3);
    }
  }
  long double_rewards = 0, missing_rewards = 0, unearned_rewards = 0;
  for (const auto& [k, n] : rewards) {
    double_rewards += n > 1 ? 1 : 0;
    unearned_rewards += expected_rewards.count(k) ? 0 : 1;
  }
  for (const auto& k : expected_rewards) missing_rewards += rewards.count(k) ? 0 : 1;

  std::map<long, std::vector<long>> groups;
  {
    lms::Res r = Must(act_db.get(), "SELECT group_id, user_id FROM activity.group_member");
    for (int i = 0; i < PQntuples(r.get()); ++i) groups[Long(r.get(), i, 0)].push_back(Long(r.get(), i, 1));
  }
  std::set<long> expected_missions;
  for (const auto& [g, members] : groups) {
    bool all = true;
    for (long u : members) all = all && did_mission_lesson.count(u);
    if (all) expected_missions.insert(g);
  }
  std::map<long, long> missions;
  {
    lms::Res r = Must(act_db.get(), "SELECT group_id, count(*) FROM activity.group_mission_completion GROUP BY 1");
    for (int i = 0; i < PQntuples(r.get()); ++i) missions[Long(r.get(), i, 0)] = Long(r.get(), i, 1);
  }
  long double_missions = 0, missions_off = 0;
  for (const auto& [g, n] : missions) {
    double_missions += n > 1 ? 1 : 0;
    missions_off += expected_missions.count(g) ? 0 : 1;
  }
  for (long g : expected_missions) missions_off += missions.count(g) ? 0 : 1;

  lms::Res stamps = Must(act_db.get(), "SELECT count(*), coalesce(sum(duplicates), 0) FROM " + is +
                                           ".inbox_stamps WHERE consumer = $1",
                         {f.Str("consumer")});
  lms::Res lat = Must(act_db.get(),
                      "SELECT count(*), percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY "
                      "extract(epoch FROM applied_at - occurred_at) * 1000) FROM activity.exp_history");
  std::string p50 = "-", p99 = "-";
  if (Long(lat.get(), 0, 0) > 0) {
    std::string arr = PQgetvalue(lat.get(), 0, 1);  // {p50,p99}
    const auto comma = arr.find(',');
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", std::atof(arr.c_str() + 1));
    p50 = buf;
    std::snprintf(buf, sizeof buf, "%.1f", std::atof(arr.c_str() + comma + 1));
    p99 = buf;
  }

  auto status_note = [&] {
    std::string s;
    for (const char* st : {"SENT", "PENDING", "PROCESSING", "FAILED"}) {
      s += (s.empty() ? "" : ", ") + std::string(st) + " " + std::to_string(by_status[st]);
    }
    return s;
  };
  const long distinct = static_cast<long>(topic.event_ids.size());
  std::printf("\n== LMS -> quest report (from the LMS and learning-activity databases and the broker)\n");
  Line("lessons completed (LMS rows)", static_cast<long>(completed.size()));
  Line("events enqueued (outbox rows)", outbox_rows, status_note());
  Line("  completions without an outbox row", without_event);
  Line("publish attempts (sum of outbox attempts)", attempts);
  Line("events published (distinct ids on the topic)", distinct);
  Line("messages on the topic", topic.messages, topic.error.empty() ? "" : "(read failed: " + topic.error + ")");
  Line("  duplicate copies published by relays", topic.messages - distinct);
  const long delivered_again = Long(stamps.get(), 0, 1);
  Line("duplicates delivered to the consumer", delivered_again,
       "copies whose stamp was already there (inbox_stamps.duplicates)");
  Line("duplicates absorbed (not applied again)", delivered_again - extra_effects,
       "stamps: " + std::to_string(Long(stamps.get(), 0, 0)));
  Line("effects applied (experience-history rows)", applied, "value 0 each: points from quests only");
  Line("daily quests completed (expected from LMS)", static_cast<long>(expected_rewards.size()),
       "\"complete " + std::to_string(quest_lessons) + " lessons today\"");
  Line("rewards granted", rewards_granted, std::to_string(points) + " points");
  Line("group missions completed", static_cast<long>(missions.size()),
       "expected " + std::to_string(expected_missions.size()) + " of " + std::to_string(groups.size()) + " groups");
  Line("commit -> effect latency p50 / p99 (ms)", p50 + " / " + p99);
  std::printf("  --\n");
  Line("lost (completed, no effect)", lost);
  Line("double effects", doubled);
  Line("double rewards", double_rewards);
  Line("missing or unearned rewards", missing_rewards + unearned_rewards);
  Line("missions wrong or doubled", missions_off + double_missions);
  Line("effects without a completion", phantom);
  const bool ok = lost == 0 && doubled == 0 && double_rewards == 0 && missing_rewards == 0 &&
                  unearned_rewards == 0 && missions_off == 0 && double_missions == 0 && phantom == 0 &&
                  without_event == 0 && distinct == outbox_rows && by_status["SENT"] == outbox_rows;
  std::printf("  verdict: %s\n", ok ? "OK - every completion took effect exactly once"
                                    : "FAILED - see the lines above");
  return ok ? 0 : 1;
}
