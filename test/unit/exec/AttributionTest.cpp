//===- AttributionTest.cpp - Attribution by KV patching ---------*- C++ -*-===//
//
// The arithmetic of recovered(S) and the routine that builds z_new, z_old and
// z_S from views, over the reference backend and a synthetic model (no MLIR,
// no checkpoint needed).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Attribution.h"
#include "runtime/reference/Reference.h"
#include "test/unit/TestSupport.h"

#include <cmath>

using namespace kvir;
using namespace kvir::exec;
using namespace kvir::test;

namespace {

//===----------------------------------------------------------------------===//
// The arithmetic
//===----------------------------------------------------------------------===//

TEST(AttributionMath, RecoveredIsOneForThePatchThatGivesTheNewAnswer) {
  std::vector<float> zNew = {1, 2, 3, 4}, zOld = {1, 2, 7, 1};
  std::vector<double> recovered;
  double oldDistance = 0;
  std::string error;
  ASSERT_TRUE(recoveredFractions(zNew, zOld, {zNew, zOld}, recovered,
                                 oldDistance, error))
      << error;
  EXPECT_DOUBLE_EQ(oldDistance, 5.0); // |(0, 0, 4, -3)|
  ASSERT_EQ(recovered.size(), 2u);
  EXPECT_DOUBLE_EQ(recovered[0], 1.0); // gives z_new exactly
  EXPECT_DOUBLE_EQ(recovered[1], 0.0); // changes nothing
}

TEST(AttributionMath, RecoveredIsTheShareOfTheDistanceClosed) {
  std::vector<float> zNew = {0, 0}, zOld = {4, 0};
  std::vector<double> recovered;
  double oldDistance = 0;
  std::string error;
  // Halfway; a quarter of the way on another axis (|(3,0)| / 4); overshoot
  // to the other side (|(-8,0)| / 4 = 2: recovered -1).
  ASSERT_TRUE(recoveredFractions(zNew, zOld, {{2, 0}, {3, 0}, {-8, 0}},
                                 recovered, oldDistance, error));
  EXPECT_DOUBLE_EQ(recovered[0], 0.5);
  EXPECT_DOUBLE_EQ(recovered[1], 0.25);
  EXPECT_DOUBLE_EQ(recovered[2], -1.0);
}

TEST(AttributionMath, AnUnchangedAnswerIsRejectedNotDivided) {
  std::vector<float> z = {1, 2, 3};
  std::vector<double> recovered;
  double oldDistance = -1;
  std::string error;
  EXPECT_FALSE(recoveredFractions(z, z, {z}, recovered, oldDistance, error));
  EXPECT_EQ(oldDistance, 0.0);
  EXPECT_NE(error.find("the edit does not change the answer's logits"),
            std::string::npos)
      << error;
  EXPECT_TRUE(recovered.empty());
  // Float rounding (far below kAttributionMinChange of |z|) is no change
  // either.
  std::vector<float> nudged = {1, 2, std::nextafter(3.0f, 4.0f)};
  error.clear();
  EXPECT_FALSE(
      recoveredFractions(z, nudged, {z}, recovered, oldDistance, error));
  EXPECT_GT(oldDistance, 0.0);
  EXPECT_FALSE(error.empty());
  // All zero logits: 0 / 0 is never computed.
  std::vector<float> zero(3, 0.0f);
  EXPECT_FALSE(
      recoveredFractions(zero, zero, {zero}, recovered, oldDistance, error));
}

TEST(AttributionMath, SizesMustAgree) {
  std::vector<double> recovered;
  double oldDistance = 0;
  std::string error;
  EXPECT_FALSE(
      recoveredFractions({1, 2}, {1, 2, 3}, {}, recovered, oldDistance, error));
  EXPECT_FALSE(
      recoveredFractions({1, 2}, {3, 4}, {{1}}, recovered, oldDistance, error));
}

//===----------------------------------------------------------------------===//
// The routine
//===----------------------------------------------------------------------===//

/// A synthetic model, the reference backend and an old cache built segment
/// by segment with labelled runs, as a kv program builds it.
struct Fixture {
  kvrt_model_config config = makeConfig(32, 64, 2, 4, 2, 64, 256);
  ModelPtr model = syntheticModel(config, 11);
  PoolPtr pool = poolFor(model.get(), 256, 4);
  std::unique_ptr<ComputeBackend> backend = createReferenceBackend();
  Forward forward;

