//===- Executor.cpp - The backend interface -------------------------------===//
//
// Backend-neutral parts of Executable: where a parameter's gradient is found
// after a step (ONNX Runtime's accumulation buffer, the sum an
// InPlaceAccumulator (V1) returns, or a gradient exposed as a graph output).
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"

using namespace gmopt;

Executable::~Executable() = default;

llvm::StringRef gmopt::allocationModeName(AllocationMode mode) {
  return mode == AllocationMode::Eager ? "eager" : "planned";
}

llvm::Expected<TensorData>
Executable::readGradient(const ParamInfo &param) const {
  // InPlaceAccumulator (V1) returns the sum rather than writing its buffer.
  if (const Node *node = param.accumulateNode)
    if (node->isa(kMsDomain, "InPlaceAccumulator"))
      if (const Value *sum = node->getResult(0))
        if (sum->isGraphOutput())
          return readValue(sum);
  if (param.accumulator)
    return readValue(param.accumulator);
  if (param.grad &&
      (param.grad->isGraphOutput() || !param.grad->isNodeResult()))
    return readValue(param.grad);
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "the gradient of '" + param.param->getName() +
          "' is neither accumulated into a buffer nor a graph output");
}
