//===- OnnxTensor.cpp - TensorProto <-> TensorData conversion -------------===//
//
// Implements the conversion of ONNX tensors and tensor types. Tensor bytes
// come from raw_data (copied, or moved out of the protobuf string when the
// caller owns the proto), from the typed repeated fields (float_data,
// int32_data, int64_data, double_data, uint64_data, widened or packed as
// ONNX's rules say), or from an external-data file that is memory-mapped
// once and viewed in place. Everything read from the file is validated:
// sizes against the shape, offsets against the file, paths - with every
// symbolic link resolved - against the model directory, and the file must
// be a regular one (ir/serialization/FileIO.h).
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/OnnxTensor.h"

#include "ir/SizeLimits.h"
#include "ir/Types.h"
#include "ir/serialization/FileIO.h"

#include "onnx/onnx_pb.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SwapByteOrder.h"

#include <cstring>
#include <limits>

using namespace gmopt;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

// ONNX stores tensors little-endian; the typed-field conversions below
// memcpy host values, which is only correct on little-endian hosts.
static_assert(llvm::sys::IsLittleEndianHost,
              "gmopt's ONNX tensor conversion assumes a little-endian host");

namespace {

Error tensorError(const onnx::TensorProto &tensor, const llvm::Twine &what) {
  StringRef name = tensor.name();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(), "tensor '%s': %s",
      name.empty() ? "<unnamed>" : name.str().c_str(), what.str().c_str());
}

/// The shape and storage size of a TensorProto, validated.
struct TensorLayout {
  TensorType type;
  uint64_t numElements = 0;
  uint64_t numBytes = 0;
};

Expected<TensorLayout> getLayout(const onnx::TensorProto &tensor) {
  if (tensor.has_segment())
    return tensorError(tensor, "segmented tensors are not supported");
  std::optional<DType> dtype = dtypeFromOnnx(tensor.data_type());
  if (!dtype || *dtype == DType::Undefined)
    return tensorError(
        tensor, llvm::formatv("unknown element type {0}", tensor.data_type()));
  if (*dtype == DType::String)
    return tensorError(tensor, "string tensors are not supported");

  TensorLayout layout;
  llvm::SmallVector<int64_t, 4> shape;
  for (int64_t dim : tensor.dims()) {
    if (dim < 0)
      return tensorError(tensor, llvm::formatv("negative dimension {0}", dim));
    shape.push_back(dim);
  }
  layout.type = TensorType::get(*dtype, shape);
  if (!fitsSizeLimit(layout.type))
    return tensorError(tensor, "type " + layout.type.str() +
                                   " is larger than gmopt's limit of " +
                                   kMaxTensorBytesText + " per tensor");
  uint64_t numElements = layout.type.getNumElements();
  layout.numElements = numElements;
  layout.numBytes = dtypeStorageBytes(*dtype, numElements);
  return layout;
}

/// Narrows or copies each value of \p field into a little-endian array of
/// \p Dst.
template <typename Dst, typename Field, typename Convert>
std::vector<uint8_t> packField(const Field &field, Convert convert) {
  std::vector<uint8_t> bytes(static_cast<size_t>(field.size()) * sizeof(Dst));
  uint8_t *out = bytes.data();
  for (auto value : field) {
    Dst converted = convert(value);
    std::memcpy(out, &converted, sizeof(Dst));
    out += sizeof(Dst);
  }
  return bytes;
}

template <typename Dst, typename Field>
std::vector<uint8_t> packField(const Field &field) {
  return packField<Dst>(field, [](auto v) { return static_cast<Dst>(v); });
}

