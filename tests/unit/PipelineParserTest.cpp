//===- PipelineParserTest.cpp - Unit tests of the pipeline parser ---------===//
//
// Valid pipelines (names, options, quoting, blanks), every syntax error with
// the column it must point at, print/parse round trips, and the semantic
// checks createPipeline adds on top (unknown pass with a suggestion,
// unknown option, bad value), each naming pass, key and column.
//
//===----------------------------------------------------------------------===//

#include "passes/PipelineParser.h"
#include "passes/PassRegistry.h"
#include "passes/transforms/Canonicalize.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

/// Parses \p text, which must fail; returns the message.
std::string parseError(llvm::StringRef text) {
  auto parsed = parsePipeline(text);
  if (parsed)
    return "<parsed " + std::to_string(parsed->size()) + " elements>";
  return llvm::toString(parsed.takeError());
}

/// The column an error message points at, or -1.
int errorColumn(const std::string &message) {
  size_t at = message.find("at column ");
  if (at == std::string::npos)
    return -1;
  return std::stoi(message.substr(at + 10));
}

TEST(PipelineParserTest, EmptyAndBlankPipelinesHaveNoElements) {
  auto empty = parsePipeline("");
  ASSERT_TRUE(static_cast<bool>(empty)) << errorText(empty.takeError());
  EXPECT_TRUE(empty->empty());
  auto blank = parsePipeline("  \t ");
  ASSERT_TRUE(static_cast<bool>(blank)) << errorText(blank.takeError());
  EXPECT_TRUE(blank->empty());
}

TEST(PipelineParserTest, ParsesNamesAndOptions) {
  auto parsed = parsePipeline("a,b{key=value,k2=v2},c");
  ASSERT_TRUE(static_cast<bool>(parsed)) << errorText(parsed.takeError());
  ASSERT_EQ(parsed->size(), 3u);
  const std::vector<PipelineElement> &elements = *parsed;
  EXPECT_EQ(elements[0].name, "a");
  EXPECT_EQ(elements[0].column, 1u);
  EXPECT_TRUE(elements[0].options.empty());
  EXPECT_EQ(elements[1].name, "b");
  EXPECT_EQ(elements[1].column, 3u);
  ASSERT_EQ(elements[1].options.size(), 2u);
  EXPECT_EQ(elements[1].options[0].key, "key");
  EXPECT_EQ(elements[1].options[0].value, "value");
  EXPECT_EQ(elements[1].options[0].keyColumn, 5u);
  EXPECT_EQ(elements[1].options[0].valueColumn, 9u);
  EXPECT_EQ(elements[1].options[1].key, "k2");
  EXPECT_EQ(elements[1].options[1].value, "v2");
  EXPECT_EQ(elements[2].name, "c");
  EXPECT_EQ(elements[2].column, 22u);
}

TEST(PipelineParserTest, IgnoresBlanksAroundTokens) {
  auto parsed =
      parsePipeline(" recompute { mode = selective , budget=1 } , amp ");
  ASSERT_TRUE(static_cast<bool>(parsed)) << errorText(parsed.takeError());
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].name, "recompute");
  EXPECT_EQ((*parsed)[0].column, 2u);
  ASSERT_EQ((*parsed)[0].options.size(), 2u);
  EXPECT_EQ((*parsed)[0].options[0].value, "selective");
  EXPECT_EQ((*parsed)[0].options[1].value, "1");
  EXPECT_EQ((*parsed)[1].name, "amp");
}

TEST(PipelineParserTest, EmptyOptionListIsAllowed) {
  auto parsed = parsePipeline("a{},b");
  ASSERT_TRUE(static_cast<bool>(parsed)) << errorText(parsed.takeError());
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_TRUE((*parsed)[0].options.empty());
}

TEST(PipelineParserTest, QuotedAndNestedValues) {
  auto parsed = parsePipeline(
      R"(a{s="x, y}",t='a,"b"',u="say \"hi\" \\o/",v={1,{2}},w=})");
  ASSERT_TRUE(static_cast<bool>(parsed)) << errorText(parsed.takeError());
  ASSERT_EQ(parsed->size(), 1u);
  const auto &options = (*parsed)[0].options;
  ASSERT_EQ(options.size(), 5u) << printPipeline(*parsed);
  EXPECT_EQ(options[0].value, "x, y}");
  EXPECT_EQ(options[1].value, "a,\"b\"");
  EXPECT_EQ(options[2].value, R"(say "hi" \o/)");
  EXPECT_EQ(options[3].value, "{1,{2}}");
  EXPECT_EQ(options[4].value, "");
}

TEST(PipelineParserTest, ErrorsPointAtTheirColumn) {
  struct Case {
    const char *text;
    int column;
    const char *message;
  };
  const Case cases[] = {
      {",a", 1, "empty pipeline element"},
      {"a,,b", 3, "empty pipeline element"},
      {"a,", 3, "empty pipeline element"},
      {"a{", 2, "unbalanced '{'"},
      {"a{k=v", 2, "unbalanced '{'"},
      {"a{k={1,2}", 2, "unbalanced '{'"},
      {"a}", 2, "unbalanced '}'"},
      {"a{k=v}}", 7, "unbalanced '}'"},
      {"a{k}", 4, "expected '=' after option key 'k'"},
      {"a{=v}", 3, "expected an option key of pass 'a'"},
      {"a{k=1,}", 7, "expected an option key"},
      {"a b", 3, "expected ',' after pass 'a'"},
      {"a{}b", 4, "expected ',' after pass 'a'"},
      {"{k=v}", 1, "expected a pass name before '{'"},
      {"a,$", 3, "unexpected character '$'"},
      {"a{k=\"v}", 5, "unterminated quoted value"},
      {"a{k=1,k=2}", 7, "option 'k' of pass 'a' is given twice"},
      {"a{k=\"v\"x}", 8,
       "unexpected character 'x' after the value of option 'k'"},
  };
  for (const Case &c : cases) {
    std::string message = parseError(c.text);
    EXPECT_EQ(errorColumn(message), c.column) << c.text << " -> " << message;
    EXPECT_NE(message.find(c.message), std::string::npos)
        << c.text << " -> " << message;
    EXPECT_NE(message.find(std::string("'") + c.text + "'"), std::string::npos)
        << "the error should quote the pipeline: " << message;
  }
}

