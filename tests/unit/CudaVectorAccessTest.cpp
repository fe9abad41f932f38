//===- CudaVectorAccessTest.cpp - The elementwise kernel's vector path ----===//
//
// Host tests of backend/cuda/VectorAccess.h, the index arithmetic and the
// per-vector step that the elementwise kernel's 16-byte vector path runs
// (ElementwiseKernels.cu): for many sizes and grid shapes the grid-stride
// schedule visits every element exactly once, whole vectors only at
// vector-aligned addresses; the launcher takes the vector path only for
// unbroadcast, contiguous, 16-byte-aligned operands (a planned arena slice
// does, a broadcast or an odd sub-view does not); and the vector step
// writes the same bits as the scalar path for every op and float storage.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/IndexingPlan.h"
#include "backend/cuda/VectorAccess.h"
#include "ir/Plan.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

static_assert(kBufferAlignment % kVectorBytes == 0,
              "planned buffers start on a vector boundary");
static_assert(kVectorLanes<float> == 4 && kVectorLanes<HalfBits> == 8 &&
                  kVectorLanes<BFloat16Bits> == 8,
              "a vector is 16 bytes");
static_assert(sizeof(ElementVector<HalfBits>) == kVectorBytes &&
                  alignof(ElementVector<float>) == kVectorBytes,
              "one 128-bit access per vector");

/// The element sizes the tests run, with sizes around the vector widths
/// and the block size.
const int64_t kSizes[] = {0,    1,    2,    3,    4,    5,    7,    8,   9,
                          15,   16,   17,   31,   32,   33,   255,  256, 257,
                          1023, 1024, 1025, 4095, 4096, 4097, 65537};

/// The BroadcastIndexing the CUDA dispatch builds for \p operands
/// broadcast to \p out (CudaDispatchSupport.h's broadcastIndexing).
BroadcastIndexing indexingFor(const std::vector<IndexVector> &operands,
                              const IndexVector &out) {
  llvm::SmallVector<IndexVector, 4> strides;
  for (const IndexVector &operand : operands) {
    IndexVector s;
    EXPECT_TRUE(broadcastStrides(operand, out, s));
    strides.push_back(s);
  }
  while (strides.size() < 3)
    strides.push_back(IndexVector(out.size(), 0));
  strides.push_back(contiguousStrides(out));
  BroadcastIndexing ix;
  EXPECT_TRUE(collapseIndexing(out, strides, ix));
  return ix;
}

TEST(CudaVectorAccessTest, PartitionSplitsIntoWholeVectorsAndATail) {
  for (int lanes : {4, 8})
    for (int64_t elements : kSizes) {
      VectorPartition p = partitionIntoVectors(elements, lanes);
      EXPECT_EQ(p.elements, elements);
      EXPECT_EQ(p.vectors * lanes, p.tailBegin);
      EXPECT_LE(p.tailBegin, elements);
      EXPECT_LT(elements - p.tailBegin, lanes) << elements;
    }
  VectorPartition p = partitionIntoVectors(1025, 8);
  EXPECT_EQ(p.vectors, 128);
  EXPECT_EQ(p.tailBegin, 1024);
  EXPECT_EQ(vectorFirstElement(p, 3), 24);
}

TEST(CudaVectorAccessTest, EveryElementIsVisitedExactlyOnce) {
  // Grids smaller and larger than the work, and the kernel's own shape
  // (gridFor(vectors) blocks of 256 threads, at least one block).
  for (int lanes : {4, 8})
    for (int64_t elements : kSizes) {
      VectorPartition p = partitionIntoVectors(elements, lanes);
      int64_t launched = std::max<int64_t>(1, (p.vectors + 255) / 256) * 256;
      for (int64_t threads :
           {int64_t(1), int64_t(3), int64_t(32), int64_t(1000), launched}) {
        std::vector<int> visits(elements, 0);
        for (int64_t thread = 0; thread < threads; ++thread)
          forEachOwned(
              p, thread, threads,
              [&](int64_t first) {
                ASSERT_EQ(first % lanes, 0);
                ASSERT_LE(first + lanes, p.tailBegin);
                for (int lane = 0; lane < lanes; ++lane)
                  ++visits[first + lane];
              },
              [&](int64_t i) {
                ASSERT_GE(i, p.tailBegin);
                ASSERT_LT(i, elements);
                ++visits[i];
              });
        for (int64_t i = 0; i < elements; ++i)
          ASSERT_EQ(visits[i], 1)
              << "element " << i << " of " << elements << ", " << lanes
              << " lanes, " << threads << " threads";
      }
    }
}