/// Reads the typed repeated field that ONNX uses for \p layout's dtype.
Expected<TensorData> importTypedFields(const onnx::TensorProto &tensor,
                                       const TensorLayout &layout) {
  DType dtype = layout.type.getDType();
  uint64_t n = layout.numElements;
  uint64_t expected = n;
  int actual = 0;
  StringRef fieldName;
  std::vector<uint8_t> bytes;
  switch (dtype) {
  case DType::F32:
  case DType::C64:
    fieldName = "float_data";
    expected = dtype == DType::C64 ? 2 * n : n;
    actual = tensor.float_data_size();
    if (uint64_t(actual) == expected)
      bytes = packField<float>(tensor.float_data());
    break;
  case DType::F64:
  case DType::C128:
    fieldName = "double_data";
    expected = dtype == DType::C128 ? 2 * n : n;
    actual = tensor.double_data_size();
    if (uint64_t(actual) == expected)
      bytes = packField<double>(tensor.double_data());
    break;
  case DType::I64:
    fieldName = "int64_data";
    actual = tensor.int64_data_size();
    if (uint64_t(actual) == expected)
      bytes = packField<int64_t>(tensor.int64_data());
    break;
  case DType::U32:
  case DType::U64:
    fieldName = "uint64_data";
    actual = tensor.uint64_data_size();
    if (uint64_t(actual) != expected)
      break;
    if (dtype == DType::U32)
      bytes = packField<uint32_t>(tensor.uint64_data());
    else
      bytes = packField<uint64_t>(tensor.uint64_data());
    break;
  case DType::I32:
    fieldName = "int32_data";
    actual = tensor.int32_data_size();
    if (uint64_t(actual) == expected)
      bytes = packField<int32_t>(tensor.int32_data());
    break;
  case DType::I16:
  case DType::U16:
  case DType::F16:
  case DType::BF16:
    // 16-bit values (and the bit patterns of 16-bit floats) live in the low
    // half of each int32.
    fieldName = "int32_data";
    actual = tensor.int32_data_size();
    if (uint64_t(actual) == expected)
      bytes = packField<uint16_t>(tensor.int32_data(), [](int32_t v) {
        return static_cast<uint16_t>(static_cast<uint32_t>(v));
      });
    break;
  case DType::Bool:
    fieldName = "int32_data";
    actual = tensor.int32_data_size();
    if (uint64_t(actual) == expected)
      bytes = packField<uint8_t>(tensor.int32_data(),
                                 [](int32_t v) { return uint8_t(v != 0); });
    break;
  case DType::I8:
  case DType::U8:
  case DType::F8E4M3FN:
  case DType::F8E4M3FNUZ:
  case DType::F8E5M2:
  case DType::F8E5M2FNUZ:
  case DType::I4:
  case DType::U4:
    // 4-bit types are packed two per byte before being widened to int32, so
    // there is one int32 per storage byte.
    fieldName = "int32_data";
    expected = layout.numBytes;
    actual = tensor.int32_data_size();
    if (uint64_t(actual) == expected)
      bytes = packField<uint8_t>(tensor.int32_data(), [](int32_t v) {
        return static_cast<uint8_t>(static_cast<uint32_t>(v));
      });
    break;
  case DType::String:
  case DType::Undefined:
    llvm_unreachable("rejected by getLayout");
  }
  if (uint64_t(actual) != expected) {
    if (actual == 0)
      return tensorError(tensor, llvm::formatv("has no data ({0} elements "
                                               "expected)",
                                               n));
    return tensorError(tensor, llvm::formatv("{0} has {1} values, expected {2}",
                                             fieldName, actual, expected));
  }
  assert(bytes.size() == layout.numBytes && "typed field size mismatch");
  return TensorData(layout.type, std::move(bytes));
}

