//===- KernelSupport.cpp - Shared machinery of the CPU kernels ------------===//
//
// Error formatting, the kernel table, f16/bf16 staging conversions, operand
// readers, shape checks, and the two data-movement primitives several
// kernel families build on: broadcast copy and N-d transpose (collapsed to
// the fewest dimensions, with a blocked path for 2-D and batched 2-D).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelSupport.h"

#include "ir/OpRegistry.h"
#include "ir/ops/ShapeEval.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

using namespace gmopt;
using namespace gmopt::cpu;

//===----------------------------------------------------------------------===//
// KernelCall and KernelTable
//===----------------------------------------------------------------------===//

KernelState::~KernelState() = default;

llvm::Error KernelCall::error(const llvm::Twine &message) const {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 node.getOp().str() + ": " + message.str() +
                                     " (node " + node.describe() + ")");
}

static std::string tableKey(llvm::StringRef domain, llvm::StringRef opType) {
  return (domain + "\x1f" + opType).str();
}

void KernelTable::add(llvm::StringRef domain, llvm::StringRef opType,
                      KernelInfo info) {
  bool inserted = entries.try_emplace(tableKey(domain, opType), info).second;
  (void)inserted;
  assert(inserted && "kernel registered twice");
}

void KernelTable::setWorkspace(llvm::StringRef domain, llvm::StringRef opType,
                               WorkspaceFn fn) {
  auto it = entries.find(tableKey(domain, opType));
  assert(it != entries.end() && "workspace of an unregistered kernel");
  if (it != entries.end())
    it->second.workspace = fn;
}

void KernelTable::setRowDims(llvm::StringRef domain, llvm::StringRef opType,
                             RowDimsFn fn) {
  auto it = entries.find(tableKey(domain, opType));
  assert(it != entries.end() && "row dims of an unregistered kernel");
  assert((it == entries.end() ||
          it->second.mode == KernelMode::StageHalfAsFloat) &&
         "row dims of a kernel that stages nothing");
  if (it != entries.end())
    it->second.rowDims = fn;
}

void KernelTable::setPrepare(llvm::StringRef domain, llvm::StringRef opType,
                             PrepareFn fn) {
  auto it = entries.find(tableKey(domain, opType));
  assert(it != entries.end() && "prepare of an unregistered kernel");
  if (it != entries.end())
    it->second.prepare = fn;
}

std::optional<RowSlicing>
cpu::planRowSlices(unsigned dims,
                   llvm::ArrayRef<llvm::SmallVector<int64_t, 6>> shapes) {
  if (dims == 0)
    return std::nullopt;
  const llvm::SmallVector<int64_t, 6> *first = nullptr;
  int64_t widest = 1;
  for (const llvm::SmallVector<int64_t, 6> &shape : shapes) {
    if (shape.empty())
      continue;
    if (shape.size() < dims)
      return std::nullopt;
    if (!first)
      first = &shape;
    else if (!std::equal(shape.begin(), shape.begin() + dims, first->begin()))
      return std::nullopt;
  }
  if (!first)
    return std::nullopt;
  RowSlicing slicing;
  slicing.dims = dims;
  slicing.rows = product(llvm::ArrayRef<int64_t>(*first).take_front(dims));
  if (slicing.rows <= 1)
    return std::nullopt;
  for (const llvm::SmallVector<int64_t, 6> &shape : shapes)
    if (!shape.empty())
      widest = std::max(
          widest, product(llvm::ArrayRef<int64_t>(shape).drop_front(dims)));
  slicing.sliceRows = std::max<int64_t>(kStagedSliceElements / widest, 1);
  if (slicing.sliceRows >= slicing.rows)
    return std::nullopt;
  return slicing;
}

const KernelInfo *KernelTable::lookup(llvm::StringRef domain,
                                      llvm::StringRef opType) const {
  auto it = entries.find(tableKey(domain, opType));
  return it == entries.end() ? nullptr : &it->second;
}

void KernelTable::indexSchemas() {
  for (const OpSchema *schema : OpRegistry::instance().all())
    if (const KernelInfo *info = lookup(schema->domain, schema->name))
      bySchema[schema] = info;
}

