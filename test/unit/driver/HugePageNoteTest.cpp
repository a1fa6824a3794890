//===- HugePageNoteTest.cpp - kv-run's note on 2 MiB pages ------*- C++ -*-===//
//
// run::hugePageNote decides when a token-list run says that its mapped
// weights lie on 2 MiB pages too little (a page cache that holds the file in
// smaller pieces makes decode slower; --no-mmap is the remedy).
//
//===----------------------------------------------------------------------===//

#include "driver/runner/Runner.h"

#include <gtest/gtest.h>

using kvir::run::hugePageNote;

namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

TEST(HugePageNote, NamesTheShareAndTheRemedy) {
  std::string note = hugePageNote(1000 * kMiB, 520 * kMiB, /*mappedFile=*/true,
                                  /*hugePagesOff=*/false);
  EXPECT_NE(note.find("52% of the weights are on 2 MiB pages"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("--no-mmap"), std::string::npos) << note;
}

TEST(HugePageNote, NoneAtThreeQuartersOrMore) {
  EXPECT_EQ(hugePageNote(1000 * kMiB, 750 * kMiB, true, false), "");
  EXPECT_EQ(hugePageNote(1000 * kMiB, 1000 * kMiB, true, false), "");
  EXPECT_NE(hugePageNote(1000 * kMiB, 749 * kMiB, true, false), "");
}

TEST(HugePageNote, NoneForSmallModels) {
  // Below 256 MiB a model's weights may fit few 2 MiB pages at all.
  EXPECT_EQ(hugePageNote(255 * kMiB, 0, true, false), "");
  EXPECT_NE(hugePageNote(256 * kMiB, 0, true, false), "");
}

TEST(HugePageNote, NoneWhereTheRemedyCannotHelp) {
  // Weights the process reads into memory of its own (--no-mmap, llama2.c
  // checkpoints), and a system with transparent huge pages off.
  EXPECT_EQ(hugePageNote(1000 * kMiB, 0, /*mappedFile=*/false, false), "");
  EXPECT_EQ(hugePageNote(1000 * kMiB, 0, true, /*hugePagesOff=*/true), "");
}

} // namespace
