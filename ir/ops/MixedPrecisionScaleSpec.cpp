//===- MixedPrecisionScaleSpec.cpp - Where MixedPrecisionScale writes -----===//
//
// getMixedPrecisionScaleSpec of MixedPrecisionScaleSpec.h: the attributes
// decoded, then laid out over the element counts.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/MixedPrecisionScaleSpec.h"
#include "ir/IR.h"

#include "llvm/ADT/Twine.h"

using namespace gmopt;
using namespace gmopt::ops;

MixedPrecisionScaleAttrs ops::getMixedPrecisionScaleAttrs(const Node &node) {
  MixedPrecisionScaleAttrs attrs;
  attrs.fused = node.getIntAttr("fuse_outputs", 0) != 0;
  if (node.hasAttr("to"))
    attrs.to = dtypeFromOnnx(node.getIntAttr("to", 0));
  return attrs;
}

llvm::Expected<MixedPrecisionScaleSpec>
ops::getMixedPrecisionScaleSpec(const Node &node,
                                llvm::ArrayRef<uint64_t> inputElements,
                                llvm::ArrayRef<uint64_t> resultElements) {
  return layoutMixedPrecisionScale(getMixedPrecisionScaleAttrs(node),
                                   inputElements, resultElements);
}

llvm::Expected<MixedPrecisionScaleSpec>
ops::layoutMixedPrecisionScale(const MixedPrecisionScaleAttrs &attrs,
                               llvm::ArrayRef<uint64_t> inputElements,
                               llvm::ArrayRef<uint64_t> resultElements) {
  auto error = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   message.str());
  };
  MixedPrecisionScaleSpec spec;
  spec.fused = attrs.fused;
  spec.to = attrs.to;
  if (spec.fused ? resultElements.empty()
                 : resultElements.size() != inputElements.size())
    return error("needs one output per scaled input");
  uint64_t offset = 0;
  for (size_t i = 0; i != inputElements.size(); ++i) {
    ScaledTensor tensor;
    tensor.result = spec.fused ? 0 : i;
    tensor.offset = spec.fused ? offset : 0;
    tensor.elements = inputElements[i];
    uint64_t available = resultElements[tensor.result];
    if (tensor.offset + tensor.elements > available ||
        (!spec.fused && tensor.elements != available))
      return error("output " + llvm::Twine(tensor.result) +
                   " has the wrong size");
    spec.tensors.push_back(tensor);
    offset += tensor.elements;
  }
  if (spec.fused && offset != resultElements[0])
    return error("fused output size differs from the inputs' total");
  return spec;
}
