//===- Attribute.cpp - Constant tensors and typed node attributes ---------===//
//
// Element access on shared constant tensors, the lazy loading of external
// ones, and equality of attributes. An external tensor's copies share one
// ExternalState, so the file is mapped once however often the TensorData
// was copied, and a failure is remembered rather than retried; a reader
// that cannot do without the values gets an error naming itself, the
// tensor and the absent file (requireTensorValue). Attribute
// equality is bitwise for floats so that NaN payloads and -0.0 survive
// round trips and comparisons.
//
//===----------------------------------------------------------------------===//

#include "ir/Attribute.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cassert>
#include <cstring>
#include <mutex>

using namespace gmopt;

ExternalDataSource::~ExternalDataSource() = default;

struct TensorData::ExternalState {
  ExternalDataRef ref;
  uint64_t numBytes = 0;
  std::shared_ptr<ExternalDataSource> source;

  std::mutex mutex;
  /// Set once a load was tried; then exactly one of the two below holds.
  bool attempted = false;
  std::shared_ptr<llvm::MemoryBuffer> file;
  std::string failure;
  /// Whether the failure is that the file is not there.
  bool missingFile = false;
  llvm::ArrayRef<uint8_t> bytes;

  /// Maps the file on the first call; the answer of every call.
  llvm::Error load() {
    std::lock_guard<std::mutex> lock(mutex);
    if (!attempted) {
      attempted = true;
      llvm::Expected<std::shared_ptr<llvm::MemoryBuffer>> mapped =
          source ? source->getFile(ref.location)
                 : llvm::createStringError(
                       llvm::inconvertibleErrorCode(),
                       "external data location '%s' has no directory to be "
                       "read from",
                       ref.location.c_str());
      if (!mapped) {
        llvm::handleAllErrors(
            mapped.takeError(), [&](const llvm::ErrorInfoBase &info) {
              failure = info.message();
              missingFile =
                  info.convertToErrorCode() ==
                  std::make_error_code(std::errc::no_such_file_or_directory);
            });
      } else {
        uint64_t fileSize = (*mapped)->getBufferSize();
        if (ref.offset > fileSize || fileSize - ref.offset < numBytes) {
          failure = llvm::formatv("external data (offset {0}, {1} bytes) lies "
                                  "outside '{2}' ({3} bytes)",
                                  ref.offset, numBytes, ref.location, fileSize)
                        .str();
        } else {
          file = std::move(*mapped);
          bytes = llvm::ArrayRef<uint8_t>(
              reinterpret_cast<const uint8_t *>(file->getBufferStart()) +
                  ref.offset,
              numBytes);
        }
      }
    }
    if (!failure.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(), failure);
    return llvm::Error::success();
  }
};

TensorData::TensorData(TensorType type, std::vector<uint8_t> ownedBytes)
    : type(std::move(type)) {
  auto storage = std::make_shared<std::vector<uint8_t>>(std::move(ownedBytes));
  bytes = llvm::ArrayRef<uint8_t>(storage->data(), storage->size());
  owner = std::move(storage);
}

TensorData::TensorData(TensorType type, std::shared_ptr<const void> owner,
                       llvm::ArrayRef<uint8_t> bytes)
    : type(std::move(type)), owner(std::move(owner)), bytes(bytes) {}

TensorData::TensorData(TensorType type, ExternalDataRef ref,
                       std::shared_ptr<ExternalDataSource> source)
    : type(std::move(type)), external(std::make_shared<ExternalState>()) {
  assert(this->type.hasStaticShape() && "external tensors have static shapes");
  external->ref = std::move(ref);
  external->numBytes =
      dtypeStorageBytes(this->type.getDType(), this->type.getNumElements());
  external->source = std::move(source);
}

uint64_t TensorData::getSizeInBytes() const {
  return external ? external->numBytes : bytes.size();
}

const ExternalDataRef *TensorData::getExternalRef() const {
  return external ? &external->ref : nullptr;
}

const std::shared_ptr<ExternalDataSource> &
TensorData::getExternalSource() const {
  static const std::shared_ptr<ExternalDataSource> none;
  return external ? external->source : none;
}

bool TensorData::isLoaded() const {
  if (!external)
    return true;
  std::lock_guard<std::mutex> lock(external->mutex);
  return external->attempted && external->failure.empty();
}

bool TensorData::failedToLoad() const {
  if (!external)
    return false;
  std::lock_guard<std::mutex> lock(external->mutex);
  return external->attempted && !external->failure.empty();
}

bool TensorData::failedForMissingFile() const {
  if (!external)
    return false;
  std::lock_guard<std::mutex> lock(external->mutex);
  return external->attempted && external->missingFile;
}

llvm::Error TensorData::load() const {
  return external ? external->load() : llvm::Error::success();
}

bool TensorData::hasFoldableBytes() const {
  if (!external)
    return true;
  if (external->numBytes > kMaxFoldedExternalBytes)
    return false;
  if (llvm::Error err = external->load()) {
    llvm::consumeError(std::move(err));
    return false;
  }
  return true;
}

