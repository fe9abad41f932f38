//===- Philox.h - The CPU names of gmopt's Philox stream --------*- C++ -*-===//
//
// gmopt's Philox stream is backend/Philox.h (its header states the exact
// specification), one implementation for both backends. This header keeps
// the std::array spelling the CPU backend's tests use
// (tests/unit/CpuKernelsDispatchTest.cpp, CudaElementwiseMathTest.cpp) as
// thin calls into it; the kernels include backend/Philox.h.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_PHILOX_H
#define GMOPT_BACKEND_CPU_PHILOX_H

#include "backend/Philox.h"

#include <array>
#include <cstdint>

namespace gmopt {
namespace cpu {

/// Four 32-bit words: a counter or a block of random output.
using PhiloxBlock = std::array<uint32_t, 4>;
/// The two-word key.
using PhiloxKey = std::array<uint32_t, 2>;

/// gmopt::philox4x32 on arrays.
inline PhiloxBlock philox4x32(PhiloxBlock counter, PhiloxKey key) {
  PhiloxWords block = gmopt::philox4x32(
      {{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1]);
  return {block.w[0], block.w[1], block.w[2], block.w[3]};
}

/// The stream of one random node in one step (gmopt::PhiloxStreamKey).
class PhiloxStream {
public:
  /// Elements a stream can draw.
  static constexpr uint64_t kMaxElements = kPhiloxMaxElements;

  /// The stream of (\p seed, \p streamId, \p step).
  PhiloxStream(uint64_t seed, uint64_t streamId, uint64_t step)
      : key(makePhiloxStreamKey(seed, streamId, step)) {}

  /// The random block holding elements [4 * block, 4 * block + 4);
  /// \p blockIndex < 2^32.
  PhiloxBlock block(uint64_t blockIndex) const {
    PhiloxWords words = philoxBlock(key, static_cast<uint32_t>(blockIndex));
    return {words.w[0], words.w[1], words.w[2], words.w[3]};
  }

  /// A uniform float in [0, 1) from 24 random bits.
  static float toUnitFloat(uint32_t bits) { return philoxUnitFloat(bits); }

private:
  PhiloxStreamKey key;
};

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_PHILOX_H
