//===- Attribute.h - Constant tensors and typed node attributes -*- C++ -*-===//
//
// TensorData is a constant tensor: a TensorType plus its raw little-endian
// bytes in ONNX layout. The bytes are shared, never copied needlessly: an
// initializer imported from a 100 MB model or an external-data file points
// into one reference-counted buffer. Attribute is the typed value of a node
// attribute (the ONNX AttributeProto kinds gmopt supports).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_ATTRIBUTE_H
#define GMOPT_IR_ATTRIBUTE_H

#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstring>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace gmopt {

/// An immutable constant tensor whose bytes are shared between copies.
class TensorData {
public:
  TensorData() = default;
  /// Takes ownership of \p bytes.
  TensorData(TensorType type, std::vector<uint8_t> bytes);
  /// Views \p bytes, which stay alive as long as \p owner does.
  TensorData(TensorType type, std::shared_ptr<const void> owner,
             llvm::ArrayRef<uint8_t> bytes);
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
  llvm::ArrayRef<uint8_t> getBytes() const { return bytes; }
  bool isNull() const { return type.getDType() == DType::Undefined; }
  uint64_t getNumElements() const { return type.getNumElements(); }
  /// Reads element \p i converted to int64 (integer and bool types only).
  int64_t getIntElement(uint64_t i) const;
  /// Reads element \p i converted to double (numeric types).
  double getFloatElement(uint64_t i) const;
  /// All elements as int64; only valid for integer and bool types.
  std::vector<int64_t> getIntValues() const;
  /// Bitwise equality of type and bytes.
  bool operator==(const TensorData &other) const;

private:
  TensorType type;
  std::shared_ptr<const void> owner;
  llvm::ArrayRef<uint8_t> bytes;
};

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
  const std::string &getString() const { return std::get<std::string>(storage); }
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