std::vector<std::string> KernelTable::keys() const {
  std::vector<std::string> result;
  for (const auto &entry : entries) {
    auto [domain, opType] = entry.getKey().split('\x1f');
    result.push_back(OpName{domain.str(), opType.str()}.str());
  }
  llvm::sort(result);
  return result;
}

llvm::Error cpu::unsupportedType(const KernelCall &call, DType type,
                                 llvm::StringRef what) {
  return call.error("unsupported element type " + dtypeName(type) + " of " +
                    what);
}

//===----------------------------------------------------------------------===//
// Element conversions
//===----------------------------------------------------------------------===//

// Bulk f16 conversions: with F16C (x86, checked at run time) eight elements
// per instruction, rounding to nearest even like the scalar code; otherwise
// the scalar functions of Half.h.
#if defined(__x86_64__) && defined(__GNUC__)
#define GMOPT_HAVE_F16C_DISPATCH 1
#include <cpuid.h>
__attribute__((target("avx,f16c"))) static void
halfToFloatF16C(const uint16_t *src, float *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(half));
  }
  for (; i < n; ++i)
    dst[i] = halfToFloat(src[i]);
}

__attribute__((target("avx,f16c"))) static void
floatToHalfF16C(const float *src, uint16_t *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i half =
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i), half);
  }
  for (; i < n; ++i)
    dst[i] = floatToHalf(src[i]);
}

static bool hasF16C() {
  // CPUID leaf 1: ECX bit 29 is F16C, bit 28 AVX (clang 14's
  // __builtin_cpu_supports does not know "f16c").
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
      return false;
    return (ecx & (1u << 29)) != 0 && (ecx & (1u << 28)) != 0;
  }();
  return supported;
}
#endif

static void halfToFloatBulk(const uint16_t *src, float *dst, int64_t n) {
#ifdef GMOPT_HAVE_F16C_DISPATCH
  if (hasF16C())
    return halfToFloatF16C(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    dst[i] = halfToFloat(src[i]);
}

static void floatToHalfBulk(const float *src, uint16_t *dst, int64_t n) {
#ifdef GMOPT_HAVE_F16C_DISPATCH
  if (hasF16C())
    return floatToHalfF16C(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    dst[i] = floatToHalf(src[i]);
}

static void floatToBFloat16Bulk(const float *src, uint16_t *dst, int64_t n) {
  // Branch-free so the loop vectorizes; same results as floatToBFloat16.
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = floatBits(src[i]);
    uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    uint32_t quietNaN = (bits >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>(
        (bits & 0x7fffffffu) > 0x7f800000u ? quietNaN : rounded);
  }
}

void cpu::widenRows(DType type, const uint16_t *src, int64_t rows, int64_t cols,
                    int64_t ld, float *dst, unsigned numThreads) {
  parallelFor(numThreads, rows, grainFor(cols), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const uint16_t *from = src + r * ld;
      float *to = dst + r * cols;
      if (type == DType::F16) {
        halfToFloatBulk(from, to, cols);
        continue;
      }
      for (int64_t i = 0; i < cols; ++i)
        to[i] = bfloat16ToFloat(from[i]);
    }
  });
}

void cpu::narrowRows(const float *src, int64_t rows, int64_t cols, DType type,
                     uint16_t *dst, int64_t ld, unsigned numThreads) {
  parallelFor(numThreads, rows, grainFor(cols), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      if (type == DType::F16)
        floatToHalfBulk(src + r * cols, dst + r * ld, cols);
      else
        floatToBFloat16Bulk(src + r * cols, dst + r * ld, cols);
    }
  });
}

void cpu::convertToFloat(const TensorView &src, float *dst,
                         unsigned numThreads) {
  int64_t n = src.getNumElements();
  const uint16_t *data = src.getDataAs<uint16_t>();
  switch (src.getDType()) {
  case DType::F16:
    parallelFor(numThreads, n, grainFor(1), [&](int64_t b, int64_t e) {
      halfToFloatBulk(data + b, dst + b, e - b);
    });
    return;
  case DType::BF16:
    parallelFor(numThreads, n, grainFor(1), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        dst[i] = bfloat16ToFloat(data[i]);
    });
    return;
  case DType::F32:
    if (n)
      std::memcpy(dst, src.getData(), n * sizeof(float));
    return;
  default:
    assert(false && "convertToFloat of a non-float tensor");
  }
}

