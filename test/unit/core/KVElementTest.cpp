//===- KVElementTest.cpp - f16/bf16 conversions and pages -------*- C++ -*-===//

#include "runtime/core/KVElement.h"
#include "runtime/reference/Reference.h"
#include "test/unit/TestSupport.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace kvir::test;
using namespace kvrt;

namespace {

TEST(KVElementTest, HalfExactValues) {
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(0.5f), 0x3800);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);              // largest finite half
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14)), 0x0400); // smallest normal
  EXPECT_EQ(halfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(halfToFloat(0xc000), -2.0f);
}

TEST(KVElementTest, HalfRoundsToNearestEven) {
  float ulp = std::ldexp(1.0f, -10);              // spacing of halves in [1, 2)
  EXPECT_EQ(floatToHalf(1.0f + ulp / 2), 0x3c00); // tie, to even
  EXPECT_EQ(floatToHalf(1.0f + 3 * ulp / 2), 0x3c02); // tie, to even
  EXPECT_EQ(floatToHalf(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(floatToHalf(1.0f + ulp / 2 - std::ldexp(1.0f, -20)), 0x3c00);
  EXPECT_EQ(floatToHalf(-(1.0f + 3 * ulp / 2)), 0xbc02);
  // Rounding up out of the largest finite value gives infinity.
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(floatToHalf(-1e6f), 0xfc00);
}

TEST(KVElementTest, HalfSubnormals) {
  float tiny = std::ldexp(1.0f, -24); // smallest subnormal half
  EXPECT_EQ(floatToHalf(tiny), 0x0001);
  EXPECT_EQ(halfToFloat(0x0001), tiny);
  EXPECT_EQ(halfToFloat(0x03ff), 1023 * tiny); // largest subnormal
  EXPECT_EQ(halfToFloat(0x8200), -512 * tiny);
  EXPECT_EQ(floatToHalf(tiny / 2), 0x0000);     // tie, to even (0)
  EXPECT_EQ(floatToHalf(3 * tiny / 2), 0x0002); // tie, to even (2)
  EXPECT_EQ(floatToHalf(1.25f * tiny), 0x0001);
  EXPECT_EQ(floatToHalf(0.75f * tiny), 0x0001);
  EXPECT_EQ(floatToHalf(0.25f * tiny), 0x0000);
  EXPECT_EQ(floatToHalf(-0.25f * tiny), 0x8000);
  EXPECT_EQ(floatToHalf(1023.5f * tiny), 0x0400); // rounds up to a normal
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(KVElementTest, HalfInfinityAndNaN) {
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(floatToHalf(inf), 0x7c00);
  EXPECT_EQ(floatToHalf(-inf), 0xfc00);
  EXPECT_EQ(halfToFloat(0x7c00), inf);
  EXPECT_EQ(halfToFloat(0xfc00), -inf);
  uint16_t nan = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // A NaN whose payload sits only in the low f32 bits stays a NaN.
  uint32_t lowPayload = 0x7f800001u;
  float signalling;
  std::memcpy(&signalling, &lowPayload, sizeof(signalling));
  EXPECT_NE(floatToHalf(signalling) & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(halfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(halfToFloat(0xfc01)));
}

TEST(KVElementTest, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x03ff))
      continue; // NaN payloads are not preserved bit for bit
    ASSERT_EQ(floatToHalf(halfToFloat(uint16_t(h))), h) << std::hex << h;
  }
}

#ifdef __FLT16_MAX__
TEST(KVElementTest, HalfMatchesTheCompiler) {
  // The compiler's _Float16 conversion rounds to nearest even as well.
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000000; ++i) {
    uint32_t b = bits(gen);
    // Exponents around the half range, where the rounding is interesting.
    b = (b & 0x807fffffu) | (((b >> 23) % 48 + 127 - 30) << 23);
    float f;
    std::memcpy(&f, &b, sizeof(f));
    _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &h, sizeof(expected));
    ASSERT_EQ(floatToHalf(f), expected) << std::hexfloat << f;
    ASSERT_EQ(halfToFloat(expected), float(h));
  }
}

