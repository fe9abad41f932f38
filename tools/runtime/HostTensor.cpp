//===- HostTensor.cpp - Tensors in and out of a training session ----------===//
//
// The host tensor of the public API: owned or borrowed bytes with a dtype
// and a static shape, and its conversions to and from the IR's TensorData
// (both share bytes rather than copy them where the layout allows).
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/HostTensorData.h"
#include "tools/runtime/RuntimeSupport.h"

#include "ir/Attribute.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>
#include <new>

using namespace gmopt;

namespace {

llvm::Error makeTensorError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The byte size of \p shape's elements of \p dtype, or an error for a
/// negative dimension, a dtype without a fixed size or an overflow.
llvm::Expected<size_t> storageBytes(DType dtype,
                                    llvm::ArrayRef<int64_t> shape) {
  if (dtype == DType::Undefined || dtypeSize(dtype) == 0)
    return makeTensorError("a host tensor cannot hold " +
                           dtypeName(dtype).str() + " elements");
  uint64_t elements = 1;
  for (int64_t dim : shape) {
    if (dim < 0)
      return makeTensorError("a host tensor's dimensions cannot be negative (" +
                             llvm::Twine(dim) + ")");
    if (dim && elements > std::numeric_limits<uint64_t>::max() /
                              static_cast<uint64_t>(dim))
      return makeTensorError("a host tensor of this shape is too large");
    elements *= static_cast<uint64_t>(dim);
  }
  uint64_t bytes = dtypeStorageBytes(dtype, elements);
  if (bytes > std::numeric_limits<size_t>::max() / 2)
    return makeTensorError("a host tensor of this shape is too large");
  return static_cast<size_t>(bytes);
}

} // namespace

HostTensor HostTensor::makeOwned(DType dtype, llvm::ArrayRef<int64_t> shape) {
  llvm::Expected<HostTensor> tensor = allocate(dtype, shape);
  if (!tensor) {
    llvm::consumeError(tensor.takeError());
    assert(false && "fromValues: the shape or dtype cannot be allocated");
    return HostTensor();
  }
  return std::move(*tensor);
}

llvm::Expected<HostTensor> HostTensor::allocate(DType dtype,
                                                llvm::ArrayRef<int64_t> shape) {
  llvm::Expected<size_t> size = storageBytes(dtype, shape);
  if (!size)
    return size.takeError();
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.shape.assign(shape.begin(), shape.end());
  tensor.size = *size;
  // One zeroed block without throwing: a size the system cannot provide is
  // an error, not an exception through the caller.
  auto *block = new (std::nothrow) uint8_t[std::max<size_t>(*size, 1)]();
  if (!block)
    return makeTensorError("cannot allocate a host tensor of " +
                           llvm::Twine(*size) + " bytes");
  std::shared_ptr<uint8_t> storage(block, std::default_delete<uint8_t[]>());
  tensor.bytes = storage.get();
  tensor.owner = std::shared_ptr<void>(storage, storage.get());
  return tensor;
}

llvm::Expected<HostTensor> HostTensor::copyOf(DType dtype,
                                              llvm::ArrayRef<int64_t> shape,
                                              llvm::ArrayRef<uint8_t> bytes) {
  llvm::Expected<HostTensor> tensor = allocate(dtype, shape);
  if (!tensor)
    return tensor.takeError();
  if (bytes.size() != tensor->size)
    return makeTensorError(llvm::Twine(bytes.size()) + " bytes cannot be a " +
                           tensor->describe() + " tensor (" +
                           llvm::Twine(tensor->size) + " bytes)");
  if (!bytes.empty())
    std::memcpy(tensor->bytes, bytes.data(), bytes.size());
  return tensor;
}

llvm::Expected<HostTensor> HostTensor::borrow(DType dtype,
                                              llvm::ArrayRef<int64_t> shape,
                                              void *data, size_t size,
                                              std::shared_ptr<void> keepAlive) {
  llvm::Expected<size_t> expected = storageBytes(dtype, shape);
  if (!expected)
    return expected.takeError();
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.shape.assign(shape.begin(), shape.end());
  if (size != *expected)
    return makeTensorError(llvm::Twine(size) + " bytes cannot be a " +
                           tensor.describe() + " tensor (" +
                           llvm::Twine(*expected) + " bytes)");
  if (size && !data)
    return makeTensorError("a borrowed host tensor needs its bytes");
  tensor.size = size;
  tensor.bytes = static_cast<uint8_t *>(data);
  tensor.owner = std::move(keepAlive);
  return tensor;
}

int64_t HostTensor::getNumElements() const {
  int64_t elements = 1;
  for (int64_t dim : shape)
    elements *= dim;
  return elements;
}

double HostTensor::getElementAsDouble(int64_t index) const {
  assert(index >= 0 && index < getNumElements() && "element out of range");
  return toTensorData(*this).getFloatElement(static_cast<uint64_t>(index));
}

HostTensor HostTensor::clone() const {
  if (isNull())
    return HostTensor();
  llvm::Expected<HostTensor> copy = copyOf(dtype, shape, getBytes());
  assert(copy && "a tensor that exists can be copied");
  return std::move(*copy);
}

std::string HostTensor::describe() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << dtypeName(dtype) << "[";
  llvm::interleave(shape, os, ", ");
  os << "]";
  return text;
}

TensorData gmopt::toTensorData(const HostTensor &tensor) {
  // A view sharing the tensor's owner: no copy, and the bytes live as long
  // as the TensorData does.
  return TensorData(TensorType::get(tensor.getDType(), tensor.getShape()),
                    std::shared_ptr<const void>(tensor.getOwner()),
                    tensor.getBytes());
}

llvm::Expected<HostTensor> gmopt::toHostTensor(const TensorData &data) {
  if (llvm::Error err = data.load())
    return err;
  const TensorType &type = data.getType();
  if (!type.hasStaticShape())
    return makeTensorError("a tensor of type " + type.str() +
                           " has no static shape");
  return HostTensor::copyOf(type.getDType(), type.getStaticShape(),
                            data.getBytes());
}

llvm::Expected<std::vector<HostTensor>>
gmopt::readHostOutputs(const Module &module, const Executable &exe,
                       llvm::ArrayRef<std::string> names,
                       llvm::StringRef model) {
  std::vector<HostTensor> outputs;
  for (const std::string &name : names) {
    const Value *value = module.getGraph().lookupValue(name);
    if (!value)
      return runtime::makeError(model + " has no output '" + name + "'");
    auto data = exe.readValue(value);
    if (!data)
      return data.takeError();
    auto host = toHostTensor(*data);
    if (!host)
      return host.takeError();
    outputs.push_back(std::move(*host));
  }
  return outputs;
}