void cpu::convertFromFloat(const float *src, const TensorView &dst,
                           unsigned numThreads) {
  int64_t n = dst.getNumElements();
  uint16_t *data = dst.getDataAs<uint16_t>();
  switch (dst.getDType()) {
  case DType::F16:
    parallelFor(numThreads, n, grainFor(1), [&](int64_t b, int64_t e) {
      floatToHalfBulk(src + b, data + b, e - b);
    });
    return;
  case DType::BF16:
    parallelFor(numThreads, n, grainFor(1), [&](int64_t b, int64_t e) {
      floatToBFloat16Bulk(src + b, data + b, e - b);
    });
    return;
  case DType::F32:
    if (n && dst.getData() != src)
      std::memmove(dst.getData(), src, n * sizeof(float));
    return;
  default:
    assert(false && "convertFromFloat into a non-float tensor");
  }
}

void cpu::zeroFill(const TensorView &view, unsigned numThreads) {
  char *bytes = static_cast<char *>(view.getData());
  int64_t size = static_cast<int64_t>(view.getSizeInBytes());
  parallelFor(numThreads, size, 1 << 18,
              [&](int64_t b, int64_t e) { std::memset(bytes + b, 0, e - b); });
}

void cpu::copyElements(const TensorView &src, const TensorView &dst) {
  assert(src.getSizeInBytes() == dst.getSizeInBytes() && "copy size mismatch");
  if (src.getData() != dst.getData() && src.getSizeInBytes())
    std::memmove(dst.getData(), src.getData(), src.getSizeInBytes());
}

//===----------------------------------------------------------------------===//
// Operand readers
//===----------------------------------------------------------------------===//

llvm::Expected<llvm::SmallVector<int64_t, 8>>
cpu::readInts(const KernelCall &call, const TensorView &view,
              llvm::StringRef what) {
  llvm::SmallVector<int64_t, 8> values;
  int64_t n = view.getNumElements();
  values.reserve(n);
  auto read = [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *data = view.getDataAs<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, Bool8>)
        values.push_back(data[i].value != 0);
      else
        values.push_back(static_cast<int64_t>(data[i]));
    }
    return llvm::Error::success();
  };
  if (llvm::Error err =
          dispatchTypes<int64_t, int32_t, int16_t, int8_t, uint8_t, uint16_t,
                        uint32_t, Bool8>(call, view.getDType(), read, what))
    return err;
  return values;
}

llvm::Expected<double> cpu::readScalar(const KernelCall &call,
                                       const TensorView &view,
                                       llvm::StringRef what) {
  if (view.getNumElements() != 1)
    return call.error(what + " must have exactly one element, not " +
                      llvm::Twine(view.getNumElements()));
  double value = 0;
  auto read = [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    value = convertElement<double>(view.getDataAs<T>()[0]);
    return llvm::Error::success();
  };
  if (llvm::Error err =
          dispatchTypes<float, double, Float16, BFloat16, int64_t, int32_t,
                        int16_t, int8_t, uint8_t, uint16_t, uint32_t, uint64_t,
                        Bool8>(call, view.getDType(), read, what))
    return err;
  return value;
}

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

llvm::SmallVector<int64_t, 6>
cpu::contiguousStrides(llvm::ArrayRef<int64_t> shape) {
  llvm::SmallVector<int64_t, 6> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

llvm::Expected<unsigned> cpu::normalizeAxis(const KernelCall &call,
                                            int64_t axis, unsigned rank,
                                            llvm::StringRef what) {
  int64_t r = rank;
  if (axis < -r || axis >= r)
    return call.error(what + " " + llvm::Twine(axis) +
                      " is out of range for rank " + llvm::Twine(rank));
  return static_cast<unsigned>(axis < 0 ? axis + r : axis);
}

// The shape evaluator's rule (ops::broadcastStaticShapes).
bool cpu::broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                          llvm::SmallVectorImpl<int64_t> &result) {
  llvm::ArrayRef<int64_t> shapes[] = {a, b};
  std::optional<ops::StaticShape> shape = ops::broadcastStaticShapes(shapes);
  if (!shape)
    return false;
  result.assign(shape->begin(), shape->end());
  return true;
}