llvm::Error gmopt::requireTensorValue(const TensorData &data,
                                      llvm::StringRef reader,
                                      llvm::StringRef tensor,
                                      llvm::StringRef node) {
  llvm::Error err = data.load();
  if (!err)
    return err;
  std::string what = "tensor '" + tensor.str() + "'";
  if (!node.empty())
    what += " (node " + node.str() + ")";
  if (!data.failedForMissingFile())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        reader + " needs the value of " + what +
            ", whose external data cannot be read: " +
            llvm::toString(std::move(err)));
  llvm::consumeError(std::move(err));
  const std::shared_ptr<ExternalDataSource> &source = data.getExternalSource();
  llvm::SmallString<256> path(source ? source->getBaseDir()
                                     : llvm::StringRef());
  llvm::sys::path::append(path, data.getExternalRef()->location);
  return llvm::createStringError(
      std::make_error_code(std::errc::no_such_file_or_directory),
      reader + " needs the value of " + what + ", whose external data file '" +
          path + "' is absent");
}

llvm::ArrayRef<uint8_t> TensorData::getExternalBytes() const {
  if (llvm::Error err = external->load()) {
    llvm::consumeError(std::move(err));
    return {};
  }
  return external->bytes;
}

template <typename T>
static T loadAt(llvm::ArrayRef<uint8_t> bytes, uint64_t i) {
  assert((i + 1) * sizeof(T) <= bytes.size() &&
         "element out of range (or external data not loaded)");
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

int64_t TensorData::getIntElement(uint64_t i) const {
  llvm::ArrayRef<uint8_t> bytes = getBytes();
  switch (type.getDType()) {
  case DType::Bool:
  case DType::U8:
    return loadAt<uint8_t>(bytes, i);
  case DType::I8:
    return loadAt<int8_t>(bytes, i);
  case DType::U16:
    return loadAt<uint16_t>(bytes, i);
  case DType::I16:
    return loadAt<int16_t>(bytes, i);
  case DType::I32:
    return loadAt<int32_t>(bytes, i);
  case DType::U32:
    return loadAt<uint32_t>(bytes, i);
  case DType::I64:
    return loadAt<int64_t>(bytes, i);
  case DType::U64:
    return static_cast<int64_t>(loadAt<uint64_t>(bytes, i));
  default:
    llvm_unreachable("integer element of a non-integer tensor");
  }
}

/// Widens an IEEE half to float.
static float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise.
    int shift = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    bits = sign | ((113 - shift) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

double TensorData::getFloatElement(uint64_t i) const {
  llvm::ArrayRef<uint8_t> bytes = getBytes();
  switch (type.getDType()) {
  case DType::F32:
    return loadAt<float>(bytes, i);
  case DType::F64:
    return loadAt<double>(bytes, i);
  case DType::F16:
    return halfToFloat(loadAt<uint16_t>(bytes, i));
  case DType::BF16: {
    uint32_t bits = static_cast<uint32_t>(loadAt<uint16_t>(bytes, i)) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  default:
    if (isInteger(type.getDType()) || type.getDType() == DType::Bool)
      return static_cast<double>(getIntElement(i));
    llvm_unreachable("float element of a non-numeric tensor");
  }
}

std::vector<int64_t> TensorData::getIntValues() const {
  uint64_t n = getNumElements();
  std::vector<int64_t> values;
  values.reserve(n);
  for (uint64_t i = 0; i != n; ++i)
    values.push_back(getIntElement(i));
  return values;
}

bool TensorData::operator==(const TensorData &other) const {
  if (type != other.type)
    return false;
  // One reference into one source is one tensor, whether or not its file
  // can be read; an unreadable tensor equals nothing else.
  if (external && other.external && external->ref == other.external->ref &&
      external->source == other.external->source)
    return true;
  if (failedToLoad() || other.failedToLoad())
    return false;
  llvm::ArrayRef<uint8_t> mine = getBytes(), theirs = other.getBytes();
  if ((external && !isLoaded()) || (other.external && !other.isLoaded()))
    return false;
  return mine.size() == theirs.size() &&
         (mine.empty() ||
          std::memcmp(mine.data(), theirs.data(), mine.size()) == 0);
}

static bool sameBits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

bool Attribute::operator==(const Attribute &other) const {
  if (getKind() != other.getKind())
    return false;
  switch (getKind()) {
  case Kind::Float:
    return sameBits(getFloat(), other.getFloat());
  case Kind::Floats: {
    const auto &a = getFloats(), &b = other.getFloats();
    if (a.size() != b.size())
      return false;
    for (size_t i = 0; i != a.size(); ++i)
      if (!sameBits(a[i], b[i]))
        return false;
    return true;
  }
  case Kind::Int:
    return getInt() == other.getInt();
  case Kind::String:
    return getString() == other.getString();
  case Kind::Tensor:
    return getTensor() == other.getTensor();
  case Kind::Ints:
    return getInts() == other.getInts();
  case Kind::Strings:
    return getStrings() == other.getStrings();
  }
  llvm_unreachable("unknown attribute kind");
}

llvm::StringRef gmopt::attributeKindName(Attribute::Kind kind) {
  switch (kind) {
  case Attribute::Kind::Float:
    return "float";
  case Attribute::Kind::Int:
    return "int";
  case Attribute::Kind::String:
    return "string";
  case Attribute::Kind::Tensor:
    return "tensor";
  case Attribute::Kind::Floats:
    return "floats";
  case Attribute::Kind::Ints:
    return "ints";
  case Attribute::Kind::Strings:
    return "strings";
  }
  llvm_unreachable("unknown attribute kind");
}
