//===- Philox.h - Counter-based Philox4x32-10 random numbers ----*- C++ -*-===//
//
// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2,
// 3", SC'11): a keyed bijection of 128-bit counters. Element i of a random
// tensor uses lane i % 4 of the block for counter i / 4, so any element can
// be drawn independently of the others, in any order, on any thread.
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
  /// The stream of (\p seed, \p streamId, \p step).
  PhiloxStream(uint64_t seed, uint32_t streamId, uint64_t step)
      : key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
        streamId(streamId),
        stepWord(static_cast<uint32_t>(step) ^
                 static_cast<uint32_t>(step >> 32) * 0x85EBCA6Bu) {}

  /// The random block holding elements [4 * block, 4 * block + 4).
  PhiloxBlock block(uint64_t blockIndex) const {
    return philox4x32({static_cast<uint32_t>(blockIndex),
                       static_cast<uint32_t>(blockIndex >> 32), streamId,
                       stepWord},
                      key);
  }

  /// A uniform float in [0, 1) from 24 random bits.
  static float toUnitFloat(uint32_t bits) {
    return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
  }

private:
  PhiloxKey key;
  uint32_t streamId;
  uint32_t stepWord;
};

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_PHILOX_H