  /// Prefills the segments in order; returns the cache.
  ViewRef
  build(const std::vector<std::pair<std::string, std::vector<int32_t>>> &segs) {
    ViewRef view = adoptView(emptyView(pool.get()).release());
    int64_t pos = 0;
    for (const auto &[name, tokens] : segs) {
      std::vector<float> logits;
      kvrt_view *out = nullptr;
      EXPECT_EQ(backend->prefill(forward, model.get(), view.get(),
                                 tokens.data(), tokens.size(), pos,
                                 name.c_str(), kvir::LogitRows::last(), &logits,
                                 &out),
                KVRT_OK)
          << kvrt_last_error();
      view = adoptView(out);
      pos += tokens.size();
    }
    return view;
  }

  /// The answer's logits prefilled over `view` at `pos`.
  std::vector<float> answerOver(const kvrt_view *view,
                                const std::vector<int32_t> &answer,
                                int64_t pos) {
    std::vector<float> logits;
    kvrt_view *out = nullptr;
    EXPECT_EQ(backend->prefill(forward, model.get(), view, answer.data(),
                               answer.size(), pos, nullptr,
                               kvir::LogitRows::all(), &logits, &out),
              KVRT_OK);
    kvrt_view_release(out);
    return logits;
  }
};

std::vector<int32_t> toks(uint32_t seed, size_t n) {
  return randomTokens(n, 64, seed);
}

// The edited segment right before the answer: patching it gives the edited
// context exactly (recovered 1); the prefix is the same in both contexts
// (recovered 0); z_new is a full prefill of the edited context.
TEST(Attribution, PatchingEverythingThatChangedRecoversAll) {
  Fixture f;
  auto prefix = toks(1, 9), city = toks(2, 5), newCity = toks(3, 7),
       answer = toks(4, 3);
  AttributionRequest request;
  request.oldCache =
      f.build({{"prefix", prefix}, {"city", city}, {"answer", answer}});
  request.edited = "city";
  request.newTokens = newCity;
  request.answer = "answer";
  request.segments = {{"prefix", "system"}, {"city", "fact"}};
  Attribution a;
  std::string error;
  ASSERT_TRUE(attribute(*f.backend, f.forward, f.model.get(), f.pool.get(),
                        request, a, error))
      << error;
  ASSERT_EQ(a.segments.size(), 2u);
  EXPECT_EQ(a.segments[0].segment, "prefix");
  EXPECT_EQ(a.segments[0].kind, "system");
  EXPECT_EQ(a.segments[0].tokens, 9);
  EXPECT_FALSE(a.segments[0].edited);
  EXPECT_NEAR(a.segments[0].recovered, 0.0, 1e-6);
  EXPECT_EQ(a.segments[1].segment, "city");
  EXPECT_EQ(a.segments[1].tokens, 7);
  EXPECT_TRUE(a.segments[1].edited);
  EXPECT_NEAR(a.segments[1].recovered, 1.0, 1e-6);
  EXPECT_EQ(a.answerRows, 3);
  EXPECT_EQ(a.oldTokens, 5);
  EXPECT_EQ(a.newTokens, 7);
  EXPECT_EQ(a.contextTokens, 9 + 7 + 3);
  EXPECT_GT(a.oldDistance, 0.0);

  // z_new: the answer rows of a full prefill of the edited context.
  std::vector<int32_t> edited = prefix;
  edited.insert(edited.end(), newCity.begin(), newCity.end());
  ViewRef head = f.build({{"all", edited}});
  std::vector<float> zNew = f.answerOver(head.get(), answer, 16);
  std::vector<float> zero(zNew.size(), 0.0f);
  EXPECT_NEAR(a.newNorm, l2Distance(zNew.data(), zero.data(), zero.size()),
              1e-6 * a.newNorm);
  // z_old: the answer over prefix + old city at the answer's new position.
  ViewRef old = f.build({{"prefix", prefix}, {"city", city}});
  std::vector<float> zOld = f.answerOver(old.get(), answer, 16);
  EXPECT_NEAR(a.oldDistance, l2Distance(zOld.data(), zNew.data(), zNew.size()),
              1e-6 * a.oldDistance);
}

// Segments after the edited one are reused shifted by Δ in z_old and every
// z_S; patching one of them takes its K/V from the edited context. z_S of the
// edited segment is what cot_slice computes when only the answer depends on
// the edit: the new city prefilled, @notes reused shifted, the answer
// recomputed.
TEST(Attribution, LaterSegmentsAreReusedShifted) {
  Fixture f;
  auto prefix = toks(5, 6), city = toks(6, 4), newCity = toks(7, 2),
       notes = toks(8, 10), answer = toks(9, 2);
  AttributionRequest request;
  request.oldCache = f.build({{"prefix", prefix},
                              {"city", city},
                              {"notes", notes},
                              {"answer", answer}});
  request.edited = "city";
  request.newTokens = newCity;
  request.answer = "answer";
  Attribution a;
  std::string error;
  ASSERT_TRUE(attribute(*f.backend, f.forward, f.model.get(), f.pool.get(),
                        request, a, error))
      << error;
  ASSERT_EQ(a.segments.size(), 3u);
  EXPECT_EQ(a.segments[2].segment, "notes");
  EXPECT_EQ(a.segments[2].kind, ""); // no kinds given
  EXPECT_EQ(a.segments[2].tokens, 10);

  std::vector<int32_t> edited = prefix;
  edited.insert(edited.end(), newCity.begin(), newCity.end());
  edited.insert(edited.end(), notes.begin(), notes.end());
  int64_t at = int64_t(edited.size()); // 18: the answer's new position
  ViewRef full = f.build({{"all", edited}});
  std::vector<float> zNew = f.answerOver(full.get(), answer, at);

  // cot_slice by hand: prefix, new city over it, notes shifted by -2.
  ViewRef withCity = f.build({{"prefix", prefix}, {"city", newCity}});
  ViewPtr oldNotes = slice(request.oldCache.get(), 10, 20);
  ViewPtr notesShifted = shifted(oldNotes.get(), -2);
  ViewPtr plan = concat(withCity.get(), notesShifted.get());
  std::vector<float> zCity = f.answerOver(plan.get(), answer, at);
  double distance = l2Distance(zCity.data(), zNew.data(), zNew.size());
  EXPECT_NEAR(a.segments[1].distance, distance, 1e-5 * (1 + distance));
  EXPECT_NEAR(a.segments[1].recovered, 1 - distance / a.oldDistance, 1e-5);

  // Patching @notes: old prefix and city, the notes of the edited context
  // (its positions 8..17).
  ViewPtr oldHead = slice(request.oldCache.get(), 0, 10);
  ViewPtr newNotes = slice(full.get(), 8, 18);
  ViewPtr patched = concat(oldHead.get(), newNotes.get());
  std::vector<float> zNotes = f.answerOver(patched.get(), answer, at);
  EXPECT_NEAR(a.segments[2].distance,
              l2Distance(zNotes.data(), zNew.data(), zNew.size()),
              1e-5 * (1 + a.segments[2].distance));
}

TEST(Attribution, RequestsThatAreNotAnEditBeforeAnAnswerAreRejected) {
  Fixture f;
  auto a1 = toks(10, 3), b1 = toks(11, 3), c1 = toks(12, 2);
  ViewRef cache = f.build({{"a", a1}, {"b", b1}, {"c", c1}});
  auto expectError = [&](AttributionRequest r, const std::string &what) {
    Attribution out;
    std::string error;
    EXPECT_FALSE(attribute(*f.backend, f.forward, f.model.get(), f.pool.get(),
                           r, out, error));
    EXPECT_NE(error.find(what), std::string::npos) << error;
  };
  AttributionRequest r;
  r.oldCache = cache;
  r.edited = "b";
  r.newTokens = toks(13, 4);
  r.answer = "c";
  AttributionRequest same = r;
  same.newTokens = b1;
  expectError(same, "the edit gives @b the tokens it had");
  AttributionRequest after = r;
  after.edited = "c";
  after.answer = "b";
  expectError(after, "comes after the answer @b");
  AttributionRequest itself = r;
  itself.answer = "b";
  expectError(itself, "is the answer");
  AttributionRequest absent = r;
  absent.edited = "nope";
  expectError(absent, "holds no tokens of segment @nope");

  // A segment split in two, and runs at positions other than 0..n-1.
  ViewRef split = f.build({{"a", a1}, {"b", b1}, {"a", c1}, {"c", c1}});
  AttributionRequest splitRequest = r;
  splitRequest.oldCache = split;
  expectError(splitRequest, "segment @a is split");
  AttributionRequest gap = r;
  gap.oldCache = adoptView(shifted(cache.get(), 5).release());
  expectError(gap, "positions 0..n-1");
  // An unlabelled run.
  AttributionRequest unlabelled = r;
  unlabelled.oldCache = f.build({{"a", a1}});
  std::vector<float> logits;
  kvrt_view *out = nullptr;
  ASSERT_EQ(f.backend->prefill(f.forward, f.model.get(),
                               unlabelled.oldCache.get(), b1.data(), 3, 3,
                               nullptr, kvir::LogitRows::last(), &logits, &out),
            KVRT_OK);
  unlabelled.oldCache = adoptView(out);
  expectError(unlabelled, "has no segment label");
}

} // namespace
