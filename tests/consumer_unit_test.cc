// outbox-consumer's configuration and effects, without servers: the
// [[handler]] tables, every check that refuses a configuration (naming the
// key), the parameters a sql handler receives, placeholder splitting for
// MariaDB, the dedup rules and the SQLSTATE classes.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "consumer_config.h"
#include "handlers.h"

namespace outbox::consumer_daemon {
namespace {

using namespace std::chrono_literals;

const char* kBase = R"(
[database]
url = "postgresql://app:secret@db/app"
[kafka]
bootstrap = "k:9092"
)";

Result<Config> Load(const std::string& toml, std::vector<std::pair<std::string, std::string>> sets = {}) {
  return LoadConfig(kBase + toml, "c.toml", {}, sets);
}

std::string Error(const std::string& toml, std::vector<std::pair<std::string, std::string>> sets = {}) {
  auto c = Load(toml, std::move(sets));
  return c.ok() ? "(loaded)" : c.status().message();
}

TEST(ConsumerConfig, HandlersAreTablesInOrderWithDefaults) {
  auto c = Load(R"toml(
[[handler]]
topic = "outbox.event.lesson"
group = "activity"
sql = "select a.f($1, $2, $3, $4)"
[[handler]]
topic = "outbox.event.user"
group = "mailer"
http = "http://mailer:8080/events"
ordered = true
retries = "500ms,2s,1m"
dedup = "payload:/user/id"
timeout_ms = 2500
)toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->handlers.size(), 2u);
  EXPECT_EQ(c->handlers[0].kind(), HandlerKind::kSql);
  EXPECT_EQ(c->handlers[0].retries, (std::vector<std::chrono::milliseconds>{1s, 10s, 60s}));
  EXPECT_EQ(c->handlers[0].dedup.kind, DedupRule::Kind::kEventId);
  EXPECT_FALSE(c->handlers[0].ordered);
  EXPECT_EQ(c->handlers[1].kind(), HandlerKind::kHttp);
  EXPECT_TRUE(c->handlers[1].ordered);
  EXPECT_EQ(c->handlers[1].retries, (std::vector<std::chrono::milliseconds>{500ms, 2s, 60s}));
  EXPECT_EQ(c->handlers[1].dedup.kind, DedupRule::Kind::kPayload);
  EXPECT_EQ(c->handlers[1].dedup.arg, "/user/id");
  EXPECT_EQ(c->handlers[1].timeout, 2500ms);
  EXPECT_EQ(c->kafka.at("bootstrap.servers"), "k:9092");

  // Printed back: the password redacted, both handlers as [[handler]] tables,
  // and what is printed loads to the same.
  const std::string printed = PrintConfig(*c);
  EXPECT_EQ(printed.find("secret"), std::string::npos) << printed;
  EXPECT_NE(printed.find("[[handler]]\ntopic = \"outbox.event.user\""), std::string::npos) << printed;
  EXPECT_NE(printed.find("retries = \"500ms,2s,60s\""), std::string::npos) << printed;
}

TEST(ConsumerConfig, SetAddressesOneHandler) {
  auto c = Load("[[handler]]\ntopic = \"t\"\ngroup = \"g\"\nsql = \"select 1\"\n",
                {{"handler.0.ordered", "true"}, {"handler.1.topic", "u"}, {"handler.1.group", "h"},
                 {"handler.1.http", "http://x/"}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->handlers.size(), 2u);
  EXPECT_TRUE(c->handlers[0].ordered);
  EXPECT_EQ(c->handlers[1].topic, "u");
}

TEST(ConsumerConfig, EveryRefusalNamesTheKey) {
  const std::string h = "[[handler]]\ntopic = \"t\"\ngroup = \"g\"\n";
  EXPECT_NE(Error("").find("no [[handler]]"), std::string::npos);
  EXPECT_NE(Error("[[handler]]\ngroup = \"g\"\nsql = \"x\"\n").find("handler.0.topic is required"),
            std::string::npos);
  EXPECT_NE(Error("[[handler]]\ntopic = \"t\"\nsql = \"x\"\n").find("handler.0.group is required"),
            std::string::npos);
  EXPECT_NE(Error(h).find("handler.0.sql / http: set exactly one"), std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\nhttp = \"http://a/\"\n").find("set exactly one"), std::string::npos);
  EXPECT_NE(Error(h + "sql = \"select f($1, $5)\"\n").find("handler.0.sql: $5 is not a parameter"),
            std::string::npos);
  EXPECT_NE(Error(h + "sql = \"select f($12)\"\n").find("$12 is not a parameter"), std::string::npos);
  EXPECT_EQ(Error(h + "sql = \"select $$a$$ || $1\"\n"), "(loaded)");  // dollar quoting is no parameter
  EXPECT_NE(Error(h + "http = \"ftp://a/\"\n").find("handler.0.http"), std::string::npos);
  EXPECT_NE(Error(h + "http = \"http://a/{event_type}\"\n").find("placeholders"), std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\nretries = \"1s,ten\"\n").find("config key handler.0.retries: invalid value"),
            std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\nretries = \"5\"\n").find("handler.0.retries"), std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\ndedup = \"id\"\n").find("config key handler.0.dedup: invalid value"),
            std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\ndedup = \"payload:user\"\n").find("not a JSON pointer"),
            std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\nordered = \"maybe\"\n").find("handler.0.ordered"), std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\ntimeout_ms = 0\n").find("handler.0.timeout_ms"), std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\nretry = \"1s\"\n").find("unknown config key handler.0.retry"),
            std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\n[[handler]]\ntopic = \"u\"\ngroup = \"g\"\nsql = \"y\"\n")
                .find("handler.1.group: \"g\" is another handler's group"),
            std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\n[kafka.properties]\n\"group.id\" = \"g\"\n").find("group.id"),
            std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\n", {{"handler.99.topic", "t"}}).find("unknown config key handler.99"),
            std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\n", {{"database.inbox_schema", "a-b"}}).find("database.inbox_schema"),
            std::string::npos);
  EXPECT_NE(Error(h + "sql = \"x\"\ntopics = [\"a\"]\n").find("handler.0.topics: arrays are not supported"),
            std::string::npos);
  auto no_db = LoadConfig(h + "sql = \"x\"\n[kafka]\nbootstrap = \"k\"\n", "c.toml", {}, {});
  EXPECT_NE(no_db.status().message().find("database.url is required"), std::string::npos);
}

