//===- CudaScalingDispatch.cpp - The CUDA table's mixed-precision entries -===//
//
// com.microsoft IsFinite, IsAllFinite and MixedPrecisionScale on CUDA
// (ScalingKernels.cu): the prepare-time checks refuse what the CPU kernels
// in backend/cpu/TrainingKernels.cpp refuse (and a loss scale that is not
// one fp32 value, which the kernel reads on the device); IsAllFinite sets
// its flag and clears it from one launch per input, so nothing waits for
// the host.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/ScalingKernels.h"

#include "ir/Types.h"
#include "ir/ops/MixedPrecisionScaleSpec.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

std::optional<Storage> floatStorageOf(const Value *value) {
  std::optional<Storage> s = storageOf(value->getType().getDType());
  if (!s || !isFloatStorage(*s))
    return std::nullopt;
  return s;
}

/// An IsFinite, IsAllFinite or MixedPrecisionScale node decoded once.
struct ScalingPlan {
  /// One per tested or scaled input: its operand, storage and elements,
  /// and (MixedPrecisionScale) its result, that result's storage and the
  /// byte offset it starts at.
  struct Part {
    unsigned operand = 0;
    Storage storage = Storage::F32;
    int64_t elements = 0;
    unsigned result = 0;
    Storage resultStorage = Storage::F32;
    int64_t resultOffset = 0;
  };
  llvm::SmallVector<Part, 8> parts;
  FiniteTest test = FiniteTest::Finite;
};

/// IsFinite(X) -> bool per element.
llvm::Error checkIsFinite(const Node &node) {
  const Value *x = node.getOperand(0), *out = node.getResult(0);
  if (!x || !out || !floatStorageOf(x))
    return nodeError(node, "the input must be a float tensor (f32, f16 or "
                           "bf16 on CUDA)");
  if (out->getType().getDType() != DType::Bool ||
      out->getType().getDims() != x->getType().getDims())
    return nodeError(node, "the output must be bool of the input's shape");
  return llvm::Error::success();
}

llvm::Expected<ScalingPlan> decodeIsFinite(const Node &node) {
  if (llvm::Error err = checkIsFinite(node))
    return err;
  ScalingPlan p;
  ScalingPlan::Part part;
  part.storage = *floatStorageOf(node.getOperand(0));
  part.elements = node.getOperand(0)->getType().getNumElements();
  p.parts.push_back(part);
  return p;
}

llvm::Error launchIsFinitePlan(CudaCall &call, const ScalingPlan &p) {
  const ScalingPlan::Part &x = p.parts.front();
  return call.check(launchIsFinite(x.storage, call.inPtr(0),
                                   call.outAs<uint8_t>(0), x.elements,
                                   call.ctx.stream),
                    "IsFinite kernel");
}

/// IsAllFinite(X...) -> bool[1].
llvm::Expected<FiniteTest> finiteTestOf(const Node &node) {
  bool infOnly = node.getIntAttr("isinf_only", 0) != 0;
  bool nanOnly = node.getIntAttr("isnan_only", 0) != 0;
  if (infOnly && nanOnly)
    return nodeError(node, "isinf_only and isnan_only are exclusive");
  return infOnly   ? FiniteTest::NotInf
         : nanOnly ? FiniteTest::NotNaN
                   : FiniteTest::Finite;
}

llvm::Error checkIsAllFinite(const Node &node) {
  const Value *out = node.getResult(0);
  if (!out || out->getType().getDType() != DType::Bool ||
      out->getType().getNumElements() != 1)
    return nodeError(node, "the output must be one bool");
  if (auto test = finiteTestOf(node); !test)
    return test.takeError();
  for (const Value *x : node.getOperands())
    if (x && !floatStorageOf(x))
      return nodeError(node, "inputs must be float tensors (f32, f16 or bf16 "
                             "on CUDA)");
  return llvm::Error::success();
}

llvm::Expected<ScalingPlan> decodeIsAllFinite(const Node &node) {
  if (llvm::Error err = checkIsAllFinite(node))
    return err;
  ScalingPlan p;
  p.test = *finiteTestOf(node);
  for (unsigned i = 0; i < node.getNumOperands(); ++i) {
    const Value *x = node.getOperand(i);
    if (!x)
      continue;
    ScalingPlan::Part part;
    part.operand = i;
    part.storage = *floatStorageOf(x);
    part.elements = x->getType().getNumElements();
    p.parts.push_back(part);
  }
  return p;
}

