//===- QuantTest.cpp - The weight formats' bytes ----------------*- C++ -*-===//
//
// Quant.h against the block layouts of WeightFormat.h: each format's
// dequantisation checked against an independent decoding of hand-built
// blocks (written from the layout, element by element), the quantisers'
// error on Gaussian rows, and the spelling of WeightFormats.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Quant.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/WeightFormat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

void putHalf(uint8_t *p, float v) {
  uint16_t bits = kvrt::floatToHalf(v);
  std::memcpy(p, &bits, 2);
}

/// Bytes of one block with every byte drawn from `rng`, then the f16
/// scales at `scales` set to small finite values.
std::vector<uint8_t> randomBlock(kvrt_weight_format format, std::mt19937 &rng,
                                 std::initializer_list<int> scales) {
  std::vector<uint8_t> b(size_t(kvrt::blockLayout(format).bytes));
  for (uint8_t &x : b)
    x = uint8_t(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  for (int at : scales)
    putHalf(&b[size_t(at)], scale(rng));
  return b;
}

float half(const uint8_t *p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return kvrt::halfToFloat(bits);
}

/// Bit `bit` of the little-endian bit string at `p`.
int bitAt(const uint8_t *p, int bit) { return (p[bit / 8] >> (bit % 8)) & 1; }

TEST(QuantTest, DequantisationFollowsTheLayouts) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    // Q8_0: d, then 32 int8.
    {
      std::vector<uint8_t> b = randomBlock(KVRT_WEIGHT_Q8_0, rng, {0});
      float y[32];
      kvrt::dequantizeRow(KVRT_WEIGHT_Q8_0, b.data(), y, 32);
      for (int j = 0; j < 32; ++j)
        EXPECT_EQ(y[j], float(int8_t(b[2 + j])) * half(&b[0]));
    }
    // Q4_0: d, then the low nibbles of 16 bytes (elements 0..15) and their
    // high nibbles (16..31), offset by 8.
    {
      std::vector<uint8_t> b = randomBlock(KVRT_WEIGHT_Q4_0, rng, {0});
      float y[32];
      kvrt::dequantizeRow(KVRT_WEIGHT_Q4_0, b.data(), y, 32);
      for (int j = 0; j < 32; ++j) {
        int q = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;
        EXPECT_EQ(y[j], float(q - 8) * half(&b[0])) << j;
      }
    }
    // Q4_K and Q5_K: d, dmin, 12 bytes of scales and mins, (Q5_K: 32 bytes
    // of fifth bits), 128 bytes of nibbles. Sub-block s: its 6-bit scale is
    // bits 0-5 of byte s (s < 4), or bits 0-3 of byte s+4 and bits 6-7 of
    // byte s-4; its min bits 0-5 of byte s+4, or bits 4-7 of byte s+4 and
    // bits 6-7 of byte s.
    for (bool five : {false, true}) {
      kvrt_weight_format f = five ? KVRT_WEIGHT_Q5_K : KVRT_WEIGHT_Q4_K;
      std::vector<uint8_t> b = randomBlock(f, rng, {0, 2});
      float y[256];
      kvrt::dequantizeRow(f, b.data(), y, 256);
      const uint8_t *sc = &b[4], *qh = &b[16], *qs = &b[five ? 48 : 16];
      for (int j = 0; j < 256; ++j) {
        int s = j / 32, l = j % 32;
        int scale =
            s < 4 ? sc[s] & 63 : (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
        int min = s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
        int nibble = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
        int q = nibble + (five ? 16 * bitAt(&qh[l], s) : 0);
        float expected =
            half(&b[0]) * float(scale) * float(q) - half(&b[2]) * float(min);
        EXPECT_EQ(y[j], expected) << (five ? "Q5_K " : "Q4_K ") << j;
      }
    }
    // Q6_K: 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 scales, d.
    // Element j of half h = j / 128, quarter g = (j % 128) / 32, l = j % 32:
    // low bits in byte 64h + 32(g % 2) + l (the high nibble for g >= 2),
    // high bits at 2g of byte 128 + 32h + l; scale j / 16.
    {
      std::vector<uint8_t> b = randomBlock(KVRT_WEIGHT_Q6_K, rng, {208});
      float y[256];
      kvrt::dequantizeRow(KVRT_WEIGHT_Q6_K, b.data(), y, 256);
      for (int j = 0; j < 256; ++j) {
        int h = j / 128, g = (j % 128) / 32, l = j % 32;
        int low = (b[64 * h + 32 * (g % 2) + l] >> (g >= 2 ? 4 : 0)) & 15;
        int high = (b[128 + 32 * h + l] >> (2 * g)) & 3;
        int q = (low | high << 4) - 32;
        float expected =
            half(&b[208]) * float(int8_t(b[192 + j / 16])) * float(q);
        EXPECT_EQ(y[j], expected) << "Q6_K " << j;
      }
    }
  }
}

