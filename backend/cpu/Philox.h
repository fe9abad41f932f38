//===- Philox.h - Counter-based Philox4x32-10 random numbers ----*- C++ -*-===//
//
// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2,
// 3", SC'11): a keyed bijection of 128-bit counters. Element i of a random
// tensor uses lane i % 4 of the block for counter i / 4, so any element can
// be drawn independently of the others, in any order, on any thread.
//
// The random function of gmopt, exactly (any backend reproduces it bit for
// bit from this; all arithmetic is on unsigned integers, modulo 2^32 for
// 32-bit words):
//  - Inputs: the run's seed S (uint64, ExecutorOptions::seed), the node's
//    stream id R (uint64, Node::getStreamId(), set at import) and the step
//    T (uint64, the micro-step number runStep is given).
//  - Key: k0 = S mod 2^32, k1 = S >> 32.
//  - Step word: t = (T mod 2^32) XOR (((T >> 32) * 0x85EBCA6B) mod 2^32).
//  - Element i of the node's random tensor (row-major, i < 2^34) is drawn
//    from block b = i / 4, lane i % 4. The counter of block b is
//    (c0, c1, c2, c3) = (b, R mod 2^32, R >> 32, t).
//  - Philox4x32-10 of counter c under key k: ten rounds of
//      p0 = 0xD2511F53 * c0 (64-bit product), p1 = 0xCD9E8D57 * c2,
//      c = (hi(p1) ^ c1 ^ k0, lo(p1), hi(p0) ^ c3 ^ k1, lo(p0)),
//      k0 += 0x9E3779B9, k1 += 0xBB67AE85;
//    the block is c after the tenth round (Random123's philox4x32-10; the
//    known-answer vectors are in CpuKernelsDispatchTest).
//  - Lane word w gives the uniform u = (w >> 8) * 2^-24 in [0, 1).
//  - Dropout keeps element i iff u >= ratio, and scales kept elements by
//    1 / (1 - ratio); BitmaskDropout and BiasDropout make the same
//    decisions from the same (S, R, T).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_PHILOX_H
#define GMOPT_BACKEND_CPU_PHILOX_H

#include <array>
#include <cstdint>

namespace gmopt {
namespace cpu {

/// Four 32-bit words: a counter or a block of random output.
using PhiloxBlock = std::array<uint32_t, 4>;
/// The two-word key.
using PhiloxKey = std::array<uint32_t, 2>;

/// Philox4x32 with 10 rounds: the random block for \p counter under \p key.
inline PhiloxBlock philox4x32(PhiloxBlock counter, PhiloxKey key) {
  constexpr uint64_t kMultiplier0 = 0xD2511F53u;
  constexpr uint64_t kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t product0 = kMultiplier0 * counter[0];
    uint64_t product1 = kMultiplier1 * counter[2];
    uint32_t hi0 = static_cast<uint32_t>(product0 >> 32);
    uint32_t lo0 = static_cast<uint32_t>(product0);
    uint32_t hi1 = static_cast<uint32_t>(product1 >> 32);
    uint32_t lo1 = static_cast<uint32_t>(product1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

/// A stream of uniform numbers for one random node in one step.
class PhiloxStream {
public:
  /// Elements a stream can draw: 2^32 blocks of four.
  static constexpr uint64_t kMaxElements = uint64_t(1) << 34;

  /// The stream of (\p seed, \p streamId, \p step).
  PhiloxStream(uint64_t seed, uint64_t streamId, uint64_t step)
      : key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
        streamLow(static_cast<uint32_t>(streamId)),
        streamHigh(static_cast<uint32_t>(streamId >> 32)),
        stepWord(static_cast<uint32_t>(step) ^
                 static_cast<uint32_t>(step >> 32) * 0x85EBCA6Bu) {}

  /// The random block holding elements [4 * block, 4 * block + 4);
  /// \p blockIndex < 2^32.
  PhiloxBlock block(uint64_t blockIndex) const {
    return philox4x32(
        {static_cast<uint32_t>(blockIndex), streamLow, streamHigh, stepWord},
        key);
  }

  /// A uniform float in [0, 1) from 24 random bits.
  static float toUnitFloat(uint32_t bits) {
    return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
  }

private:
  PhiloxKey key;
  uint32_t streamLow;
  uint32_t streamHigh;
  uint32_t stepWord;
};

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_PHILOX_H