std::string cpu::shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleave(shape, os, ",");
  os << "]";
  return os.str();
}

llvm::Error cpu::checkOutputShape(const KernelCall &call, unsigned index,
                                  llvm::ArrayRef<int64_t> expected) {
  const TensorView *output = call.out(index);
  if (!output)
    return call.error("output " + llvm::Twine(index) + " is missing");
  if (output->getShape() != expected)
    return call.error("output " + llvm::Twine(index) + " has shape " +
                      shapeString(output->getShape()) +
                      " but the kernel computes " + shapeString(expected));
  return llvm::Error::success();
}

llvm::Error cpu::checkDType(const KernelCall &call, const TensorView &view,
                            DType expected, llvm::StringRef what) {
  if (view.getDType() != expected)
    return call.error(what + " has element type " + dtypeName(view.getDType()) +
                      ", expected " + dtypeName(expected));
  return llvm::Error::success();
}

llvm::Error cpu::checkSameShape(const KernelCall &call, const TensorView &a,
                                const TensorView &b, llvm::StringRef what) {
  if (a.getShape() != b.getShape())
    return call.error(what + ": shapes " + shapeString(a.getShape()) + " and " +
                      shapeString(b.getShape()) + " differ");
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Broadcast copy
//===----------------------------------------------------------------------===//

void cpu::broadcastCopy(const TensorView &src, const TensorView &dst,
                        unsigned numThreads) {
  if (dst.getNumElements() == 0)
    return;
  if (src.getShape() == dst.getShape()) {
    copyElements(src, dst);
    return;
  }
  size_t elementSize = dst.getElementSize();
  auto plan = makeBroadcastPlan<1>(dst.getShape(), {src.getShape()});
  const char *in = static_cast<const char *>(src.getData());
  char *out = static_cast<char *>(dst.getData());
  int64_t inner = plan.innerSize;
  forEachBroadcastRow(
      plan, numThreads,
      [&](int64_t outOffset, const std::array<int64_t, 1> &offsets) {
        const char *from = in + offsets[0] * elementSize;
        char *to = out + outOffset * elementSize;
        if (plan.innerStride[0] == 1) {
          std::memcpy(to, from, inner * elementSize);
          return;
        }
        // A broadcast row: repeat one element, doubling the filled prefix.
        std::memcpy(to, from, elementSize);
        int64_t filled = 1;
        while (filled < inner) {
          int64_t chunk = std::min(filled, inner - filled);
          std::memcpy(to + filled * elementSize, to, chunk * elementSize);
          filled += chunk;
        }
      });
}

//===----------------------------------------------------------------------===//
// Transpose
//===----------------------------------------------------------------------===//

namespace {
/// A transpose with unit dimensions dropped and runs of dimensions that stay
/// adjacent merged.
struct TransposePlan {
  /// Output extents.
  llvm::SmallVector<int64_t, 6> outShape;
  /// Source stride (elements) of each output dimension.
  llvm::SmallVector<int64_t, 6> srcStrides;
};

TransposePlan planTranspose(llvm::ArrayRef<int64_t> srcShape,
                            llvm::ArrayRef<unsigned> perm) {
  llvm::SmallVector<int64_t, 6> srcStrides = contiguousStrides(srcShape);
  TransposePlan plan;
  int64_t previousSrcDim = -2;
  for (unsigned i = 0; i < perm.size(); ++i) {
    unsigned s = perm[i];
    if (srcShape[s] == 1)
      continue;
    // Output dims i-1, i map to source dims s-1, s (ignoring unit dims in
    // between): they walk memory as one dimension.
    bool adjacent = previousSrcDim >= 0 &&
                    srcStrides[previousSrcDim] == srcStrides[s] * srcShape[s];
    if (adjacent) {
      plan.outShape.back() *= srcShape[s];
      plan.srcStrides.back() = srcStrides[s];
    } else {
      plan.outShape.push_back(srcShape[s]);
      plan.srcStrides.push_back(srcStrides[s]);
    }
    previousSrcDim = s;
  }
  return plan;
}

template <typename U>
void transpose2D(const U *src, U *dst, int64_t rows, int64_t cols) {
  // dst is [cols, rows]; tiles keep both sides in cache.
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
    int64_t i1 = std::min(rows, i0 + kTile);
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      int64_t j1 = std::min(cols, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j)
          dst[j * rows + i] = src[i * cols + j];
    }
  }
}