TEST(KVElementTest, HalfMatchesTheCompilerOverEveryExponent) {
  // The one f16/bf16 conversion of the runtime (GGUF's F16/BF16/Q8_0 scales
  // and K/V pages alike): random floats of any exponent against _Float16,
  // every half widened against _Float16, and bfloat16 against rounding the
  // upper 16 bits to nearest even.
  std::mt19937 gen(5);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = bits(gen);
    float x;
    std::memcpy(&x, &b, 4);
    if (std::isnan(x))
      continue;
    _Float16 h = static_cast<_Float16>(x);
    uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(floatToHalf(x), expected) << std::hexfloat << x;
    uint32_t lsb = (b >> 16) & 1;
    uint32_t upper = (b + 0x7fff + lsb) >> 16;
    if ((b & 0x7f800000u) != 0x7f800000u)
      ASSERT_EQ(floatToBFloat(x), upper) << std::hexfloat << x;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t half = uint16_t(h);
    _Float16 f16;
    std::memcpy(&f16, &half, 2);
    float x = halfToFloat(half), y = static_cast<float>(f16);
    if (!std::isnan(x))
      ASSERT_EQ(std::memcmp(&x, &y, 4), 0) << std::hex << h;
    else
      ASSERT_TRUE(std::isnan(y)) << std::hex << h;
  }
}
#endif

TEST(KVElementTest, HalfEdgeFloats) {
  float tiny = std::ldexp(1.0f, -24), minNormal = std::ldexp(1.0f, -14);
  struct Case {
    float x;
    uint16_t half;
  } cases[] = {
      {std::nextafter(65520.0f, 0.0f), 0x7bff}, // just below the tie to inf
      {65520.0f, 0x7c00},
      {std::numeric_limits<float>::max(), 0x7c00},
      {-std::numeric_limits<float>::max(), 0xfc00},
      {std::nextafter(minNormal, 0.0f), 0x0400}, // rounds up to normal
      {minNormal - tiny / 2, 0x0400},            // tie between 0x3ff, 0x400
      {minNormal - 3 * tiny / 2, 0x03fe},        // tie, to even
      {std::nextafter(tiny / 2, 1.0f), 0x0001},  // above the tie to 0
      {-std::nextafter(tiny / 2, 1.0f), 0x8001},
      {std::numeric_limits<float>::min(), 0x0000}, // f32 normal, half 0
      {-std::numeric_limits<float>::denorm_min(), 0x8000},
  };
  for (const Case &c : cases)
    EXPECT_EQ(floatToHalf(c.x), c.half) << std::hexfloat << c.x;
  // NaNs stay NaN of the same sign, quiet, whatever their payload.
  for (uint32_t nanBits :
       {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fbfffffu, 0xffffffffu}) {
    float nan;
    std::memcpy(&nan, &nanBits, 4);
    uint16_t h = floatToHalf(nan), b = floatToBFloat(nan);
    EXPECT_EQ(h & 0x7e00, 0x7e00) << std::hex << nanBits;
    EXPECT_EQ(h >> 15, nanBits >> 31);
    EXPECT_EQ(b & 0x7fc0, 0x7fc0) << std::hex << nanBits;
    EXPECT_EQ(b >> 15, nanBits >> 31);
  }
}

TEST(KVElementTest, BFloatValuesAndRounding) {
  EXPECT_EQ(floatToBFloat(1.0f), 0x3f80);
  EXPECT_EQ(floatToBFloat(-2.0f), 0xc000);
  EXPECT_EQ(bfloatToFloat(0x3f80), 1.0f);
  EXPECT_EQ(bfloatToFloat(0x4049), 3.140625f);
  float ulp = std::ldexp(1.0f, -7); // spacing of bfloat16 in [1, 2)
  EXPECT_EQ(floatToBFloat(1.0f + ulp / 2), 0x3f80);     // tie, to even
  EXPECT_EQ(floatToBFloat(1.0f + 3 * ulp / 2), 0x3f82); // tie, to even
  EXPECT_EQ(floatToBFloat(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(floatToBFloat(std::numeric_limits<float>::max()), 0x7f80);
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(floatToBFloat(inf), 0x7f80);
  EXPECT_EQ(floatToBFloat(-inf), 0xff80);
  // f32 subnormals stay subnormal in bfloat16 (same exponent range).
  EXPECT_EQ(floatToBFloat(std::ldexp(1.0f, -133)), 0x0001);
  uint16_t nan = floatToBFloat(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bfloatToFloat(nan)));
  uint32_t lowPayload = 0x7f800001u;
  float signalling;
  std::memcpy(&signalling, &lowPayload, sizeof(signalling));
  EXPECT_TRUE(std::isnan(bfloatToFloat(floatToBFloat(signalling))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f))
      continue;
    ASSERT_EQ(floatToBFloat(bfloatToFloat(uint16_t(b))), b) << std::hex << b;
    float widened = bfloatToFloat(uint16_t(b));
    uint32_t bits;
    std::memcpy(&bits, &widened, sizeof(bits));
    ASSERT_EQ(bits, b << 16); // bfloat16 is the top half of an f32
  }
}

