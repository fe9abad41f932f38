//===- Tensor.h - Tensor views and owned tensor buffers ---------*- C++ -*-===//
//
// TensorView is what CPU kernels read and write: a data pointer plus an
// element type and a static, row-major (contiguous) shape. It does not own
// its bytes; the executor places views into its arena or into blocks of a
// CountingAllocator. TensorBuffer is a view that owns its block (counted
// under a MemoryCategory), used for kernel scratch tensors and by tests.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_TENSOR_H
#define GMOPT_BACKEND_CPU_TENSOR_H

#include "backend/Memory.h"
#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace gmopt {
namespace cpu {

/// A non-owning view of a contiguous tensor with a static shape. A const
/// view only promises that the view (pointer, type, shape) does not change;
/// the bytes it points to are writable, which in-place kernels rely on.
class TensorView {
public:
  /// An empty view (no data, undefined type, rank 0).
  TensorView() = default;
  /// Views \p data as a tensor of \p dtype and \p shape (extents >= 0).
  TensorView(void *data, DType dtype, llvm::ArrayRef<int64_t> shape);
  /// Views \p data as a tensor of \p type, which must have a static shape.
  static llvm::Expected<TensorView> get(void *data, const TensorType &type);

  /// The first byte.
  void *getData() const { return data; }
  /// The elements as \p T (the caller matched T to the dtype).
  template <typename T> T *getDataAs() const { return static_cast<T *>(data); }
  /// Points the view at other bytes of the same type and shape.
  void setData(void *newData) { data = newData; }

  DType getDType() const { return dtype; }
  llvm::ArrayRef<int64_t> getShape() const { return shape; }
  unsigned getRank() const { return shape.size(); }
  /// Extent of dimension \p i.
  int64_t getDim(unsigned i) const { return shape[i]; }
  int64_t getNumElements() const { return numElements; }
  /// Bytes of the element storage.
  uint64_t getSizeInBytes() const;
  /// The element size in bytes (0 for Undefined and String).
  unsigned getElementSize() const { return dtypeSize(dtype); }
  /// The TensorType this view has.
  TensorType getType() const { return TensorType::get(dtype, shape); }
  /// True if both views point at the same first byte.
  bool aliases(const TensorView &other) const {
    return data != nullptr && data == other.data;
  }
  /// Reinterprets the same bytes with another shape of equal element count.
  TensorView reshaped(llvm::ArrayRef<int64_t> newShape) const;

private:
  void *data = nullptr;
  DType dtype = DType::Undefined;
  llvm::SmallVector<int64_t, 6> shape;
  int64_t numElements = 1;
};

/// A tensor that owns its storage, allocated from a CountingAllocator.
class TensorBuffer {
public:
  TensorBuffer() = default;
  /// Allocates a tensor of \p dtype and \p shape under \p category. The
  /// bytes are not initialized.
  static llvm::Expected<TensorBuffer> create(CountingAllocator &allocator,
                                             DType dtype,
                                             llvm::ArrayRef<int64_t> shape,
                                             MemoryCategory category);
  /// A tensor over \p data, which the caller keeps alive and accounts for
  /// (a planned workspace slice); nothing is allocated or freed.
  static TensorBuffer borrow(void *data, DType dtype,
                             llvm::ArrayRef<int64_t> shape);
  TensorBuffer(TensorBuffer &&) = default;
  TensorBuffer &operator=(TensorBuffer &&) = default;

  /// The view of the owned storage.
  TensorView &getView() { return view; }
  const TensorView &getView() const { return view; }
  /// Sets every byte to zero.
  void zero();

private:
  ScopedAllocation storage;
  TensorView view;
};

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_TENSOR_H
