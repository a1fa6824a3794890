//===- StorySuiteTest.cpp - The story-edit suite's pieces -------*- C++ -*-===//

#include "bench/StorySuite.h"

#include "driver/compiler/Compiler.h"
#include "runtime/core/KVRuntime.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace kvir::stories;

TEST(StorySuiteTest, ParsesStoriesAndRejectsBadLines) {
  std::vector<Story> stories;
  std::string error;
  ASSERT_TRUE(
      parseStories("# comment\n\nname|a|b|c|d|e|f|g|h\n", stories, error))
      << error;
  ASSERT_EQ(stories.size(), 1u);
  EXPECT_EQ(stories[0].segments[1], "b");
  EXPECT_EQ(stories[0].newFact, "f");
  EXPECT_EQ(stories[0].newEntity, "g");
  EXPECT_EQ(stories[0].correction, "h");

  EXPECT_FALSE(parseStories("# x\nname|a|b\n", stories, error));
  EXPECT_EQ(error, "line 2: expected 9 fields separated by '|' (name, intro, "
                   "fact, world, thought, answer, new fact, new entity, "
                   "correction), got 3");
  EXPECT_FALSE(parseStories("name|a||c|d|e|f|g|h\n", stories, error));
  EXPECT_EQ(error, "line 1: field 3 is empty");
  EXPECT_FALSE(parseStories("name|a|b|c|d|e|b|g|h\n", stories, error));
  EXPECT_EQ(error, "line 1: the new fact equals the old one");
  EXPECT_FALSE(parseStories("# only comments\n", stories, error));
  EXPECT_EQ(error, "no stories");
}

TEST(StorySuiteTest, NamesEntityAsAWordOrPlural) {
  EXPECT_TRUE(namesEntity(" Mia. Mia was happy", "Mia"));
  EXPECT_TRUE(namesEntity("cookies and milk", "cookie"));
  EXPECT_TRUE(namesEntity("two boxes", "box"));
  EXPECT_TRUE(namesEntity("key", "key"));
  EXPECT_FALSE(namesEntity("Miami", "Mia"));
  EXPECT_FALSE(namesEntity("a monkey", "key"));
  EXPECT_FALSE(namesEntity("keyboard", "key"));
  EXPECT_FALSE(namesEntity("Mia", "mia"));
  EXPECT_FALSE(namesEntity("anything", ""));
}

TEST(StorySuiteTest, StrategySpecs) {
  StrategySpec plain = parseStrategySpec("cot_slice, first_k = 4");
  EXPECT_FALSE(plain.misdeclared);
  EXPECT_EQ(plain.label(), "cot_slice, first_k = 4");
  StrategySpec compose = parseStrategySpec("compose, first_k = 4");
  EXPECT_TRUE(compose.compose);
  EXPECT_EQ(compose.strategy, "first_k = 4");
  EXPECT_EQ(compose.label(), "compose, first_k = 4");
  EXPECT_EQ(parseStrategySpec("compose").strategy, "");
  StrategySpec dropped = parseStrategySpec("!cot_slice");
  EXPECT_TRUE(dropped.misdeclared);
  EXPECT_EQ(dropped.strategy, "cot_slice");
  EXPECT_EQ(dropped.label(), "cot_slice [thought's dep dropped]");
}

// Every default strategy's program parses, verifies and plans; the
// mis-declared ones have no dependency of the thought on the fact.
TEST(StorySuiteTest, ProgramsPlan) {
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  c.dim = 64;
  c.hidden_dim = 172;
  c.n_layers = 5;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.vocab_size = 512;
  mlir::DialectRegistry registry;
  kvir::compiler::registerDialects(registry);
  mlir::MLIRContext context(registry);
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  for (const StrategySpec &s : defaultStrategies()) {
    std::string program = s.compose ? composeProgram(c, s) : storyProgram(c, s);
    EXPECT_EQ(program.find("kv.compose") != std::string::npos, s.compose);
    if (s.compose) {
      EXPECT_TRUE(kvir::compiler::parseProgram(context, program))
          << s.label() << ":\n"
          << diagnostics;
      continue;
    }
    bool declared = program.find("kv.segment @thought kind(thought) tokens(?) "
                                 "deps(@fact)") != std::string::npos;
    EXPECT_EQ(declared, !s.misdeclared) << program;
    EXPECT_TRUE(kvir::compiler::parseProgram(context, program))
        << s.label() << ":\n"
        << diagnostics;
  }
}