/// A pool of 2 layers x 2 KV heads x head size 4, 4-token pages, of `dtype`.
PoolPtr smallPool(kvrt_kv_dtype dtype) {
  kvrt_pool_config config{2, 2, 4, 4, 8, dtype};
  kvrt_pool *raw = nullptr;
  EXPECT_EQ(kvrt_pool_create(&config, &raw), KVRT_OK) << kvrt_last_error();
  return PoolPtr(raw);
}

/// The value `dtype` stores for `x`.
float rounded(float x, kvrt_kv_dtype dtype) {
  switch (dtype) {
  case KVRT_KV_F16:
    return halfToFloat(floatToHalf(x));
  case KVRT_KV_BF16:
    return bfloatToFloat(floatToBFloat(x));
  case KVRT_KV_F32:
    break;
  }
  return x;
}

class KVElementPoolTest : public ::testing::TestWithParam<kvrt_kv_dtype> {};

TEST_P(KVElementPoolTest, PagesRoundTrip) {
  kvrt_kv_dtype dtype = GetParam();
  PoolPtr pool = smallPool(dtype);
  kvrt_page_layout l;
  ASSERT_EQ(kvrt_pool_get_layout(pool.get(), &l), KVRT_OK);
  int32_t bytes = dtype == KVRT_KV_F32 ? 4 : 2;
  EXPECT_EQ(l.dtype, dtype);
  EXPECT_EQ(l.element_bytes, bytes);
  EXPECT_EQ(l.page_stride, 2 * 2 * 2 * 4 * 4);
  EXPECT_EQ(l.page_bytes, l.page_stride * bytes);
  kvrt_pool_stats stats;
  int32_t pages[2];
  ASSERT_EQ(kvrt_pool_alloc_pages(pool.get(), 2, pages), KVRT_OK);
  ASSERT_EQ(kvrt_pool_get_stats(pool.get(), &stats), KVRT_OK);
  EXPECT_EQ(stats.bytes_in_use, 2 * l.page_bytes);
  // Values with more bits than a half or bfloat16 holds.
  auto value = [](int64_t i) { return float(i) * 1.0009765625f + 1.0f / 3; };
  for (int32_t page : pages)
    for (int64_t i = 0; i < l.page_stride; ++i)
      storeElement(l.base, page * l.page_stride + i, dtype, value(i + page));
  float *data = nullptr;
  const float *cdata = nullptr;
  if (dtype == KVRT_KV_F32) {
    EXPECT_EQ(kvrt_pool_page_data(pool.get(), pages[0], &data), KVRT_OK);
  } else {
    // Float pointers would lie about 2-byte elements: refused, by name.
    EXPECT_EQ(kvrt_pool_page_data(pool.get(), pages[0], &data),
              KVRT_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kvrt_last_error()).find("not f32"), std::string::npos)
        << kvrt_last_error();
    EXPECT_EQ(kvrt_pool_page_cdata(pool.get(), pages[0], &cdata),
              KVRT_ERR_INVALID_ARGUMENT);
  }
  // The bytes of a page, for any element type: the page's own address.
  void *bytes0 = nullptr;
  const void *cbytes0 = nullptr;
  ASSERT_EQ(kvrt_pool_page_bytes(pool.get(), pages[0], &bytes0), KVRT_OK);
  ASSERT_EQ(kvrt_pool_page_cbytes(pool.get(), pages[0], &cbytes0), KVRT_OK);
  EXPECT_EQ(bytes0, static_cast<const void *>(
                        static_cast<const unsigned char *>(l.base) +
                        pages[0] * l.page_bytes));
  EXPECT_EQ(cbytes0, bytes0);
  EXPECT_EQ(loadElement(bytes0, 3, dtype),
            loadElement(l.base, pages[0] * l.page_stride + 3, dtype));
  // Copy-on-write copies page_bytes, no more and no less.
  ASSERT_EQ(kvrt_pool_seal_page(pool.get(), pages[1]), KVRT_OK);
  // A sealed page is read-only: its bytes are handed out for reading only.
  void *sealedBytes = nullptr;
  const void *sealedCBytes = nullptr;
  EXPECT_EQ(kvrt_pool_page_bytes(pool.get(), pages[1], &sealedBytes),
            KVRT_ERR_STATE);
  EXPECT_EQ(kvrt_pool_page_cbytes(pool.get(), pages[1], &sealedCBytes),
            KVRT_OK);
  int32_t copy = -1;
  ASSERT_EQ(kvrt_pool_cow(pool.get(), pages[1], &copy), KVRT_OK);
  ASSERT_NE(copy, pages[1]);
  int32_t run[2] = {pages[0], copy};
  // Slots 2..6 of the run: they cross from the first page into the copy.
  std::vector<float> k(5 * 2 * 4), v(5 * 2 * 4);
  ASSERT_EQ(kvrt_pool_read_kv(pool.get(), run, 2, 5, 1, k.data(), v.data()),
            KVRT_OK)
      << kvrt_last_error();
  for (int64_t j = 0; j < 5; ++j)
    for (int64_t g = 0; g < 2; ++g)
      for (int64_t d = 0; d < 4; ++d) {
        int64_t slot = 2 + j;
        int32_t source = slot < 4 ? pages[0] : pages[1];
        int64_t at = l.layer_stride + g * l.head_stride +
                     (slot % 4) * l.token_stride + d;
        size_t out = (j * 2 + g) * 4 + d;
        EXPECT_EQ(k[out], rounded(value(at + source), dtype));
        EXPECT_EQ(v[out], rounded(value(at + l.kv_stride + source), dtype));
        if (dtype != KVRT_KV_F32)
          EXPECT_NE(k[out], value(at + source)); // really rounded
      }
  kvrt_pool_release_page(pool.get(), pages[0]);
  kvrt_pool_release_page(pool.get(), copy);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KVElementPoolTest,
                         ::testing::Values(KVRT_KV_F32, KVRT_KV_F16,
                                           KVRT_KV_BF16));