TEST(QuantTest, QuantisersKeepTheirError) {
  // Gaussian rows of 1024 (4 K-quant super-blocks, 32 small blocks): the
  // RMS error of quantise-then-dequantise relative to the rows' RMS, below
  // what each format's bits allow with room (docs/models.md has the figures
  // on stories260K), and smaller for more bits.
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(64 * 1024);
  for (float &v : x)
    v = normal(rng);
  struct Bound {
    kvrt_weight_format format;
    double relative;
  } bounds[] = {{KVRT_WEIGHT_F16, 0.001}, {KVRT_WEIGHT_BF16, 0.005},
                {KVRT_WEIGHT_Q8_0, 0.01}, {KVRT_WEIGHT_Q6_K, 0.03},
                {KVRT_WEIGHT_Q5_K, 0.05}, {KVRT_WEIGHT_Q4_K, 0.10},
                {KVRT_WEIGHT_Q4_0, 0.12}};
  double previous = 0;
  for (const Bound &bound : bounds) {
    int64_t rowBytes = kvrt::weightRowBytes(bound.format, 1024);
    std::vector<uint8_t> q(size_t(64 * rowBytes));
    std::vector<float> y(x.size());
    double err = 0, ref = 0;
    for (int r = 0; r < 64; ++r) {
      kvrt::quantizeRow(bound.format, &x[r * 1024], &q[r * rowBytes], 1024);
      EXPECT_EQ(kvrt::checkWeightData(bound.format, &q[r * rowBytes], 1024),
                "");
      kvrt::dequantizeRow(bound.format, &q[r * rowBytes], &y[r * 1024], 1024);
    }
    for (size_t i = 0; i < x.size(); ++i) {
      err += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
      ref += double(x[i]) * x[i];
    }
    double relative = std::sqrt(err / ref);
    EXPECT_LT(relative, bound.relative) << kvrt::weightFormatName(bound.format);
    EXPECT_GT(relative, previous) << kvrt::weightFormatName(bound.format);
    previous = relative;
  }
}

TEST(QuantTest, ZerosAndExtremesQuantiseExactly) {
  for (kvrt_weight_format f :
       {KVRT_WEIGHT_Q8_0, KVRT_WEIGHT_Q4_0, KVRT_WEIGHT_Q4_K, KVRT_WEIGHT_Q5_K,
        KVRT_WEIGHT_Q6_K}) {
    std::vector<float> zeros(256, 0.0f), y(256, 1.0f);
    std::vector<uint8_t> q(size_t(kvrt::weightRowBytes(f, 256)));
    kvrt::quantizeRow(f, zeros.data(), q.data(), 256);
    kvrt::dequantizeRow(f, q.data(), y.data(), 256);
    for (float v : y)
      EXPECT_EQ(v, 0.0f) << kvrt::weightFormatName(f);
    // A row beyond f16's range keeps finite scales (clamped).
    std::vector<float> huge(256, 1e9f);
    kvrt::quantizeRow(f, huge.data(), q.data(), 256);
    EXPECT_EQ(kvrt::checkWeightData(f, q.data(), 256), "")
        << kvrt::weightFormatName(f);
  }
}

TEST(QuantTest, NonFiniteElementsAreFoundWherever) {
  // The exponent scan passes finite rows (the largest finite values and
  // subnormals included) and, for every inf or NaN anywhere (the first
  // element, past the scan's first chunk, the last; written as bits: the
  // f16 quantiser clamps to finite), the message names the first one.
  const int64_t n = 10000;
  struct Case {
    kvrt_weight_format format;
    std::vector<uint32_t> bad; // +inf, -inf, a quiet and a signalling NaN
  } cases[] = {
      {KVRT_WEIGHT_F32, {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u}},
      {KVRT_WEIGHT_F16, {0x7C00u, 0xFC00u, 0x7E00u, 0x7C01u}},
      {KVRT_WEIGHT_BF16, {0x7F80u, 0xFF80u, 0x7FC0u, 0x7F81u}},
  };
  for (const Case &c : cases) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i)
      x[size_t(i)] = float(i % 7) - 3.0f;
    x[1] = c.format == KVRT_WEIGHT_F16 ? 65504.0f : 3.0e38f;
    x[2] = c.format == KVRT_WEIGHT_F16 ? -6.0e-8f : 1.0e-40f;
    size_t size = kvrt::weightRowBytes(c.format, n) / n;
    std::vector<uint8_t> row(size * n);
    kvrt::quantizeRow(c.format, x.data(), row.data(), n);
    EXPECT_EQ(kvrt::checkWeightData(c.format, row.data(), n), "")
        << kvrt::weightFormatName(c.format);
    for (int64_t at : {int64_t(0), int64_t(5000), n - 1})
      for (uint32_t bits : c.bad) {
        std::vector<uint8_t> bad(row);
        // A later one too, which is not the one reported.
        for (int64_t i : {at, n - 1 - at / 2})
          std::memcpy(&bad[size * size_t(i)], &bits, size);
        std::string problem = kvrt::checkWeightData(c.format, bad.data(), n);
        std::string first =
            "element " + std::to_string(std::min(at, n - 1 - at / 2)) + " is ";
        EXPECT_EQ(problem.substr(0, first.size()), first)
            << kvrt::weightFormatName(c.format) << ": " << problem;
      }
  }
}