Expected<TensorData> importExternal(const onnx::TensorProto &tensor,
                                    const TensorLayout &layout,
                                    ExternalDataResolver *resolver) {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const onnx::StringStringEntryProto &entry : tensor.external_data()) {
    StringRef key = entry.key(), value = entry.value();
    if (key == "location") {
      location = value.str();
    } else if (key == "offset" || key == "length") {
      uint64_t parsed;
      if (value.getAsInteger(10, parsed))
        return tensorError(tensor, llvm::formatv("external data {0} '{1}' is "
                                                 "not a number",
                                                 key, value));
      if (key == "offset")
        offset = parsed;
      else
        length = parsed;
    }
    // "checksum" and unknown keys are informational.
  }
  if (location.empty())
    return tensorError(tensor, "external data has no location");
  if (!resolver)
    return tensorError(tensor, "external data is not available here");
  if (length && *length != layout.numBytes)
    return tensorError(tensor,
                       llvm::formatv("external data length {0} does not match "
                                     "the {1} bytes of its shape",
                                     *length, layout.numBytes));
  if (offset > std::numeric_limits<uint64_t>::max() - layout.numBytes)
    return tensorError(tensor, llvm::formatv("external data offset {0} is "
                                             "out of range",
                                             offset));
  Expected<ExternalDataResolver::FileInfo> info = resolver->inspect(location);
  if (!info)
    return tensorError(tensor, llvm::toString(info.takeError()));
  if (info->present &&
      (offset > info->size || info->size - offset < layout.numBytes))
    return tensorError(
        tensor, llvm::formatv("external data (offset {0}, {1} bytes) lies "
                              "outside '{2}' ({3} bytes)",
                              offset, layout.numBytes, location, info->size));
  if (resolver->isLazy())
    return TensorData(layout.type, ExternalDataRef{location, offset},
                      resolver->shared_from_this());

  Expected<std::shared_ptr<llvm::MemoryBuffer>> file =
      resolver->getFile(location);
  if (!file)
    return tensorError(tensor, llvm::toString(file.takeError()));
  uint64_t fileSize = (*file)->getBufferSize();
  if (offset > fileSize || fileSize - offset < layout.numBytes)
    return tensorError(
        tensor, llvm::formatv("external data (offset {0}, {1} bytes) lies "
                              "outside '{2}' ({3} bytes)",
                              offset, layout.numBytes, location, fileSize));
  const auto *start =
      reinterpret_cast<const uint8_t *>((*file)->getBufferStart()) + offset;
  std::shared_ptr<const void> owner = *file;
  return TensorData(layout.type, std::move(owner),
                    llvm::ArrayRef<uint8_t>(start, layout.numBytes));
}

Error checkRawSize(const onnx::TensorProto &tensor,
                   const TensorLayout &layout) {
  if (tensor.raw_data().size() != layout.numBytes)
    return tensorError(tensor, llvm::formatv("raw_data has {0} bytes, "
                                             "expected {1}",
                                             tensor.raw_data().size(),
                                             layout.numBytes));
  return Error::success();
}

bool isExternal(const onnx::TensorProto &tensor) {
  return tensor.data_location() == onnx::TensorProto::EXTERNAL;
}

} // namespace

std::shared_ptr<ExternalDataResolver>
ExternalDataResolver::createLazy(std::string baseDir) {
  auto resolver = std::make_shared<ExternalDataResolver>(std::move(baseDir));
  resolver->lazy = true;
  return resolver;
}

