//===- ScatterReduction.cpp - How a scatter combines updates --------------===//
//
// getScatterReduction of ScatterReduction.h.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/ScatterReduction.h"
#include "ir/IR.h"

#include "llvm/ADT/StringSwitch.h"

#include <optional>

using namespace gmopt;
using namespace gmopt::ops;

llvm::Expected<ScatterReduction> ops::getScatterReduction(const Node &node) {
  llvm::StringRef name = node.getStringAttr("reduction", "none");
  std::optional<ScatterReduction> reduction =
      llvm::StringSwitch<std::optional<ScatterReduction>>(name)
          .Case("none", ScatterReduction::None)
          .Case("add", ScatterReduction::Add)
          .Case("mul", ScatterReduction::Mul)
          .Case("max", ScatterReduction::Max)
          .Case("min", ScatterReduction::Min)
          .Default(std::nullopt);
  if (!reduction)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "unknown reduction '" + name + "'");
  return *reduction;
}
