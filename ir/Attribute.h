//===- Attribute.h - Constant tensors and typed node attributes -*- C++ -*-===//
//
// TensorData is a constant tensor: a TensorType plus its raw little-endian
// bytes in ONNX layout. The bytes are shared, never copied needlessly: an
// initializer imported from a 100 MB model points into one
// reference-counted buffer. A tensor whose bytes live in an external-data
// file is lazy: its type and its reference (file, offset) are known at
// import, and the file is mapped only when someone asks for the bytes
// (load() or getBytes()), so a model compiles without reading - or even
// having - its weights. Attribute is the typed value of a node attribute
// (the ONNX AttributeProto kinds gmopt supports).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_ATTRIBUTE_H
#define GMOPT_IR_ATTRIBUTE_H

#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstring>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace llvm {
class MemoryBuffer;
} // namespace llvm

namespace gmopt {

/// Where the bytes of a tensor stored outside its model live: ONNX's
/// external-data reference. The length is the storage size of the tensor's
/// type.
struct ExternalDataRef {
  /// The file, relative to the source's base directory.
  std::string location;
  /// Byte offset of the tensor in the file.
  uint64_t offset = 0;

  bool operator==(const ExternalDataRef &other) const {
    return location == other.location && offset == other.offset;
  }
};

/// Opens the files that external tensors live in (implemented by
/// ir/serialization/OnnxTensor.h's ExternalDataResolver). One source is shared
/// by every tensor of a model that refers to it and maps each file at most
/// once.
class ExternalDataSource {
public:
  virtual ~ExternalDataSource();
  /// The directory locations are relative to ("" = the current one).
  virtual llvm::StringRef getBaseDir() const = 0;
  /// The whole mapped file at \p location, validated (inside the base
  /// directory, a regular file). Errors name the location.
  virtual llvm::Expected<std::shared_ptr<llvm::MemoryBuffer>>
  getFile(llvm::StringRef location) = 0;
};

/// The most bytes of an external tensor that compile-time readers of values
/// (constant and shape folding, type inference) load; larger external
/// tensors are never read before run time.
constexpr uint64_t kMaxFoldedExternalBytes = 64 * 1024;

/// An immutable constant tensor whose bytes are shared between copies.
///
/// An external tensor (isExternal) starts unloaded: getType() and
/// getSizeInBytes() are known, the bytes are not. load() maps them (once;
/// every copy of the TensorData shares the result, success or failure).
/// getBytes() loads implicitly and answers an empty array when that fails,
/// so code that must tell "no bytes" from "unavailable" - constant folding,
/// the backends - calls load() or checks isLoaded() first.
class TensorData {
public:
  TensorData() = default;
  /// Takes ownership of \p bytes.
  TensorData(TensorType type, std::vector<uint8_t> bytes);
  /// Views \p bytes, which stay alive as long as \p owner does.
  TensorData(TensorType type, std::shared_ptr<const void> owner,
             llvm::ArrayRef<uint8_t> bytes);
  /// A lazy tensor of static \p type whose bytes are at \p ref in a file of
  /// \p source, mapped on first access.
  TensorData(TensorType type, ExternalDataRef ref,
             std::shared_ptr<ExternalDataSource> source);
  /// A tensor of static \p shape filled from \p values (copied).
  template <typename T>
  static TensorData fromValues(DType dtype, llvm::ArrayRef<int64_t> shape,
                               llvm::ArrayRef<T> values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(T));
    if (!bytes.empty())
      std::memcpy(bytes.data(), values.data(), bytes.size());
    return TensorData(TensorType::get(dtype, shape), std::move(bytes));
  }

  const TensorType &getType() const { return type; }
  /// The bytes. An external tensor is loaded first; when that fails the
  /// answer is empty (load() says why).
  llvm::ArrayRef<uint8_t> getBytes() const {
    return external ? getExternalBytes() : bytes;
  }
  /// The size of the contents in bytes, known without loading anything.
  uint64_t getSizeInBytes() const;
  bool isNull() const { return type.getDType() == DType::Undefined; }