/// Runs the schedule over \p elements of \p T at \p base and checks that
/// every vector address is aligned.
template <typename T> void expectAlignedVectors(const T *base, int64_t n) {
  VectorPartition p = partitionIntoVectors(n, kVectorLanes<T>);
  for (int64_t thread = 0; thread < 7; ++thread)
    forEachOwned(
        p, thread, 7,
        [&](int64_t first) { EXPECT_TRUE(isVectorAligned(base + first)); },
        [](int64_t) {});
}

TEST(CudaVectorAccessTest, OnlyAlignedAddressesAreVectorAccessed) {
  alignas(kBufferAlignment) static unsigned char arena[4 * kBufferAlignment];
  BroadcastIndexing same = indexingFor({{1025}, {1025}}, {1025});
  for (int byteOffset = 0; byteOffset < 64; ++byteOffset) {
    const void *view = arena + byteOffset;
    const void *aligned = arena;
    const void *operands[3] = {view, aligned, nullptr};
    const void *swapped[3] = {aligned, view, nullptr};
    bool expected = byteOffset % kVectorBytes == 0;
    EXPECT_EQ(isVectorAligned(view), expected);
    // Any one misaligned operand or output sends the launch to the scalar
    // path.
    EXPECT_EQ(canAccessAsVectors(same, 2, operands, aligned), expected);
    EXPECT_EQ(canAccessAsVectors(same, 2, swapped, aligned), expected);
    const void *both[3] = {aligned, aligned, nullptr};
    EXPECT_EQ(canAccessAsVectors(same, 2, both, view), expected);
    if (expected)
      for (int64_t n : kSizes) {
        if (byteOffset + n * 2 > int64_t(sizeof(arena)))
          continue;
        expectAlignedVectors(reinterpret_cast<const HalfBits *>(view), n);
        if (byteOffset + n * 4 <= int64_t(sizeof(arena)))
          expectAlignedVectors(reinterpret_cast<const float *>(view), n);
      }
  }
}

TEST(CudaVectorAccessTest, PlannedArenaSlicesTakeTheVectorPath) {
  // The arena is cudaMalloc'ed (256-byte aligned); the plan places every
  // buffer at a multiple of kBufferAlignment.
  alignas(kBufferAlignment) static unsigned char arena[8 * kBufferAlignment];
  const void *a = arena + 1 * kBufferAlignment;
  const void *b = arena + 3 * kBufferAlignment;
  const void *c = arena + 5 * kBufferAlignment;
  const void *out = arena + 6 * kBufferAlignment;
  const void *operands[3] = {a, b, c};
  for (int count : {1, 2, 3}) {
    std::vector<IndexVector> shapes(count, IndexVector{2, 3, 5});
    BroadcastIndexing ix = indexingFor(shapes, {2, 3, 5});
    EXPECT_TRUE(canAccessAsVectors(ix, count, operands, out)) << count;
    // In place (out aliases a, as the plan allows).
    EXPECT_TRUE(canAccessAsVectors(ix, count, operands, a)) << count;
  }
  // A rank-0 tensor and unit dimensions collapse to one contiguous run.
  EXPECT_TRUE(canAccessAsVectors(indexingFor({IndexVector()}, IndexVector()), 1,
                                 operands, out));
  EXPECT_TRUE(canAccessAsVectors(indexingFor({{4, 1, 8}, {4, 1, 8}}, {4, 1, 8}),
                                 2, operands, out));
  // Slots the op does not read are not checked.
  const void *unaryOnly[3] = {a, arena + 1, arena + 3};
  EXPECT_TRUE(canAccessAsVectors(indexingFor({{64}}, {64}), 1, unaryOnly, out));
}

TEST(CudaVectorAccessTest, BroadcastsAndOddSubViewsFallBack) {
  alignas(kBufferAlignment) static unsigned char arena[8 * kBufferAlignment];
  const void *operands[3] = {arena, arena + kBufferAlignment,
                             arena + 2 * kBufferAlignment};
  const void *out = arena + 4 * kBufferAlignment;
  // Bias-like broadcast, scalar operand (Scale), broadcast of the first
  // operand, and a three-operand op with a broadcast bias.
  EXPECT_FALSE(
      canAccessAsVectors(indexingFor({{4, 8}, {8}}, {4, 8}), 2, operands, out));
  EXPECT_FALSE(
      canAccessAsVectors(indexingFor({{4, 8}, {1}}, {4, 8}), 2, operands, out));
  EXPECT_FALSE(canAccessAsVectors(indexingFor({{1, 8}, {4, 8}}, {4, 8}), 2,
                                  operands, out));
  EXPECT_FALSE(canAccessAsVectors(indexingFor({{4, 8}, {4, 8}, {8}}, {4, 8}), 3,
                                  operands, out));
  // A sub-view (a Split or Slice alias) at an element offset that is not a
  // multiple of the vector: 1 and 3 floats, 1 to 7 halves.
  BroadcastIndexing same = indexingFor({{64}, {64}}, {64});
  for (int elementBytes : {2, 4})
    for (int offset = 1; offset * elementBytes < kVectorBytes; ++offset) {
      const void *view[3] = {arena + offset * elementBytes,
                             arena + kBufferAlignment, nullptr};
      EXPECT_FALSE(canAccessAsVectors(same, 2, view, out)) << offset;
      EXPECT_FALSE(
          canAccessAsVectors(same, 2, operands, arena + offset * elementBytes))
          << offset;
    }
  // A sub-view at a whole vector's offset still vectorizes.
  const void *vectorOffset[3] = {arena + kVectorBytes, arena + kBufferAlignment,
                                 nullptr};
  EXPECT_TRUE(canAccessAsVectors(same, 2, vectorOffset, out));
}