/// The layout for decode (Quant.h, repackQ8Rows16) read back from its
/// description: each row's scale and quants where it says, + 128, the rows
/// past the last zero, and the groups written in two calls as in one.
TEST(QuantTest, Q8Rows16HoldsEachRowWhereDocumented) {
  std::mt19937 rng(7);
  const int64_t rows = 37, cols = 96, blocks = cols / 32, rowBytes = 34 * 3;
  std::vector<uint8_t> file;
  for (int64_t i = 0; i < rows * blocks; ++i) {
    std::vector<uint8_t> block = randomBlock(KVRT_WEIGHT_Q8_0, rng, {0});
    file.insert(file.end(), block.begin(), block.end());
  }
  ASSERT_EQ(kvrt::q8Rows16Bytes(rows, cols), 48 * rowBytes);
  std::vector<uint8_t> whole(size_t(kvrt::q8Rows16Bytes(rows, cols)), 0x55);
  std::vector<uint8_t> split(whole);
  kvrt::repackQ8Rows16(file.data(), rows, cols, whole.data(), 0, 3);
  kvrt::repackQ8Rows16(file.data(), rows, cols, split.data(), 2, 3);
  kvrt::repackQ8Rows16(file.data(), rows, cols, split.data(), 0, 2);
  EXPECT_EQ(whole, split);
  for (int64_t row = 0; row < 48; ++row)
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t *group =
          whole.data() + (row / 16) * 16 * rowBytes + b * 16 * 34;
      int64_t r = row % 16;
      const uint8_t *block =
          row < rows ? file.data() + row * rowBytes + b * 34 : nullptr;
      SCOPED_TRACE("row " + std::to_string(row) + " block " +
                   std::to_string(b));
      EXPECT_EQ(group[2 * r], block ? block[0] : 0);
      EXPECT_EQ(group[2 * r + 1], block ? block[1] : 0);
      for (int64_t i = 0; i < 32; ++i)
        EXPECT_EQ(int(group[32 + 64 * (i / 4) + 4 * r + i % 4]),
                  int(uint8_t((block ? block[2 + i] : 0) + 128)));
    }
}

/// The Q4_K layout for decode (Quant.h, repackQ4KRows16) read back from its
/// description: every element rebuilt from the group's d, dmin, scale, min
/// and nibble where WeightFormat.h puts them equals the file row's
/// dequantised element; the rows past the last all zero; the groups written
/// in two calls as in one.
TEST(QuantTest, Q4KRows16HoldsEachRowWhereDocumented) {
  std::mt19937 rng(11);
  const int64_t rows = 37, cols = 512, blocks = cols / 256, rowBytes = 144 * 2;
  const int64_t groupBlock = kvrt::kQ4KRows16BlockBytes;
  std::vector<uint8_t> file;
  for (int64_t i = 0; i < rows * blocks; ++i) {
    std::vector<uint8_t> block = randomBlock(KVRT_WEIGHT_Q4_K, rng, {0, 2});
    file.insert(file.end(), block.begin(), block.end());
  }
  ASSERT_EQ(kvrt::q4kRows16Bytes(rows, cols), 3 * blocks * groupBlock);
  ASSERT_EQ(kvrt::decodeRowsBytes(KVRT_WEIGHT_Q4_K, rows, cols),
            kvrt::q4kRows16Bytes(rows, cols));
  std::vector<uint8_t> whole(size_t(kvrt::q4kRows16Bytes(rows, cols)), 0x55);
  std::vector<uint8_t> split(whole);
  kvrt::repackQ4KRows16(file.data(), rows, cols, whole.data(), 0, 3);
  kvrt::repackDecodeRows(KVRT_WEIGHT_Q4_K, file.data(), rows, cols,
                         split.data(), 2, 3);
  kvrt::repackDecodeRows(KVRT_WEIGHT_Q4_K, file.data(), rows, cols,
                         split.data(), 0, 2);
  EXPECT_EQ(whole, split);
  std::vector<float> y(static_cast<size_t>(cols));
  for (int64_t row = 0; row < 48; ++row) {
    if (row < rows)
      kvrt::dequantizeRow(KVRT_WEIGHT_Q4_K, file.data() + row * rowBytes,
                          y.data(), cols);
    int64_t r = row % 16;
    SCOPED_TRACE("row " + std::to_string(row));
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t *g = whole.data() + ((row / 16) * blocks + b) * groupBlock;
      for (int64_t s = 0; s < 8; ++s) {
        int sc = g[64 + 16 * s + r];
        int m = g[192 + 32 * (s / 2) + 2 * r + s % 2];
        for (int64_t l = 0; l < 32; ++l) {
          uint8_t byte = g[320 + 256 * s + 64 * (l % 16 / 4) + 4 * r + l % 4];
          int q = l < 16 ? byte & 15 : byte >> 4;
          float element = half(&g[2 * r]) * float(sc) * float(q) -
                          half(&g[32 + 2 * r]) * float(m);
          if (row >= rows)
            EXPECT_TRUE(sc == 0 && m == 0 && q == 0 && element == 0.0f);
          else
            EXPECT_EQ(element, y[size_t(256 * b + 32 * s + l)])
                << "block " << b << " sub-block " << s << " element " << l;
        }
      }
    }
  }
}