  /// Whether the bytes live in an external-data file (loaded or not).
  bool isExternal() const { return external != nullptr; }
  /// The external reference, or null for a tensor that is not external.
  const ExternalDataRef *getExternalRef() const;
  /// The source of an external tensor's file, or null.
  const std::shared_ptr<ExternalDataSource> &getExternalSource() const;
  /// Whether the bytes are in memory: always for a tensor that is not
  /// external, after a successful load() for one that is.
  bool isLoaded() const;
  /// Whether a load of this external tensor was tried and failed.
  bool failedToLoad() const;
  /// Whether a load was tried and failed because the file is not there.
  bool failedForMissingFile() const;
  /// Maps an external tensor's bytes on the first call (later calls and
  /// copies answer the same); the error names the file. Success at once for
  /// a tensor that is not external.
  llvm::Error load() const;
  /// Whether a compile-time pass may read the values: always for a tensor
  /// that is not external; for an external one of at most
  /// kMaxFoldedExternalBytes, when it loads (tried here). Readers that get
  /// false leave the tensor's users alone.
  bool hasFoldableBytes() const;
  uint64_t getNumElements() const { return type.getNumElements(); }
  /// Reads element \p i converted to int64 (integer and bool types only).
  int64_t getIntElement(uint64_t i) const;
  /// Reads element \p i converted to double (numeric types).
  double getFloatElement(uint64_t i) const;
  /// All elements as int64; only valid for integer and bool types.
  std::vector<int64_t> getIntValues() const;
  /// Bitwise equality of type and bytes.
  bool operator==(const TensorData &other) const;

  /// The state an external tensor's copies share; defined in Attribute.cpp.
  struct ExternalState;

private:
  llvm::ArrayRef<uint8_t> getExternalBytes() const;

  TensorType type;
  std::shared_ptr<const void> owner;
  llvm::ArrayRef<uint8_t> bytes;
  std::shared_ptr<ExternalState> external;
};

/// Loads \p data for \p reader (a pass, or a step such as "ONNX export"),
/// which cannot do without its values. An external tensor whose bytes
/// cannot be read is an error that names the reader and the tensor: `READER
/// needs the value of tensor 'T' (node N), whose external data file 'F' is
/// absent` (error code no_such_file_or_directory), or `..., whose external
/// data cannot be read: WHY` when the file is there but unusable. \p node
/// names the node that holds or defines the tensor; empty leaves it out.
/// Success at once for a tensor that is not external.
llvm::Error requireTensorValue(const TensorData &data, llvm::StringRef reader,
                               llvm::StringRef tensor,
                               llvm::StringRef node = "");

/// The value of a node attribute.
class Attribute {
public:
  enum class Kind { Float, Int, String, Tensor, Floats, Ints, Strings };

  Attribute() : storage(int64_t(0)) {}
  static Attribute getFloat(float v) { return Attribute(v); }
  static Attribute getInt(int64_t v) { return Attribute(v); }
  static Attribute getString(std::string v) { return Attribute(std::move(v)); }
  static Attribute getTensor(TensorData v) { return Attribute(std::move(v)); }
  static Attribute getFloats(std::vector<float> v) {
    return Attribute(std::move(v));
  }
  static Attribute getInts(std::vector<int64_t> v) {
    return Attribute(std::move(v));
  }
  static Attribute getStrings(std::vector<std::string> v) {
    return Attribute(std::move(v));
  }

  Kind getKind() const { return static_cast<Kind>(storage.index()); }
  float getFloat() const { return std::get<float>(storage); }
  int64_t getInt() const { return std::get<int64_t>(storage); }
  const std::string &getString() const {
    return std::get<std::string>(storage);
  }
  const TensorData &getTensor() const { return std::get<TensorData>(storage); }
  const std::vector<float> &getFloats() const {
    return std::get<std::vector<float>>(storage);
  }
  const std::vector<int64_t> &getInts() const {
    return std::get<std::vector<int64_t>>(storage);
  }
  const std::vector<std::string> &getStrings() const {
    return std::get<std::vector<std::string>>(storage);
  }

  bool operator==(const Attribute &other) const;
  bool operator!=(const Attribute &other) const { return !(*this == other); }

private:
  template <typename T> explicit Attribute(T v) : storage(std::move(v)) {}
  // Alternative order must match Kind.
  std::variant<float, int64_t, std::string, TensorData, std::vector<float>,
               std::vector<int64_t>, std::vector<std::string>>
      storage;
};

/// Name of an attribute kind as used by the text form and error messages.
llvm::StringRef attributeKindName(Attribute::Kind kind);

/// A named attribute on a node.
struct NamedAttribute {
  std::string name;
  Attribute value;
};

} // namespace gmopt

#endif // GMOPT_IR_ATTRIBUTE_H