template <typename U>
void transposeTyped(const TransposePlan &plan, const U *src, U *dst,
                    unsigned numThreads) {
  unsigned rank = plan.outShape.size();
  int64_t total = product(plan.outShape);
  if (rank <= 1) {
    std::memcpy(dst, src, total * sizeof(U));
    return;
  }
  // Batched 2-D transpose: outer dims in place, last two swapped.
  const auto &shape = plan.outShape;
  const auto &strides = plan.srcStrides;
  int64_t rows = shape[rank - 1], cols = shape[rank - 2];
  bool batched2D = strides[rank - 1] == cols && strides[rank - 2] == 1;
  for (unsigned d = 0; batched2D && d + 2 < rank; ++d)
    batched2D =
        strides[d] == product(llvm::ArrayRef<int64_t>(shape).drop_front(d + 1));
  if (batched2D) {
    int64_t batch = total / (rows * cols);
    parallelFor(numThreads, batch, std::max<int64_t>(1, grainFor(rows * cols)),
                [&](int64_t b, int64_t e) {
                  for (int64_t i = b; i < e; ++i)
                    transpose2D(src + i * rows * cols, dst + i * rows * cols,
                                rows, cols);
                });
    return;
  }
  // General case: rows of the innermost output dimension.
  int64_t inner = shape[rank - 1];
  int64_t innerStride = strides[rank - 1];
  int64_t numRows = total / inner;
  parallelFor(numThreads, numRows, grainFor(inner),
              [&](int64_t begin, int64_t end) {
                llvm::SmallVector<int64_t, 6> index(rank - 1, 0);
                int64_t offset = 0, row = begin;
                for (int d = rank - 2; d >= 0; --d) {
                  index[d] = row % shape[d];
                  row /= shape[d];
                  offset += index[d] * strides[d];
                }
                for (int64_t r = begin; r < end; ++r) {
                  U *to = dst + r * inner;
                  const U *from = src + offset;
                  if (innerStride == 1) {
                    std::memcpy(to, from, inner * sizeof(U));
                  } else {
                    for (int64_t j = 0; j < inner; ++j)
                      to[j] = from[j * innerStride];
                  }
                  for (int d = rank - 2; d >= 0; --d) {
                    offset += strides[d];
                    if (++index[d] < shape[d])
                      break;
                    offset -= strides[d] * shape[d];
                    index[d] = 0;
                  }
                }
              });
}
} // namespace

void cpu::transposeInto(const TensorView &src, const TensorView &dst,
                        llvm::ArrayRef<unsigned> perm, unsigned numThreads) {
  if (dst.getNumElements() == 0)
    return;
  TransposePlan plan = planTranspose(src.getShape(), perm);
  switch (src.getElementSize()) {
  case 1:
    return transposeTyped(plan, src.getDataAs<uint8_t>(),
                          dst.getDataAs<uint8_t>(), numThreads);
  case 2:
    return transposeTyped(plan, src.getDataAs<uint16_t>(),
                          dst.getDataAs<uint16_t>(), numThreads);
  case 4:
    return transposeTyped(plan, src.getDataAs<uint32_t>(),
                          dst.getDataAs<uint32_t>(), numThreads);
  case 8:
    return transposeTyped(plan, src.getDataAs<uint64_t>(),
                          dst.getDataAs<uint64_t>(), numThreads);
  default:
    assert(false && "transpose of an unsupported element size");
  }
}
