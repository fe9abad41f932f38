//===- Tensor.cpp - Tensor views and owned tensor buffers -----------------===//
//
// Construction and validation of TensorView and TensorBuffer.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Tensor.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>

using namespace gmopt;
using namespace gmopt::cpu;

TensorView::TensorView(void *data, DType dtype, llvm::ArrayRef<int64_t> shape)
    : data(data), dtype(dtype), shape(shape.begin(), shape.end()) {
  // Saturates instead of overflowing: a workspace dry run (Einsum) may
  // describe intermediates larger than any tensor; their scratch request
  // then reads as too large and is refused.
  for (int64_t extent : shape) {
    assert(extent >= 0 && "negative extent in a tensor view");
    if (__builtin_mul_overflow(numElements, extent, &numElements))
      numElements = std::numeric_limits<int64_t>::max();
  }
}

llvm::Expected<TensorView> TensorView::get(void *data, const TensorType &type) {
  if (!type.hasStaticShape())
    return llvm::createStringError(std::errc::invalid_argument,
                                   "tensor type %s has no static shape",
                                   type.str().c_str());
  // Refuse element counts whose byte size would not fit in 63 bits.
  uint64_t limit =
      (uint64_t(1) << 62) / std::max(1u, dtypeSize(type.getDType()));
  uint64_t count = 1;
  for (int64_t extent : type.getStaticShape()) {
    if (extent != 0 && count > limit / static_cast<uint64_t>(extent))
      return llvm::createStringError(std::errc::value_too_large,
                                     "tensor type %s is too large",
                                     type.str().c_str());
    count *= static_cast<uint64_t>(extent);
  }
  return TensorView(data, type.getDType(), type.getStaticShape());
}

uint64_t TensorView::getSizeInBytes() const {
  return dtypeStorageBytes(dtype, static_cast<uint64_t>(numElements));
}

TensorView TensorView::reshaped(llvm::ArrayRef<int64_t> newShape) const {
  TensorView result(data, dtype, newShape);
  assert(result.numElements == numElements && "reshape changes the size");
  return result;
}

llvm::Expected<TensorBuffer> TensorBuffer::create(CountingAllocator &allocator,
                                                  DType dtype,
                                                  llvm::ArrayRef<int64_t> shape,
                                                  MemoryCategory category) {
  TensorView view(nullptr, dtype, shape);
  auto storage =
      ScopedAllocation::create(allocator, view.getSizeInBytes(), category);
  if (!storage)
    return storage.takeError();
  TensorBuffer buffer;
  view.setData(storage->get());
  buffer.storage = std::move(*storage);
  buffer.view = std::move(view);
  return buffer;
}

TensorBuffer TensorBuffer::borrow(void *data, DType dtype,
                                  llvm::ArrayRef<int64_t> shape) {
  TensorBuffer buffer;
  buffer.view = TensorView(data, dtype, shape);
  return buffer;
}

void TensorBuffer::zero() {
  if (view.getData())
    std::memset(view.getData(), 0, view.getSizeInBytes());
}