TEST(QuantTest, FormatsHaveOneSpelling) {
  for (int f = 0; f < KVRT_WEIGHT_FORMAT_COUNT; ++f) {
    auto format = static_cast<kvrt_weight_format>(f);
    EXPECT_EQ(kvrt::parseWeightFormat(kvrt::weightFormatName(format)), format);
    EXPECT_EQ(kvrt::formatOfGgmlType(kvrt::ggmlTypeOf(format)), format);
  }
  EXPECT_EQ(kvrt::parseWeightFormat("Q4_K"), KVRT_WEIGHT_Q4_K);
  EXPECT_EQ(kvrt::formatOfGgmlType(3), std::nullopt); // Q4_1
  EXPECT_EQ(kvrt::weightRowBytes(KVRT_WEIGHT_Q6_K, 512), 420);
  EXPECT_EQ(kvrt::weightRowBytes(KVRT_WEIGHT_Q6_K, 64), -1);
}

TEST(QuantTest, WeightFormatsSpecRoundTrips) {
  kvir::WeightFormats f;
  EXPECT_TRUE(f.allF32());
  EXPECT_EQ(f.spec(), "");
  EXPECT_EQ(f.describe(), "f32");
  f.set(kvrt::TensorId::wv, 0, 5, KVRT_WEIGHT_Q6_K);
  f.set(kvrt::TensorId::wv, 1, 5, KVRT_WEIGHT_Q6_K);
  f.set(kvrt::TensorId::wv, 2, 5, KVRT_WEIGHT_Q4_K);
  f.set(kvrt::TensorId::wv, 3, 5, KVRT_WEIGHT_Q4_K);
  f.set(kvrt::TensorId::wv, 4, 5, KVRT_WEIGHT_Q6_K);
  f.set(kvrt::TensorId::wcls, 0, 1, KVRT_WEIGHT_Q8_0);
  EXPECT_EQ(f.spec(), "wv:q6_k*2,q4_k*2,q6_k;wcls:q8_0");
  EXPECT_EQ(f.at(kvrt::TensorId::wv, 3), KVRT_WEIGHT_Q4_K);
  EXPECT_EQ(f.at(kvrt::TensorId::wq, 3), KVRT_WEIGHT_F32);
  std::string error;
  std::optional<kvir::WeightFormats> back =
      kvir::WeightFormats::parse(f.spec(), 5, error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(*back, f);
  // A per-layer tensor named with one format has it in every layer.
  back = kvir::WeightFormats::parse("w2:q8_0", 5, error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->at(kvrt::TensorId::w2, 4), KVRT_WEIGHT_Q8_0);
  EXPECT_FALSE(kvir::WeightFormats::parse("wv:q6_k*2,q4_k", 5, error));
  EXPECT_EQ(error, "'wv:q6_k*2,q4_k' names 3 slices of wv, which has 5");
  EXPECT_FALSE(kvir::WeightFormats::parse("token_embedding:q8_0", 5, error));
  EXPECT_EQ(error, "'token_embedding' is not a weight the forward reads "
                   "(ModelTensors.def)");
  EXPECT_FALSE(kvir::WeightFormats::parse("wq", 5, error));
  EXPECT_EQ(error, "'wq' is not FIELD:FORMATS");
}

} // namespace
