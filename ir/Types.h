//===- Types.h - Element types, dimensions and tensor types -----*- C++ -*-===//
//
// The type system of gmopt's IR. Every Value carries a TensorType: an element
// type (numbered exactly as ONNX's TensorProto.DataType so import and export
// are a cast) and a shape whose dimensions are static, symbolic (a name bound
// at compile time with --dim NAME=N) or unknown. A TensorType may also be
// unranked when nothing is known about its rank.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_TYPES_H
#define GMOPT_IR_TYPES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// Element types. The numeric values are ONNX's TensorProto.DataType.
enum class DType : uint8_t {
  Undefined = 0,
  F32 = 1,
  U8 = 2,
  I8 = 3,
  U16 = 4,
  I16 = 5,
  I32 = 6,
  I64 = 7,
  String = 8,
  Bool = 9,
  F16 = 10,
  F64 = 11,
  U32 = 12,
  U64 = 13,
  C64 = 14,
  C128 = 15,
  BF16 = 16,
  F8E4M3FN = 17,
  F8E4M3FNUZ = 18,
  F8E5M2 = 19,
  F8E5M2FNUZ = 20,
  U4 = 21,
  I4 = 22,
};

/// Largest DType enumerator; used to validate numbers read from files.
constexpr unsigned kMaxDType = static_cast<unsigned>(DType::I4);

/// Storage size of one element in bytes (0 for Undefined and String; 4-bit
/// types report 1 and are packed two per byte by dtypeStorageBytes).
unsigned dtypeSize(DType type);
/// Bytes needed to store \p numElements elements of \p type.
uint64_t dtypeStorageBytes(DType type, uint64_t numElements);
/// Short textual name used by the text form: f32, f16, bf16, i64, bool, ...
llvm::StringRef dtypeName(DType type);
/// Inverse of dtypeName.
std::optional<DType> parseDType(llvm::StringRef name);
/// Converts an ONNX TensorProto.DataType number, rejecting unknown values.
std::optional<DType> dtypeFromOnnx(int64_t onnxType);
bool isFloatingPoint(DType type);
bool isInteger(DType type);

/// One dimension of a shape: a static extent, a named symbol, or unknown.
class Dim {
public:
  /// An unknown dimension.
  Dim() = default;
  /// A static dimension of extent \p extent (must be >= 0).
  static Dim fixed(int64_t extent) { return Dim(extent, {}); }
  /// A symbolic dimension named \p symbol.
  static Dim symbolic(llvm::StringRef symbol) { return Dim(-1, symbol.str()); }
  static Dim unknown() { return Dim(); }

  bool isStatic() const { return extent >= 0; }
  bool isSymbolic() const { return extent < 0 && !symbol.empty(); }
  bool isUnknown() const { return extent < 0 && symbol.empty(); }
  /// The static extent; only valid when isStatic().
  int64_t getExtent() const;
  /// The symbol name; only valid when isSymbolic().
  llvm::StringRef getSymbol() const { return symbol; }

  bool operator==(const Dim &other) const {
    return extent == other.extent && symbol == other.symbol;
  }
  bool operator!=(const Dim &other) const { return !(*this == other); }

private:
  Dim(int64_t extent, std::string symbol)
      : extent(extent), symbol(std::move(symbol)) {}
  int64_t extent = -1;
  std::string symbol;
};

/// The type of a Value: element type plus an optional (ranked) shape.
class TensorType {
public:
  /// An unranked tensor of undefined element type.
  TensorType() = default;
  /// An unranked tensor of \p dtype.
  static TensorType unranked(DType dtype) { return TensorType(dtype); }
  /// A ranked tensor of \p dtype with \p dims.
  TensorType(DType dtype, llvm::ArrayRef<Dim> dims);
  /// A ranked tensor of \p dtype with static extents \p shape.
  static TensorType get(DType dtype, llvm::ArrayRef<int64_t> shape);

  DType getDType() const { return dtype; }
  void setDType(DType newType) { dtype = newType; }
  bool hasRank() const { return ranked; }
  /// Rank; only valid when hasRank().
  unsigned getRank() const;
  llvm::ArrayRef<Dim> getDims() const { return dims; }
  const Dim &getDim(unsigned i) const { return dims[i]; }
  /// True if ranked and every dimension is static.
  bool hasStaticShape() const;
  /// Static extents; only valid when hasStaticShape().
  llvm::SmallVector<int64_t, 4> getStaticShape() const;
  /// Element count; only valid when hasStaticShape().
  uint64_t getNumElements() const;
  /// Storage bytes; only valid when hasStaticShape().
  uint64_t getSizeInBytes() const;

  bool operator==(const TensorType &other) const {
    return dtype == other.dtype && ranked == other.ranked && dims == other.dims;
  }
  bool operator!=(const TensorType &other) const { return !(*this == other); }

  /// Prints the text form, HLO-like: `f32[batch,784]`, `i64[?]`, scalar
  /// `f32[]`, unranked `f32[*]`. Non-identifier symbols are quoted.
  void print(llvm::raw_ostream &os) const;
  std::string str() const;

private:
  explicit TensorType(DType dtype) : dtype(dtype) {}
  DType dtype = DType::Undefined;
  bool ranked = false;
  llvm::SmallVector<Dim, 4> dims;
};

llvm::raw_ostream &operator<<(llvm::raw_ostream &os, const TensorType &type);

} // namespace gmopt

#endif // GMOPT_IR_TYPES_H