llvm::Error launchIsAllFinite(CudaCall &call, const ScalingPlan &p) {
  uint8_t *flag = call.outAs<uint8_t>(0);
  if (llvm::Error err = call.check(cudaMemsetAsync(flag, 1, 1, call.ctx.stream),
                                   "cudaMemsetAsync"))
    return err;
  for (const ScalingPlan::Part &x : p.parts)
    if (llvm::Error err = call.check(
            launchClearUnlessFinite(x.storage, call.inPtr(x.operand),
                                    x.elements, p.test, flag, call.ctx.stream),
            "IsAllFinite kernel"))
      return err;
  return llvm::Error::success();
}

/// The output layout of MixedPrecisionScale \p node
/// (ops::getMixedPrecisionScaleSpec over its static element counts).
llvm::Expected<ops::MixedPrecisionScaleSpec>
mixedPrecisionScaleSpec(const Node &node) {
  llvm::SmallVector<uint64_t, 8> inputElements, resultElements;
  for (unsigned i = 1; i < node.getNumOperands(); ++i) {
    if (!node.getOperand(i))
      return nodeError(node, "inputs and outputs may not be absent");
    inputElements.push_back(node.getOperand(i)->getType().getNumElements());
  }
  for (const Value *y : node.getResults()) {
    if (!y)
      return nodeError(node, "inputs and outputs may not be absent");
    resultElements.push_back(y->getType().getNumElements());
  }
  auto spec =
      ops::getMixedPrecisionScaleSpec(node, inputElements, resultElements);
  if (!spec)
    return nodeError(node, llvm::toString(spec.takeError()));
  return spec;
}

/// MixedPrecisionScale(S, X...) -> Y... (or one fused Y).
llvm::Error checkMixedPrecisionScale(const Node &node) {
  const Value *scale = node.getOperand(0);
  if (!scale || scale->getType().getDType() != DType::F32 ||
      scale->getType().getNumElements() != 1)
    return nodeError(node, "the scale must be one float32 value on CUDA");
  auto spec = mixedPrecisionScaleSpec(node);
  if (!spec)
    return spec.takeError();
  for (unsigned i = 1; i < node.getNumOperands(); ++i) {
    const Value *y = node.getResult(spec->tensors[i - 1].result);
    if (!floatStorageOf(node.getOperand(i)) || !floatStorageOf(y))
      return nodeError(node, "inputs and outputs must be float tensors (f32, "
                             "f16 or bf16 on CUDA)");
    if (spec->to && y->getType().getDType() != *spec->to)
      return nodeError(node, "output type disagrees with attribute 'to'");
  }
  return llvm::Error::success();
}

llvm::Expected<ScalingPlan> decodeMixedPrecisionScale(const Node &node) {
  if (llvm::Error err = checkMixedPrecisionScale(node))
    return err;
  auto spec = mixedPrecisionScaleSpec(node);
  if (!spec)
    return spec.takeError();
  ScalingPlan p;
  for (unsigned i = 1; i < node.getNumOperands(); ++i) {
    const ops::ScaledTensor &scaled = spec->tensors[i - 1];
    const Value *x = node.getOperand(i);
    ScalingPlan::Part part;
    part.operand = i;
    part.storage = *floatStorageOf(x);
    part.elements = scaled.elements;
    part.result = scaled.result;
    const Value *y = node.getResult(part.result);
    part.resultStorage = *floatStorageOf(y);
    part.resultOffset = scaled.offset * elementBytes(y);
    p.parts.push_back(part);
  }
  return p;
}

llvm::Error launchMixedPrecisionScale(CudaCall &call, const ScalingPlan &p) {
  for (const ScalingPlan::Part &x : p.parts) {
    auto *out = static_cast<uint8_t *>(call.outPtr(x.result)) + x.resultOffset;
    if (llvm::Error err =
            call.check(launchScaleInto(x.storage, call.inPtr(x.operand),
                                       x.resultStorage, out, x.elements,
                                       call.inAs<float>(0), call.ctx.stream),
                       "MixedPrecisionScale kernel"))
      return err;
  }
  return llvm::Error::success();
}

} // namespace

void cuda::dispatch::addScalingKernels(llvm::StringMap<KernelEntry> &table) {
  addEntry(table, kMsDomain, "IsFinite",
           decodedEntry<ScalingPlan, decodeIsFinite, launchIsFinitePlan>());
  addEntry(table, kMsDomain, "IsAllFinite",
           decodedEntry<ScalingPlan, decodeIsAllFinite, launchIsAllFinite>());
  addEntry(table, kMsDomain, "MixedPrecisionScale",
           decodedEntry<ScalingPlan, decodeMixedPrecisionScale,
                        launchMixedPrecisionScale>());
}
