//===- ReductionOps.cpp - ai.onnx reduction operator schemas --------------===//
//
// ReduceSum and its siblings, and ArgMax/ArgMin. The interesting part is
// versioning: ReduceSum takes its axes as an input since opset 13, the other
// reductions only since opset 18 (an attribute before), and both forms
// accept noop_with_empty_axes once the axes are an input. Reductions run in
// fp32 under mixed precision (AmpClass::Deny).
//
//===----------------------------------------------------------------------===//

#include "ir/ops/OpDefs.h"
#include "ir/ops/ReduceAxes.h"

#include "llvm/Support/FormatVariadic.h"

using namespace gmopt;
using namespace gmopt::ops;

InferenceFn ops::inferReduce(bool axesFromInput) {
  return [axesFromInput](InferenceContext &ctx) -> llvm::Error {
    const TensorType &data = ctx.getInputType(0);
    DType dtype = data.getDType();
    ReduceSpec spec = getReduceSpec(ctx.getNode());
    std::optional<std::vector<int64_t>> axes;
    if (axesFromInput) {
      static const DType int64Only[] = {DType::I64};
      if (auto err = checkDTypeIn(ctx, 1, int64Only, "axes"))
        return err;
      // Absent axes reduce everything (or nothing with noop_with_empty_axes).
      if (spec.axesFromOperand)
        axes = intValuesInput(ctx, 1);
      else
        axes = std::vector<int64_t>();
    } else {
      axes = spec.attrAxes;
    }
    if (!data.hasRank()) {
      setOutput(ctx, 0, TensorType::unranked(dtype));
      return llvm::Error::success();
    }
    int64_t rank = data.getRank();
    if (!axes) {
      // Which axes are reduced is unknown; with keepdims the rank survives,
      // otherwise a static axes length still gives it.
      std::optional<int64_t> length = staticLength(ctx, 1);
      if (spec.keepDims || (length && *length == 0 && spec.noopWithEmptyAxes))
        setOutput(ctx, 0, TensorType(dtype, DimVector(rank, Dim::unknown())));
      else if (length && *length > 0 && *length <= rank)
        setOutput(ctx, 0,
                  TensorType(dtype, DimVector(rank - *length, Dim::unknown())));
      else
        setOutput(ctx, 0, TensorType::unranked(dtype));
      return llvm::Error::success();
    }
    auto resolved = spec.resolve(rank, *axes);
    if (!resolved)
      return ctx.error(llvm::toString(resolved.takeError()));
    auto dims = resolved->resultDims<Dim>(data.getDims(), Dim::fixed(1));
    setOutput(ctx, 0, TensorType(dtype, DimVector(dims.begin(), dims.end())));
    return llvm::Error::success();
  };
}

namespace {

llvm::Error inferArgReduce(InferenceContext &ctx) {
  const TensorType &data = ctx.getInputType(0);
  if (!data.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(DType::I64));
    return llvm::Error::success();
  }
  auto axes = getArgReduceSpec(ctx.getNode()).resolve(data.getRank());
  if (!axes)
    return ctx.error(llvm::toString(axes.takeError()));
  auto dims = axes->resultDims<Dim>(data.getDims(), Dim::fixed(1));
  setOutput(ctx, 0,
            TensorType(DType::I64, DimVector(dims.begin(), dims.end())));
  return llvm::Error::success();
}

SchemaBuilder reduction(llvm::StringRef name, int64_t since,
                        bool axesFromInput) {
  SchemaBuilder builder(kOnnxDomain, name, since);
  builder.outputs(1)
      .attrInt("keepdims", 1)
      .amp(AmpClass::Deny)
      .infer(inferReduce(axesFromInput))
      .cost(costPerInputElement(1));
  if (axesFromInput)
    builder.inputs(1, 2).attrInt("noop_with_empty_axes", 0);
  else
    builder.inputs(1).optionalAttr("axes", Attribute::Kind::Ints);
  return builder;
}

} // namespace

void ops::registerReductionOps(OpRegistry &registry) {
  reduction("ReduceSum", 1, false).add(registry);
  reduction("ReduceSum", 13, true).add(registry);
  for (const char *name :
       {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
        "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"}) {
    reduction(name, 1, false).add(registry);
    reduction(name, 18, true).add(registry);
  }
  for (const char *name : {"ArgMax", "ArgMin"}) {
    SchemaBuilder argReduce(kOnnxDomain, name, 11);
    argReduce.inputs(1)
        .outputs(1)
        .attrInt("axis", 0)
        .attrInt("keepdims", 1)
        .amp(AmpClass::None)
        .infer(inferArgReduce)
        .cost(costPerInputElement(1));
    argReduce.add(registry);
    argReduce.attrInt("select_last_index", 0).addAt(registry, 12);
  }
}
