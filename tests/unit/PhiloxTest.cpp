//===- PhiloxTest.cpp - gmopt's one Philox4x32-10 stream ------------------===//
//
// backend/Philox.h, the random function both backends draw from: the
// Philox4x32-10 rounds against Random123's known-answer vectors
// (kat_vectors, "philox4x32 10" lines), the counter and key a (seed,
// stream id, step) makes, blocks pinned from the stream as it has been
// since the CPU backend first drew it (a change would change every
// dropout mask of every saved run), and the uniform / keep decision.
//
//===----------------------------------------------------------------------===//

#include "backend/Philox.h"

#include <gtest/gtest.h>

#include <cstdint>

using namespace gmopt;

namespace {

/// Expects \p block to be the four words of \p expected.
void expectWords(const PhiloxWords &block, const uint32_t (&expected)[4]) {
  for (int lane = 0; lane < 4; ++lane)
    EXPECT_EQ(block.w[lane], expected[lane]) << "lane " << lane;
}

TEST(PhiloxKnownAnswerTest, Random123Vectors) {
  struct Case {
    uint32_t counter[4];
    uint32_t key[2];
    uint32_t expected[4];
  };
  const Case cases[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(testing::Message() << std::hex << "counter " << c.counter[0]);
    PhiloxWords counter = {
        {c.counter[0], c.counter[1], c.counter[2], c.counter[3]}};
    expectWords(philox4x32(counter, c.key[0], c.key[1]), c.expected);
  }
}

TEST(PhiloxKnownAnswerTest, StreamKeyAndCounterFollowTheSpecification) {
  uint64_t seed = 0x0123456789abcdefull, streamId = 0xfedcba9876543210ull;
  uint64_t step = (uint64_t(7) << 32) | 11;
  PhiloxStreamKey key = makePhiloxStreamKey(seed, streamId, step);
  EXPECT_EQ(key.key0, 0x89abcdefu);
  EXPECT_EQ(key.key1, 0x01234567u);
  EXPECT_EQ(key.streamLow, 0x76543210u);
  EXPECT_EQ(key.streamHigh, 0xfedcba98u);
  EXPECT_EQ(key.stepWord, 11u ^ (7u * 0x85EBCA6Bu));
  // Block b is Philox4x32-10 of (b, stream low, stream high, step word).
  for (uint32_t block : {0u, 1u, 77u, 0xffffffffu}) {
    PhiloxWords counter = {
        {block, key.streamLow, key.streamHigh, key.stepWord}};
    PhiloxWords expected = philox4x32(counter, key.key0, key.key1);
    PhiloxWords actual = philoxBlock(key, block);
    for (int lane = 0; lane < 4; ++lane)
      EXPECT_EQ(actual.w[lane], expected.w[lane]) << block << " " << lane;
  }
}

TEST(PhiloxKnownAnswerTest, StreamIsPinned) {
  // Blocks of gmopt's stream as the CPU backend drew them before the two
  // backends shared this header; every dropout mask depends on them.
  struct Case {
    uint64_t seed, streamId, step;
    uint32_t block;
    uint32_t expected[4];
  };
  const Case cases[] = {
      {0, 0, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {0x1234abcd5678ull,
       42,
       5,
       3,
       {0x7ce7c3e2, 0x3f01cbe5, 0x69f2a59f, 0xc049310c}},
      {99,
       7,
       (uint64_t(1) << 33) + 3,
       0xffffffff,
       {0x93228d6d, 0x321a1d36, 0x6d11b567, 0x7904db63}},
      {0xdeadbeefcafef00dull,
       0x0123456789abcdefull,
       0xffffffffffffffffull,
       12345,
       {0x9809b344, 0xb1aeb2db, 0x7d475cc1, 0x1ef395d3}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(testing::Message() << "seed " << c.seed << " stream "
                                    << c.streamId << " step " << c.step);
    expectWords(
        philoxBlock(makePhiloxStreamKey(c.seed, c.streamId, c.step), c.block),
        c.expected);
  }
}

TEST(PhiloxKnownAnswerTest, UniformsAndKeepDecisions) {
  // The top 24 bits, scaled to [0, 1).
  EXPECT_EQ(philoxUnitFloat(0), 0.0f);
  EXPECT_EQ(philoxUnitFloat(0xff), 0.0f);
  EXPECT_EQ(philoxUnitFloat(0x100), 1.0f / 16777216.0f);
  EXPECT_EQ(philoxUnitFloat(0x80000000u), 0.5f);
  EXPECT_EQ(philoxUnitFloat(0xffffffffu), 16777215.0f / 16777216.0f);
  EXPECT_LT(philoxUnitFloat(0xffffffffu), 1.0f);
  // Kept iff u >= ratio: ratio 0 keeps everything, u == ratio is kept.
  EXPECT_TRUE(dropoutKeeps(0, 0.0f));
  EXPECT_TRUE(dropoutKeeps(0x80000000u, 0.5f));
  EXPECT_FALSE(dropoutKeeps(0x7fffffffu, 0.5f));
  EXPECT_FALSE(dropoutKeeps(0xffffffffu, 1.0f));
  EXPECT_EQ(kPhiloxMaxElements, uint64_t(4) << 32);
}

} // namespace