// Issue 43: a handler reads Kafka or RabbitMQ. The default is the broker
// configured; with both, each handler says which; a broker named without its
// connection, a bad URL or a direct exchange is refused naming the key; the
// password is never printed.
TEST(ConsumerConfig, TheBrokerIsTheOneConfiguredOrTheHandlersChoice) {
  const std::string db = "[database]\nurl = \"postgresql://app:secret@db/app\"\n";
  const std::string rabbit = "[rabbitmq]\nurl = \"amqp://app:s3cret@mq:5672/%2F\"\n";
  const std::string h = "[[handler]]\ntopic = \"outbox.event.order\"\ngroup = \"billing\"\nsql = \"x\"\n";
  auto load = [](const std::string& toml, std::vector<std::pair<std::string, std::string>> sets = {}) {
    return LoadConfig(toml, "c.toml", {}, sets);
  };
  auto only_rabbit = load(db + rabbit + h);
  ASSERT_TRUE(only_rabbit.ok()) << only_rabbit.status().message();
  EXPECT_EQ(only_rabbit->handlers[0].broker, "rabbitmq");
  EXPECT_TRUE(only_rabbit->rabbitmq.declare) << "the consumer declares its queues and exchanges";
  EXPECT_EQ(only_rabbit->rabbitmq_prefetch, 2000);
  const std::string printed = PrintConfig(*only_rabbit);
  EXPECT_EQ(printed.find("s3cret"), std::string::npos) << printed;
  EXPECT_NE(printed.find("amqp://app:***@mq:5672/%2F"), std::string::npos) << printed;
  auto only_kafka = Load(h);
  ASSERT_TRUE(only_kafka.ok());
  EXPECT_EQ(only_kafka->handlers[0].broker, "kafka");
  auto both = load(db + rabbit + "[kafka]\nbootstrap = \"k:9092\"\n" + h);
  EXPECT_NE(both.status().message().find("handler.0.broker is required when both"), std::string::npos)
      << both.status().message();
  auto chosen = load(db + rabbit + "[kafka]\nbootstrap = \"k:9092\"\n" + h + "broker = \"rabbitmq\"\n");
  ASSERT_TRUE(chosen.ok()) << chosen.status().message();
  EXPECT_EQ(chosen->handlers[0].broker, "rabbitmq");
  EXPECT_NE(Error(h + "broker = \"rabbitmq\"\n").find("handler.0.broker = \"rabbitmq\" needs rabbitmq.url"),
            std::string::npos);
  EXPECT_NE(load(db + rabbit + h + "broker = \"kafka\"\n").status().message().find("needs kafka.bootstrap"),
            std::string::npos);
  EXPECT_NE(Error(h + "broker = \"sqs\"\n").find("config key handler.0.broker: invalid value"),
            std::string::npos);
  EXPECT_NE(load(db + h).status().message().find("kafka.bootstrap (or OUTBOX_KAFKA_BOOTSTRAP) or rabbitmq.url"),
            std::string::npos);
  const std::string bad_url = load(db + "[rabbitmq]\nurl = \"amqp://app:s3cret@mq:99999/%2F\"\n" + h).status().message();
  EXPECT_NE(bad_url.find("rabbitmq.url"), std::string::npos) << bad_url;
  EXPECT_EQ(bad_url.find("s3cret"), std::string::npos) << bad_url;
  EXPECT_NE(load(db + rabbit + h, {{"rabbitmq.exchange_type", "direct"}}).status().message()
                .find("rabbitmq.exchange_type: direct cannot route"),
            std::string::npos);
  EXPECT_NE(load(db + rabbit + h, {{"rabbitmq.prefetch", "0"}}).status().message().find("rabbitmq.prefetch"),
            std::string::npos);
  EXPECT_NE(load(db + rabbit + h, {{"handler.0.group", std::string(250, 'g')}}).status().message()
                .find("within 255 bytes"),
            std::string::npos);
}