TEST(PipelineParserTest, QuoteOnlyWhenNeeded) {
  EXPECT_EQ(quotePipelineValue("selective"), "selective");
  EXPECT_EQ(quotePipelineValue("1.5e-3"), "1.5e-3");
  EXPECT_EQ(quotePipelineValue(""), "\"\"");
  EXPECT_EQ(quotePipelineValue("a,b"), "\"a,b\"");
  EXPECT_EQ(quotePipelineValue("a b"), "\"a b\"");
  EXPECT_EQ(quotePipelineValue(R"(q"\)"), R"("q\"\\")");
}

TEST(PipelineParserTest, PrintThenParseIsIdentity) {
  std::vector<PipelineElement> elements(2);
  elements[0].name = "first";
  elements[0].options.push_back({"plain", "v", 0, 0});
  elements[0].options.push_back({"tricky", R"(a,b}{c="d"'e\f )", 0, 0});
  elements[0].options.push_back({"empty", "", 0, 0});
  elements[1].name = "second";
  std::string text = printPipeline(elements);
  auto reparsed = parsePipeline(text);
  ASSERT_TRUE(static_cast<bool>(reparsed))
      << text << ": " << errorText(reparsed.takeError());
  ASSERT_EQ(reparsed->size(), 2u);
  EXPECT_EQ((*reparsed)[0].name, "first");
  ASSERT_EQ((*reparsed)[0].options.size(), 3u);
  for (size_t i = 0; i != 3; ++i) {
    EXPECT_EQ((*reparsed)[0].options[i].key, elements[0].options[i].key);
    EXPECT_EQ((*reparsed)[0].options[i].value, elements[0].options[i].value);
  }
  EXPECT_EQ((*reparsed)[1].name, "second");
  EXPECT_EQ(printPipeline(*reparsed), text);
}

TEST(PipelineParserTest, CreatePipelineBuildsConfiguredPasses) {
  auto passes = createPipeline(
      "canonicalize{dce=false,max-fold-elements=64},canonicalize");
  ASSERT_TRUE(static_cast<bool>(passes)) << errorText(passes.takeError());
  ASSERT_EQ(passes->size(), 2u);
  auto *first = static_cast<CanonicalizePass *>((*passes)[0].get());
  EXPECT_FALSE(first->getPassOptions().dce);
  EXPECT_TRUE(first->getPassOptions().foldConstants);
  EXPECT_EQ(first->getPassOptions().maxFoldElements, 64u);
  auto *second = static_cast<CanonicalizePass *>((*passes)[1].get());
  EXPECT_TRUE(second->getPassOptions().dce);
  EXPECT_EQ(second->getPassOptions().maxFoldElements, 1024u);
}

TEST(PipelineParserTest, UnknownPassPointsAtItsNameAndSuggests) {
  auto typo = createPipeline("canonicalize,canonicalise");
  ASSERT_FALSE(static_cast<bool>(typo));
  std::string message = llvm::toString(typo.takeError());
  EXPECT_EQ(errorColumn(message), 14) << message;
  EXPECT_NE(message.find("unknown pass 'canonicalise'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("did you mean 'canonicalize'"), std::string::npos)
      << message;

  auto unrelated = createPipeline("nope");
  ASSERT_FALSE(static_cast<bool>(unrelated));
  message = llvm::toString(unrelated.takeError());
  EXPECT_EQ(errorColumn(message), 1) << message;
  EXPECT_NE(message.find("unknown pass 'nope' (see --list-passes)"),
            std::string::npos)
      << message;
}

TEST(PipelineParserTest, UnknownOptionNamesPassAndKey) {
  auto passes = createPipeline("canonicalize{dce=true,fold=1}");
  ASSERT_FALSE(static_cast<bool>(passes));
  std::string message = llvm::toString(passes.takeError());
  EXPECT_EQ(errorColumn(message), 23) << message;
  EXPECT_NE(message.find("pass 'canonicalize' has no option 'fold'"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("fold-constants"), std::string::npos)
      << "the error should list the valid options: " << message;
}

TEST(PipelineParserTest, BadValueNamesPassKeyAndValue) {
  auto passes = createPipeline("canonicalize{dce=maybe}");
  ASSERT_FALSE(static_cast<bool>(passes));
  std::string message = llvm::toString(passes.takeError());
  EXPECT_EQ(errorColumn(message), 18) << message;
  EXPECT_NE(message.find("pass 'canonicalize': option 'dce': invalid value "
                         "'maybe': expected true or false"),
            std::string::npos)
      << message;

  auto negative = createPipeline("canonicalize{max-fold-elements=-1}");
  ASSERT_FALSE(static_cast<bool>(negative));
  message = llvm::toString(negative.takeError());
  EXPECT_NE(message.find("option 'max-fold-elements'"), std::string::npos)
      << message;
}

} // namespace