Expected<ExternalDataResolver::FileInfo>
ExternalDataResolver::inspect(StringRef location) {
  auto it = inspected.find(location);
  if (it != inspected.end())
    return it->second;
  namespace path = llvm::sys::path;
  namespace fs = llvm::sys::fs;
  if (path::is_absolute(location) || path::is_absolute_gnu(location))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "external data location '%s' must be a "
                                   "relative path",
                                   location.str().c_str());
  for (StringRef component :
       llvm::make_range(path::begin(location), path::end(location)))
    if (component == "..")
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "external data location '%s' leaves the "
                                     "model directory",
                                     location.str().c_str());
  llvm::SmallString<256> fullPath(baseDir);
  path::append(fullPath, location);
  FileInfo info;
  // A location that names nothing (not even a dangling link) is a missing
  // file, which only matters once its bytes are wanted.
  fs::file_status linkStatus;
  if (fs::status(fullPath, linkStatus, /*follow=*/false) ||
      !fs::exists(linkStatus)) {
    inspected[location] = info;
    return info;
  }
  // The string is inside the directory; its symbolic links must be too, or
  // a link could expose any file the user can read (and its bytes, shown
  // as tensor values in messages).
  llvm::SmallString<256> realBase, realFile;
  if (std::error_code ec = fs::real_path(
          baseDir.empty() ? StringRef(".") : StringRef(baseDir), realBase))
    return llvm::createStringError(ec,
                                   "cannot resolve the model directory '%s': "
                                   "%s",
                                   baseDir.c_str(), ec.message().c_str());
  if (std::error_code ec = fs::real_path(fullPath, realFile))
    return llvm::createStringError(ec,
                                   "cannot open external data file '%s': %s",
                                   fullPath.c_str(), ec.message().c_str());
  StringRef inside = realFile;
  if (!inside.consume_front(realBase) ||
      !(realBase.ends_with("/") || inside.starts_with("/")))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "external data location '%s' resolves to "
                                   "a file outside the model directory",
                                   location.str().c_str());
  // Only a regular file, and never more than its size (so a link to
  // /dev/zero cannot grow memory without bound).
  if (Error err = checkRegularFile(realFile))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(), "external data location '%s': %s",
        location.str().c_str(), llvm::toString(std::move(err)).c_str());
  fs::file_status status;
  if (std::error_code ec = fs::status(realFile, status))
    return llvm::createStringError(ec,
                                   "cannot open external data file '%s': %s",
                                   fullPath.c_str(), ec.message().c_str());
  info.present = true;
  info.size = status.getSize();
  info.realPath = realFile.str().str();
  inspected[location] = info;
  return info;
}

Expected<std::shared_ptr<llvm::MemoryBuffer>>
ExternalDataResolver::getFile(StringRef location) {
  auto it = files.find(location);
  if (it != files.end())
    return it->second;
  // Inspected again: the file may have appeared (or changed) since import.
  inspected.erase(location);
  Expected<FileInfo> info = inspect(location);
  if (!info)
    return info.takeError();
  if (!info->present) {
    llvm::SmallString<256> fullPath(baseDir);
    llvm::sys::path::append(fullPath, location);
    return llvm::createStringError(
        std::make_error_code(std::errc::no_such_file_or_directory),
        "cannot open external data file '%s': %s", fullPath.c_str(),
        std::make_error_code(std::errc::no_such_file_or_directory)
            .message()
            .c_str());
  }
  Expected<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      readFileBounded(info->realPath);
  if (!buffer)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(), "external data location '%s': %s",
        location.str().c_str(), llvm::toString(buffer.takeError()).c_str());
  std::shared_ptr<llvm::MemoryBuffer> shared = std::move(*buffer);
  files[location] = shared;
  return shared;
}

Expected<TensorData> gmopt::importTensor(const onnx::TensorProto &tensor,
                                         ExternalDataResolver *resolver) {
  Expected<TensorLayout> layout = getLayout(tensor);
  if (!layout)
    return layout.takeError();
  if (isExternal(tensor))
    return importExternal(tensor, *layout, resolver);
  if (tensor.has_raw_data()) {
    if (Error err = checkRawSize(tensor, *layout))
      return err;
    const std::string &raw = tensor.raw_data();
    return TensorData(layout->type,
                      std::vector<uint8_t>(raw.begin(), raw.end()));
  }
  return importTypedFields(tensor, *layout);
}

Expected<TensorData>
gmopt::importTensorStealing(onnx::TensorProto &tensor,
                            ExternalDataResolver *resolver) {
  Expected<TensorLayout> layout = getLayout(tensor);
  if (!layout)
    return layout.takeError();
  if (isExternal(tensor) || !tensor.has_raw_data())
    return importTensor(tensor, resolver);
  if (Error err = checkRawSize(tensor, *layout))
    return err;
  // Take the protobuf-owned string instead of copying it: the TensorData
  // keeps the string alive.
  std::shared_ptr<const std::string> raw(tensor.release_raw_data());
  llvm::ArrayRef<uint8_t> bytes(reinterpret_cast<const uint8_t *>(raw->data()),
                                raw->size());
  return TensorData(layout->type, std::shared_ptr<const void>(raw), bytes);
}