// Issue 41: values of the wrong TOML type were coerced (`ordered = "yes"`,
// `ordered = 1`, `batch_size = "500"`); a --set past the last handler named
// another handler; `timeout_ms` on an sql handler did nothing.
TEST(ConsumerConfig, WrongTomlTypesGapsAndKeysThatDoNothingAreRefused) {
  const std::string h = "[[handler]]\ntopic = \"t\"\ngroup = \"g\"\nsql = \"x\"\n";
  const std::string yes = Error(h + "ordered = \"yes\"\n");
  EXPECT_NE(yes.find("config key handler.0.ordered: a TOML boolean is expected"), std::string::npos) << yes;
  EXPECT_NE(yes.find("not the string \"yes\""), std::string::npos) << yes;
  EXPECT_NE(Error(h + "ordered = 1\n").find("handler.0.ordered: a TOML boolean is expected"),
            std::string::npos);
  EXPECT_NE(Error("[consumer]\nbatch_size = \"500\"\n" + h).find("consumer.batch_size: a TOML integer"),
            std::string::npos);
  EXPECT_NE(Error("[consumer]\nbatch_wait_ms = 2.5\n" + h).find("consumer.batch_wait_ms: a TOML integer"),
            std::string::npos);
  EXPECT_EQ(Error(h + "ordered = true\n[consumer]\nbatch_size = 500\n"), "(loaded)");
  // --set and the environment give text: parsed as before.
  EXPECT_EQ(Error(h, {{"handler.0.ordered", "true"}, {"consumer.batch_size", "50"}}), "(loaded)");
  const std::string gap = Error(h, {{"handler.7.topic", "x"}});
  EXPECT_NE(gap.find("config key handler.7.topic: there is no handler.6"), std::string::npos) << gap;
  EXPECT_NE(gap.find("the next one is handler.1"), std::string::npos) << gap;
  EXPECT_EQ(gap.find("handler.1.topic is required"), std::string::npos) << gap;
  EXPECT_NE(Error(h + "timeout_ms = 5000\n").find("handler.0.timeout_ms: applies to http handlers only"),
            std::string::npos);
}

// Every default docs/consumer.md states is what --print-config shows.
TEST(ConsumerConfig, TheDocumentedDefaultsAreTheBinarysDefaults) {
  auto c = Load("[[handler]]\ntopic = \"t\"\ngroup = \"g\"\nhttp = \"http://a/\"\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const std::string printed = PrintConfig(*c);
  std::map<std::string, std::string> shown;  // section.key -> value, quotes dropped
  std::string section;
  std::istringstream lines(printed);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > 2 && line[0] == '[') {
      section = line.substr(line.find_first_not_of('['), line.find(']') - line.find_first_not_of('['));
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string v = line.substr(eq + 3);
    if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
    shown[section + "." + line.substr(0, eq)] = v;
  }
  std::ifstream doc(std::string(OUTBOX_SOURCE_DIR) + "/docs/consumer.md");
  ASSERT_TRUE(doc) << "docs/consumer.md";
  int checked = 0;
  section = "";
  for (std::string line; std::getline(doc, line);) {
    if (line.rfind("### `[[handler]]`", 0) == 0) section = "handler";
    if (line.rfind("## ", 0) == 0 && section == "handler") break;  // the tables end there
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    for (std::size_t at = 1, bar; (bar = line.find(" |", at)) != std::string::npos; at = bar + 2) {
      std::string cell = line.substr(at, bar - at);
      cell.erase(0, cell.find_first_not_of(' '));
      cells.push_back(cell);
    }
    const bool handler = section == "handler";
    if (cells.size() < (handler ? 2u : 3u)) continue;
    std::string key = cells[0].substr(1, cells[0].find('`', 1) - 1);
    std::string def = cells[handler ? 1 : 2];
    if (handler) key = "handler." + key;
    if (def.empty() || def.rfind("—", 0) == 0 || key.find('*') != std::string::npos) continue;
    def = def.substr(0, def.find(" ("));
    if (def.size() >= 2 && def.front() == '`') def = def.substr(1, def.size() - 2);
    if (def.size() >= 2 && def.front() == '"') def = def.substr(1, def.size() - 2);
    ASSERT_TRUE(shown.count(key)) << key << " is documented but not printed:\n" << printed;
    EXPECT_EQ(shown[key], def) << key << ": docs/consumer.md says " << def;
    ++checked;
  }
  EXPECT_GE(checked, 13) << "the tables were read";
}