/// Random stored bits of \p T (16-bit patterns include NaNs and
/// infinities, which must come out the same too).
template <typename T> std::vector<T> randomElements(size_t n, unsigned seed);
template <> std::vector<float> randomElements<float>(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(rng);
  return values;
}
template <typename Bits> std::vector<Bits> randomBits(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Bits> values(n);
  for (Bits &v : values)
    v.bits = static_cast<uint16_t>(rng());
  return values;
}
template <>
std::vector<HalfBits> randomElements<HalfBits>(size_t n, unsigned seed) {
  return randomBits<HalfBits>(n, seed);
}
template <>
std::vector<BFloat16Bits> randomElements<BFloat16Bits>(size_t n,
                                                       unsigned seed) {
  return randomBits<BFloat16Bits>(n, seed);
}

/// A vector-aligned copy of \p values (a std::vector<T> is only aligned
/// for T).
template <typename T> struct AlignedBuffer {
  explicit AlignedBuffer(const std::vector<T> &values)
      : storage((values.size() * sizeof(T) + kVectorBytes - 1) / kVectorBytes +
                1) {
    std::memcpy(data(), values.data(), values.size() * sizeof(T));
  }
  T *data() { return reinterpret_cast<T *>(storage.data()); }
  std::vector<ElementVector<T>> storage;
};

template <typename T> void expectVectorPathMatchesScalarPath() {
  const int64_t elements = 4 * kVectorLanes<T> + 3;
  for (int code = 0; code <= int(ElementwiseOp::BiasGeluGradTanh); ++code) {
    auto op = static_cast<ElementwiseOp>(code);
    int operands = operandCount(op);
    // Clip's bounds, LeakyRelu's alpha, ...: any finite nonzero pair.
    float param = 0.75f, param2 = 1.5f;
    std::vector<T> a = randomElements<T>(elements, 3 * code + 1);
    std::vector<T> b = randomElements<T>(elements, 3 * code + 2);
    std::vector<T> c = randomElements<T>(elements, 3 * code + 3);
    std::vector<T> scalar(elements);
    for (int64_t i = 0; i < elements; ++i)
      applyElementwiseAt(op, operands, a.data(), i, b.data(), i, c.data(), i,
                         scalar.data(), i, param, param2);
    std::vector<T> zeros(elements);
    for (bool inPlace : {false, true}) {
      AlignedBuffer<T> va(a), vb(b), vc(c), vout(zeros);
      T *out = inPlace ? va.data() : vout.data();
      const void *pointers[3] = {va.data(), vb.data(), vc.data()};
      std::vector<IndexVector> shapes(operands, IndexVector{elements});
      ASSERT_TRUE(canAccessAsVectors(indexingFor(shapes, {elements}), operands,
                                     pointers, out));
      VectorPartition p = partitionIntoVectors(elements, kVectorLanes<T>);
      for (int64_t thread = 0; thread < 2; ++thread)
        forEachOwned(
            p, thread, 2,
            [&](int64_t first) {
              applyElementwiseVector(op, operands, va.data(), vb.data(),
                                     vc.data(), out, first, param, param2);
            },
            [&](int64_t i) {
              applyElementwiseAt(op, operands, va.data(), i, vb.data(), i,
                                 vc.data(), i, out, i, param, param2);
            });
      EXPECT_EQ(std::memcmp(out, scalar.data(), elements * sizeof(T)), 0)
          << "op " << code << (inPlace ? " in place" : "");
    }
  }
}

TEST(CudaVectorAccessTest, VectorPathWritesTheScalarPathsBits) {
  expectVectorPathMatchesScalarPath<float>();
  expectVectorPathMatchesScalarPath<HalfBits>();
  expectVectorPathMatchesScalarPath<BFloat16Bits>();
}

} // namespace
