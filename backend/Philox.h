//===- Philox.h - gmopt's Philox4x32-10 stream, host and device -*- C++ -*-===//
//
// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2,
// 3", SC'11): a keyed bijection of 128-bit counters. Element i of a random
// tensor uses lane i % 4 of the block for counter i / 4, so any element can
// be drawn independently of the others, in any order, on any thread. This
// header is the one implementation: plain C++ for the CPU backend and
// `__host__ __device__` code (no std::array, no library calls) for the CUDA
// kernels, so both draw the same numbers bit for bit.
//
// The random function of gmopt, exactly (all arithmetic is on unsigned
// integers, modulo 2^32 for 32-bit words):
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
//    the block is c after the tenth round (Random123's philox4x32-10;
//    tests/unit/PhiloxTest.cpp checks its known-answer vectors).
//  - Lane word w gives the uniform u = (w >> 8) * 2^-24 in [0, 1).
//  - Dropout keeps element i iff u >= ratio, and scales kept elements by
//    1 / (1 - ratio); BitmaskDropout and BiasDropout make the same
//    decisions from the same (S, R, T).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_PHILOX_H
#define GMOPT_BACKEND_PHILOX_H

#include "backend/HostDevice.h"

#include <cstdint>

namespace gmopt {

/// Four 32-bit words: a counter or a block of random output.
struct PhiloxWords {
  uint32_t w[4];
};

/// Philox4x32 with 10 rounds: the random block for \p counter under the key
/// (\p key0, \p key1).
GMOPT_HD PhiloxWords philox4x32(PhiloxWords counter, uint32_t key0,
                                uint32_t key1) {
  uint32_t c0 = counter.w[0], c1 = counter.w[1], c2 = counter.w[2],
           c3 = counter.w[3];
  for (int round = 0; round < 10; ++round) {
    uint64_t product0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t product1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t hi0 = static_cast<uint32_t>(product0 >> 32);
    uint32_t lo0 = static_cast<uint32_t>(product0);
    uint32_t hi1 = static_cast<uint32_t>(product1 >> 32);
    uint32_t lo1 = static_cast<uint32_t>(product1);
    c0 = hi1 ^ c1 ^ key0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ key1;
    c3 = lo0;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  PhiloxWords block;
  block.w[0] = c0;
  block.w[1] = c1;
  block.w[2] = c2;
  block.w[3] = c3;
  return block;
}

/// Elements one stream can draw: 2^32 blocks of four.
constexpr uint64_t kPhiloxMaxElements = uint64_t(1) << 34;

/// One random node's stream in one step, reduced to the words the rounds
/// use (plain data, so a kernel takes it by value).
struct PhiloxStreamKey {
  uint32_t key0, key1;
  uint32_t streamLow, streamHigh;
  uint32_t stepWord;
};

/// The stream of (\p seed, \p streamId, \p step).
GMOPT_HD PhiloxStreamKey makePhiloxStreamKey(uint64_t seed, uint64_t streamId,
                                             uint64_t step) {
  PhiloxStreamKey key;
  key.key0 = static_cast<uint32_t>(seed);
  key.key1 = static_cast<uint32_t>(seed >> 32);
  key.streamLow = static_cast<uint32_t>(streamId);
  key.streamHigh = static_cast<uint32_t>(streamId >> 32);
  key.stepWord = static_cast<uint32_t>(step) ^
                 static_cast<uint32_t>(step >> 32) * 0x85EBCA6Bu;
  return key;
}

/// The random block of elements [4 * block, 4 * block + 4) of \p stream.
GMOPT_HD PhiloxWords philoxBlock(const PhiloxStreamKey &stream,
                                 uint32_t block) {
  PhiloxWords counter;
  counter.w[0] = block;
  counter.w[1] = stream.streamLow;
  counter.w[2] = stream.streamHigh;
  counter.w[3] = stream.stepWord;
  return philox4x32(counter, stream.key0, stream.key1);
}

/// The uniform in [0, 1) of one random word (its top 24 bits).
GMOPT_HD float philoxUnitFloat(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

/// Whether dropout with \p ratio keeps the element drawn from \p bits.
GMOPT_HD bool dropoutKeeps(uint32_t bits, float ratio) {
  return philoxUnitFloat(bits) >= ratio;
}

} // namespace gmopt

#endif // GMOPT_BACKEND_PHILOX_H