TEST(KVElementTest, PoolRejectsAnUnknownDtype) {
  kvrt_pool_config config{2, 2, 4, 4, 8, static_cast<kvrt_kv_dtype>(3)};
  kvrt_pool *raw = nullptr;
  EXPECT_EQ(kvrt_pool_create(&config, &raw), KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(raw, nullptr);
  EXPECT_NE(std::string(kvrt_last_error()).find("dtype = 3"), std::string::npos)
      << kvrt_last_error();
}

/// The oracle writes f16/bf16 pages by rounding the f32 K/V it would store in
/// f32 pages, and reads them back converted: layer 0 (which reads only the
/// new tokens' K/V) stores exactly the rounded f32 values, and the logits
/// move by the rounding only.
class KVElementOracleTest : public ::testing::TestWithParam<kvrt_kv_dtype> {};

TEST_P(KVElementOracleTest, PrefillStoresRoundedKV) {
  kvrt_kv_dtype dtype = GetParam();
  ModelPtr model = syntheticModel(smallConfig(KVRT_ROPE_INTERLEAVED), 11);
  std::vector<int32_t> tokens = randomTokens(20, 64, 5);
  auto run = [&](kvrt_kv_dtype pages, std::vector<float> &logits,
                 std::vector<float> &k, std::vector<float> &v) {
    PoolPtr pool = poolFor(model.get(), 8, 16, pages);
    ViewPtr empty = emptyView(pool.get());
    kvrt_view *out = nullptr;
    ASSERT_EQ(kvir::reference::prefill(model.get(), empty.get(), tokens.data(),
                                       tokens.size(), 0, nullptr, &logits,
                                       &out),
              KVRT_OK)
        << kvrt_last_error();
    ViewPtr view(out);
    kvrt_run r;
    ASSERT_EQ(kvrt_view_get_run(view.get(), 0, &r), KVRT_OK);
    k.resize(tokens.size() * 2 * 12);
    v.resize(k.size());
    ASSERT_EQ(kvrt_pool_read_kv(pool.get(), r.pages, r.slot_begin, r.n_tokens,
                                0, k.data(), v.data()),
              KVRT_OK);
  };
  std::vector<float> logits32, k32, v32, logits, k, v;
  run(KVRT_KV_F32, logits32, k32, v32);
  run(dtype, logits, k, v);
  ASSERT_EQ(k.size(), k32.size());
  for (size_t i = 0; i < k.size(); ++i) {
    ASSERT_EQ(k[i], rounded(k32[i], dtype)) << i;
    ASSERT_EQ(v[i], rounded(v32[i], dtype)) << i;
  }
  double diff = maxAbsDiff(logits.data(), logits32.data(), logits.size());
  // Half keeps 11 significant bits, bfloat16 8: the logits move, a little.
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, dtype == KVRT_KV_F16 ? 1e-2 : 5e-2);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KVElementOracleTest,
                         ::testing::Values(KVRT_KV_F16, KVRT_KV_BF16));

} // namespace
