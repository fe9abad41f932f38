//===- PhiloxMath.h - gmopt's Philox stream for host and device -*- C++ -*-===//
//
// The random function of backend/cpu/Philox.h (its header states the exact
// specification: key from the seed, counter (block, stream id, step word),
// ten Philox4x32 rounds, 24-bit uniforms, keep iff u >= ratio) written as
// `__host__ __device__` code without std::array, so CUDA dropout kernels
// draw exactly the CPU backend's numbers. tests/unit/CudaElementwiseMathTest
// checks the blocks and the keep masks bit for bit against cpu::PhiloxStream.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_PHILOXMATH_H
#define GMOPT_BACKEND_CUDA_PHILOXMATH_H

#include "backend/cuda/ElementwiseMath.h"

namespace gmopt {
namespace cuda {

/// The inputs of one random node's stream in one step, reduced to the
/// words the rounds use.
struct PhiloxStreamKey {
  uint32_t key0, key1;
  uint32_t streamLow, streamHigh;
  uint32_t stepWord;
};

/// The stream of (\p seed, \p streamId, \p step), as cpu::PhiloxStream.
GMOPT_HD PhiloxStreamKey makePhiloxStreamKey(uint64_t seed, uint64_t streamId,
                                             uint64_t step) {
  PhiloxStreamKey k;
  k.key0 = static_cast<uint32_t>(seed);
  k.key1 = static_cast<uint32_t>(seed >> 32);
  k.streamLow = static_cast<uint32_t>(streamId);
  k.streamHigh = static_cast<uint32_t>(streamId >> 32);
  k.stepWord = static_cast<uint32_t>(step) ^
               static_cast<uint32_t>(step >> 32) * 0x85EBCA6Bu;
  return k;
}

/// Four random words.
struct PhiloxWords {
  uint32_t w[4];
};

/// The random block of elements [4 * block, 4 * block + 4).
GMOPT_HD PhiloxWords philoxBlock(const PhiloxStreamKey &stream,
                                 uint32_t block) {
  uint32_t c0 = block, c1 = stream.streamLow, c2 = stream.streamHigh,
           c3 = stream.stepWord;
  uint32_t k0 = stream.key0, k1 = stream.key1;
  for (int round = 0; round < 10; ++round) {
    uint64_t product0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t product1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t hi0 = static_cast<uint32_t>(product0 >> 32);
    uint32_t lo0 = static_cast<uint32_t>(product0);
    uint32_t hi1 = static_cast<uint32_t>(product1 >> 32);
    uint32_t lo1 = static_cast<uint32_t>(product1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  PhiloxWords out;
  out.w[0] = c0;
  out.w[1] = c1;
  out.w[2] = c2;
  out.w[3] = c3;
  return out;
}

/// The uniform in [0, 1) of one random word.
GMOPT_HD float philoxUnitFloat(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

/// Whether dropout keeps the element drawn from \p bits.
GMOPT_HD bool dropoutKeeps(uint32_t bits, float ratio) {
  return philoxUnitFloat(bits) >= ratio;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_PHILOXMATH_H
