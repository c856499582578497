#include "launch/summary_json.h"

#include <gtest/gtest.h>

namespace syncline {
namespace {

TEST(SummaryJsonTest, NumbersStringsAndNestedObjects) {
  auto fields = ParseSummaryJson(R"({
  "sync": "bsp", "steps": 120, "test_auc": 0.9089, "resumed_from_clock": null,
  "ok": true, "list": [1, {"a": 2}], "name": "a \"quoted\" \u00e9 name",
  "embedding": {"rows_in_memory": 10, "evictions": 3, "deep": {"x": -1.5e2}},
  "peak_rss_mib": {"ps0": 61.5, "w0": 40}
})");
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(*fields->at("sync").text, "bsp");
  EXPECT_EQ(*fields->at("steps").number, 120);
  EXPECT_EQ(*fields->at("name").text, "a \"quoted\" \xc3\xa9 name");
  EXPECT_EQ(*fields->at("embedding.deep.x").number, -150);
  EXPECT_EQ(fields->count("resumed_from_clock"), 0u);
  EXPECT_EQ(fields->count("list"), 0u);
  EXPECT_EQ(SummaryNumber(*fields, "test_auc"), 0.9089);
  EXPECT_EQ(SummaryNumber(*fields, "evictions"), 3);  // the one nested key of that name
  EXPECT_EQ(SummaryNumber(*fields, "peak_rss_mib.ps0"), 61.5);
  EXPECT_EQ(SummaryNumber(*fields, "ps0"), 61.5);
  EXPECT_EQ(SummaryNumber(*fields, "sync"), std::nullopt);  // a string
  EXPECT_EQ(SummaryNumber(*fields, "absent"), std::nullopt);
}

TEST(SummaryJsonTest, AmbiguousNestedKeysGiveNothing) {
  auto fields = ParseSummaryJson(R"({"a": {"n": 1}, "b": {"n": 2}})");
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(SummaryNumber(*fields, "n"), std::nullopt);
  EXPECT_EQ(SummaryNumber(*fields, "b.n"), 2);
}

TEST(SummaryJsonTest, SurrogatePairsBecomeOneCharacter) {
  auto fields = ParseSummaryJson(R"({"s": "\ud83d\ude00 ok"})");
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(*fields->at("s").text, "\xf0\x9f\x98\x80 ok");
}

TEST(SummaryJsonTest, MalformedTextNamesTheByte) {
  // Structure errors, an unknown escape, lone surrogates and a raw tab inside a string.
  for (const char* bad :
       {"", "[1]", "{\"a\" 1}", "{\"a\": 1,}", "{\"a\": 1} x", "{\"a\": {\"b\": 1}", "{\"a\": tru}",
        R"({"a": "\x"})", R"({"a": "\ud83d"})", R"({"a": "\ude00"})", "{\"a\": \"tab\there\"}"}) {
    auto fields = ParseSummaryJson(bad);
    EXPECT_EQ(fields.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(fields.status().message().find("at byte"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace syncline