static void exportTensorHeader(const TensorData &data,
                               onnx::TensorProto &tensor) {
  const TensorType &type = data.getType();
  assert(type.hasStaticShape() && "constant tensors have static shapes");
  tensor.clear_dims();
  for (const Dim &dim : type.getDims())
    tensor.add_dims(dim.getExtent());
  tensor.set_data_type(static_cast<int32_t>(type.getDType()));
}

void gmopt::exportTensor(const TensorData &data, onnx::TensorProto &tensor) {
  exportTensorHeader(data, tensor);
  llvm::ArrayRef<uint8_t> bytes = data.getBytes();
  tensor.set_raw_data(reinterpret_cast<const char *>(bytes.data()),
                      bytes.size());
}

void gmopt::exportTensorAsExternal(const TensorData &data, StringRef location,
                                   uint64_t offset, onnx::TensorProto &tensor) {
  exportTensorHeader(data, tensor);
  tensor.set_data_location(onnx::TensorProto::EXTERNAL);
  auto addEntry = [&](StringRef key, const std::string &value) {
    onnx::StringStringEntryProto *entry = tensor.add_external_data();
    entry->set_key(key.str());
    entry->set_value(value);
  };
  addEntry("location", location.str());
  addEntry("offset", std::to_string(offset));
  addEntry("length", std::to_string(data.getSizeInBytes()));
}

Expected<TensorType> gmopt::importType(const onnx::TypeProto &type,
                                       StringRef what) {
  if (type.value_case() == onnx::TypeProto::VALUE_NOT_SET)
    return TensorType();
  if (!type.has_tensor_type())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "%s has a non-tensor type (sequence, map, "
                                   "optional or sparse), which is not "
                                   "supported",
                                   what.str().c_str());
  const onnx::TypeProto::Tensor &tensorType = type.tensor_type();
  DType dtype = DType::Undefined;
  if (tensorType.elem_type() != 0) {
    std::optional<DType> parsed = dtypeFromOnnx(tensorType.elem_type());
    if (!parsed)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(), "%s has unknown element type %d",
          what.str().c_str(), tensorType.elem_type());
    dtype = *parsed;
  }
  if (!tensorType.has_shape())
    return TensorType::unranked(dtype);
  llvm::SmallVector<Dim, 4> dims;
  for (const onnx::TensorShapeProto::Dimension &dim :
       tensorType.shape().dim()) {
    if (dim.has_dim_value()) {
      if (dim.dim_value() < 0)
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(), "%s has negative dimension %lld",
            what.str().c_str(), static_cast<long long>(dim.dim_value()));
      dims.push_back(Dim::fixed(dim.dim_value()));
    } else if (dim.has_dim_param() && !dim.dim_param().empty()) {
      dims.push_back(Dim::symbolic(dim.dim_param()));
    } else {
      dims.push_back(Dim::unknown());
    }
  }
  TensorType result(dtype, dims);
  if (Error err = checkTensorSize(result, what))
    return err;
  return result;
}

void gmopt::exportType(const TensorType &type, onnx::TypeProto &proto) {
  onnx::TypeProto::Tensor *tensorType = proto.mutable_tensor_type();
  tensorType->set_elem_type(static_cast<int32_t>(type.getDType()));
  if (!type.hasRank())
    return;
  onnx::TensorShapeProto *shape = tensorType->mutable_shape();
  for (const Dim &dim : type.getDims()) {
    onnx::TensorShapeProto::Dimension *out = shape->add_dim();
    if (dim.isStatic())
      out->set_dim_value(dim.getExtent());
    else if (dim.isSymbolic())
      out->set_dim_param(dim.getSymbol().str());
  }
}
