//===- ShapeValue.h - Small integer tensors at compile time ----*- C++ -*-===//
//
// Shape inference often needs the *contents* of a tensor, not only its type:
// the target shape of a Reshape, the axes of a ReduceSum, the repeats of a
// Tile. Exported training graphs compute these with small subgraphs
// (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), so a constant lookup
// alone would lose every symbolic dimension. This file tracks the elements of
// such tensors symbolically (ONNX calls this data propagation): each element
// is a known integer, a named symbolic dimension, or unknown.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_SHAPEVALUE_H
#define GMOPT_IR_OPS_SHAPEVALUE_H

#include "ir/Attribute.h"
#include "ir/Types.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <vector>

namespace gmopt {

class Value;

namespace ops {

/// One element of a small integer tensor: a constant, a symbolic dimension
/// (a non-negative extent named by a symbol) or unknown.
class SymInt {
public:
  static SymInt constant(int64_t value) {
    return SymInt(Kind::Constant, value, {});
  }
  static SymInt symbol(llvm::StringRef name) {
    return SymInt(Kind::Symbol, 0, name.str());
  }
  static SymInt unknown() { return SymInt(Kind::Unknown, 0, {}); }
  /// The value of a dimension used as data (Shape's output).
  static SymInt fromDim(const Dim &dim);

  bool isConstant() const { return kind == Kind::Constant; }
  bool isSymbol() const { return kind == Kind::Symbol; }
  bool isUnknown() const { return kind == Kind::Unknown; }
  /// The constant; only valid when isConstant().
  int64_t getValue() const { return value; }
  /// The symbol; only valid when isSymbol().
  llvm::StringRef getSymbol() const { return name; }
  /// The dimension this element denotes when used as an extent: static for
  /// non-negative constants, symbolic for symbols, unknown otherwise.
  Dim toDim() const;

  /// True when both are provably the same integer.
  bool provablyEqual(const SymInt &other) const;
  bool operator==(const SymInt &other) const {
    return kind == other.kind && value == other.value && name == other.name;
  }

private:
  enum class Kind { Constant, Symbol, Unknown };
  SymInt(Kind kind, int64_t value, std::string name)
      : kind(kind), value(value), name(std::move(name)) {}
  Kind kind;
  int64_t value;
  std::string name;
};

using SymIntVector = llvm::SmallVector<SymInt, 4>;

/// Constant contents of \p value: an initializer, an input with a default,
/// or the result of a Constant node (value / value_float(s) / value_int(s)).
std::optional<TensorData> getConstantData(const Value &value);

/// The elements of \p value (a scalar or 1-D integer tensor of at most a few
/// thousand elements) traced through constants and shape computations, or
/// nullopt when not even the element count is known.
std::optional<SymIntVector> getShapeValue(const Value &value);

/// The elements of \p value when every one of them is a known constant.
std::optional<std::vector<int64_t>> getIntValues(const Value &value);

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_SHAPEVALUE_H