TEST(ConsumerConfig, RetriesAndDedupRoundTrip) {
  auto r = ParseRetries("k", "");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());  // no retry topics: straight to the dead-letter topic
  EXPECT_EQ(FormatRetries(*ParseRetries("k", " 250ms, 3s ,2m")), "250ms,3s,120s");
  EXPECT_FALSE(ParseRetries("k", "-1s").ok());
  EXPECT_FALSE(ParseRetries("k", "1h").ok());
  EXPECT_EQ(FormatDedup(*ParseDedup("k", "header:x-request-id")), "header:x-request-id");
  EXPECT_FALSE(ParseDedup("k", "header:").ok());
  EXPECT_FALSE(ParseDedup("k", "payload:").ok());
}

InboundMessage Msg(std::string payload, std::map<std::string, std::string> headers = {}) {
  InboundMessage m;
  m.topic = "t";
  m.key = "agg-1";
  m.payload = std::move(payload);
  m.headers = std::move(headers);
  return m;
}

TEST(ConsumerHandlers, SqlParamsAreTypedText) {
  auto p = SqlParams(Msg(std::string("{\"a\":1}\x00\xff", 9),
                         {{"outbox-event-id", "e1"}, {"bin", std::string("\xff", 1)}}));
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(*p[0], "\\x7b2261223a317d00ff");
  EXPECT_EQ(*p[1], "{\"bin\":\"\xEF\xBF\xBD\",\"outbox-event-id\":\"e1\"}");  // U+FFFD for a byte
  EXPECT_EQ(*p[2], "e1");
  EXPECT_EQ(*p[3], "agg-1");
  InboundMessage tomb = Msg("");
  tomb.payload_is_null = true;
  auto t = SqlParams(tomb);
  EXPECT_FALSE(t[0].has_value());
  EXPECT_FALSE(t[2].has_value());  // no event id header: NULL
}

TEST(ConsumerHandlers, PlaceholdersOutsideQuotesOnly) {
  SqlTemplate t = SplitPlaceholders("CALL p($1, '$2', \"$3\", `$4`, 'it''s $1', 'a\\'$2', $4, $10)");
  EXPECT_EQ(t.params, (std::vector<std::size_t>{0, 3}));
  ASSERT_EQ(t.pieces.size(), 3u);
  EXPECT_EQ(t.pieces[0], "CALL p(");
  EXPECT_EQ(t.pieces[1], ", '$2', \"$3\", `$4`, 'it''s $1', 'a\\'$2', ");
  EXPECT_EQ(t.pieces[2], ", $10)");
}

TEST(ConsumerHandlers, DedupRules) {
  auto by_header = MakeDedup({DedupRule::Kind::kHeader, "x-id"});
  EXPECT_EQ(*by_header(Msg("", {{"x-id", "A"}})), "A");
  EXPECT_NE(by_header(Msg("")).status().message().find("no x-id header"), std::string::npos);
  auto by_payload = MakeDedup({DedupRule::Kind::kPayload, "/user/id"});
  EXPECT_EQ(*by_payload(Msg(R"({"user":{"id":"u7"}})")), "u7");
  EXPECT_EQ(*by_payload(Msg(R"({"user":{"id":42}})")), "42");
  EXPECT_NE(by_payload(Msg("not json")).status().message().find("not JSON"), std::string::npos);
  EXPECT_NE(by_payload(Msg(R"({"user":{}})")).status().message().find("no such member"), std::string::npos);
  EXPECT_NE(by_payload(Msg(R"({"user":{"id":[1]}})")).status().message().find("not a string"),
            std::string::npos);
  auto by_id = MakeDedup({});
  EXPECT_EQ(*by_id(Msg("", {{"outbox-event-id", "e9"}})), "e9");
}

TEST(ConsumerHandlers, SqlStateClasses) {
  for (const char* s : {"40001", "40P01", "08006", "53300", "55P03", "57014", "57P01", "58030", "XX000", "70100", ""}) {
    EXPECT_EQ(SqlHandlerErrorClass(s), ErrorClass::kTransient) << s;
  }
  for (const char* s : {"22P02", "23505", "42883", "42P01", "42601", "P0001", "45000", "HY000", "2BP01"}) {
    EXPECT_EQ(SqlHandlerErrorClass(s), ErrorClass::kPermanent) << s;
  }
}

}  // namespace
}  // namespace outbox::consumer_daemon
