//===- OpTestHelpers.h - Fixtures for op registry unit tests ----*- C++ -*-===//
//
// Shared by the op registry tests: a fixture owning a Module that imports
// ai.onnx opset 17 and com.microsoft 1, helpers to add typed inputs and
// constant initializers, to build a node with results of unknown type, and
// to run inference and report either the printed result types or the
// error message. Types are written in the IR's text form (`f32[batch,?,4]`,
// `i64[]`, `f32[*]`) so that expectations read like the printed IR.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_OPTESTHELPERS_H
#define GMOPT_TESTS_UNIT_OPTESTHELPERS_H

#include "ir/IR.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Error.h"

#include "gtest/gtest.h"

#include <string>
#include <vector>

namespace gmopt {
namespace test {

/// Parses a type in the text form: `f32[batch,3,?]`, `i64[]`, `f32[*]`.
inline TensorType ty(llvm::StringRef text) {
  auto [name, rest] = text.split('[');
  std::optional<DType> dtype = parseDType(name);
  EXPECT_TRUE(dtype.has_value()) << "bad dtype in " << text.str();
  rest = rest.drop_back();
  if (rest == "*")
    return TensorType::unranked(dtype.value_or(DType::Undefined));
  llvm::SmallVector<Dim, 4> dims;
  if (!rest.empty()) {
    llvm::SmallVector<llvm::StringRef, 4> pieces;
    rest.split(pieces, ',');
    for (llvm::StringRef piece : pieces) {
      int64_t extent;
      if (piece == "?")
        dims.push_back(Dim::unknown());
      else if (!piece.getAsInteger(10, extent))
        dims.push_back(Dim::fixed(extent));
      else
        dims.push_back(Dim::symbolic(piece));
    }
  }
  return TensorType(dtype.value_or(DType::Undefined), dims);
}

inline NamedAttribute intAttr(llvm::StringRef name, int64_t value) {
  return {name.str(), Attribute::getInt(value)};
}
inline NamedAttribute floatAttr(llvm::StringRef name, float value) {
  return {name.str(), Attribute::getFloat(value)};
}
inline NamedAttribute intsAttr(llvm::StringRef name,
                               std::vector<int64_t> values) {
  return {name.str(), Attribute::getInts(std::move(values))};
}
inline NamedAttribute stringAttr(llvm::StringRef name, llvm::StringRef value) {
  return {name.str(), Attribute::getString(value.str())};
}

inline OpName onnxOp(llvm::StringRef type) { return {"", type.str()}; }
inline OpName msOp(llvm::StringRef type) {
  return {"com.microsoft", type.str()};
}

/// A module importing ai.onnx 17 and com.microsoft 1, with helpers to build
/// nodes and run inference on them.
class OpTest : public ::testing::Test {
protected:
  OpTest() {
    module.opsetImports[""] = 17;
    module.opsetImports["com.microsoft"] = 1;
  }

  Graph &graph() { return module.getGraph(); }

  /// A graph input of type \p type (text form).
  Value *input(llvm::StringRef type) {
    return graph().addInput(ty(type), "in" + std::to_string(counter++));
  }

  /// An int64 initializer of shape [n] (or [] when \p scalar).
  Value *i64s(std::vector<int64_t> values, bool scalar = false) {
    std::vector<int64_t> shape;
    if (!scalar)
      shape.push_back(values.size());
    return graph().addInitializer(
        TensorData::fromValues<int64_t>(DType::I64, shape, values),
        "c" + std::to_string(counter++));
  }

  /// A float initializer of shape \p shape.
  Value *f32s(std::vector<float> values, std::vector<int64_t> shape) {
    return graph().addInitializer(
        TensorData::fromValues<float>(DType::F32, shape, values),
        "c" + std::to_string(counter++));
  }

  /// Creates a node with \p numResults results of unknown type. A null
  /// operand is an absent optional input.
  Node *make(OpName op, llvm::ArrayRef<Value *> operands,
             unsigned numResults = 1,
             llvm::ArrayRef<NamedAttribute> attrs = {}) {
    Builder builder(graph());
    std::vector<TensorType> types(numResults);
    return builder.create(std::move(op), operands, types, attrs,
                          "n" + std::to_string(counter++));
  }

  /// Builds a node and sets its result types from inference; returns its
  /// results (failing the test if inference fails).
  llvm::SmallVector<Value *, 2>
  build(OpName op, llvm::ArrayRef<Value *> operands, unsigned numResults = 1,
        llvm::ArrayRef<NamedAttribute> attrs = {}) {
    Node *node = make(std::move(op), operands, numResults, attrs);
    if (llvm::Error err = inferAndSetTypes(*node))
      ADD_FAILURE() << llvm::toString(std::move(err));
    return node->getResults();
  }

  /// Like build, for a single result.
  Value *build1(OpName op, llvm::ArrayRef<Value *> operands,
                llvm::ArrayRef<NamedAttribute> attrs = {}) {
    return build(std::move(op), operands, 1, attrs)[0];
  }

  /// The inferred result types of \p node joined with spaces, or
  /// "error: <message>".
  static std::string inferred(const Node &node) {
    auto types = inferNodeTypes(node);
    if (!types)
      return "error: " + llvm::toString(types.takeError());
    std::string text;
    for (const TensorType &type : *types) {
      if (!text.empty())
        text += ' ';
      text += type.str();
    }
    return text;
  }

  /// Builds a node and returns inferred(node).
  std::string infer(OpName op, llvm::ArrayRef<Value *> operands,
                    unsigned numResults = 1,
                    llvm::ArrayRef<NamedAttribute> attrs = {}) {
    return inferred(*make(std::move(op), operands, numResults, attrs));
  }

  /// Convenience for ai.onnx ops with one result.
  std::string inferOnnx(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
                        llvm::ArrayRef<NamedAttribute> attrs = {}) {
    return infer(onnxOp(op), operands, 1, attrs);
  }

  /// The error text of inferring \p node, or "" on success.
  static std::string errorOf(const Node &node) {
    auto types = inferNodeTypes(node);
    if (types)
      return "";
    return llvm::toString(types.takeError());
  }

  Module module;
  unsigned counter = 0;
};

/// True if \p text contains \p part (for readable EXPECT_PRED2 failures).
inline bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace test
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_OPTESTHELPERS_H
