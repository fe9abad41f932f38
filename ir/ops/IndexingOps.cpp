//===- IndexingOps.cpp - ai.onnx gather, scatter and pad operator schemas -===//
//
// The ops that read or write a tensor at computed positions: Gather,
// GatherElements, GatherND, ScatterElements and ScatterND (with the
// reduction values each opset defines), and Pad (constant, reflect and edge
// modes; wrap from opset 19). Index operands are checked for an index dtype;
// pads and axes are read through the shape-value helpers, so constant
// operands give static result shapes.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/OpDefs.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace gmopt;
using namespace gmopt::ops;

namespace {

/// \p infer after checking that string attribute \p name is one of
/// \p choices, the values this version of the op defines: ONNX adds values
/// in later opsets (Pad's "wrap" at 19, the scatters' "max" and "min" at 18)
/// that a model at an older opset must not use. \p later names them.
InferenceFn withStringChoices(llvm::StringRef name,
                              std::vector<llvm::StringRef> choices,
                              llvm::StringRef later, InferenceFn infer) {
  return [name = name.str(), choices = std::move(choices), later = later.str(),
          infer = std::move(infer)](InferenceContext &ctx) -> llvm::Error {
    std::string value = ctx.getStringAttr(name);
    if (!llvm::is_contained(choices, value)) {
      std::string known;
      for (llvm::StringRef choice : choices)
        known += (known.empty() ? "'" : ", '") + choice.str() + "'";
      return ctx.error(llvm::formatv(
          "{0} '{1}' is not defined at this opset (it defines {2}{3}{4})", name,
          value, known, later.empty() ? "" : "; ", later));
    }
    return infer(ctx);
  };
}

//===----------------------------------------------------------------------===//
// Pad
//===----------------------------------------------------------------------===//

InferenceFn inferPad(bool axesInput) {
  return [axesInput](InferenceContext &ctx) -> llvm::Error {
    if (auto err = checkDTypeIn(ctx, 1, kInt64Only, "pads"))
      return err;
    const TensorType &data = ctx.getInputType(0);
    DType dtype = data.getDType();
    if (!data.hasRank()) {
      setOutput(ctx, 0, TensorType::unranked(dtype));
      return llvm::Error::success();
    }
    int64_t rank = data.getRank();
    llvm::SmallVector<unsigned, 4> axes;
    if (axesInput && ctx.hasInput(3)) {
      auto values = intValuesInput(ctx, 3);
      if (!values) {
        setOutput(ctx, 0, unknownDims(dtype, rank));
        return llvm::Error::success();
      }
      auto normalized = normalizeAxes(ctx, *values, rank);
      if (!normalized)
        return normalized.takeError();
      axes = *normalized;
    } else {
      for (int64_t i = 0; i != rank; ++i)
        axes.push_back(i);
    }
    auto pads = intValuesInput(ctx, 1);
    if (!pads) {
      setOutput(ctx, 0, unknownDims(dtype, rank));
      return llvm::Error::success();
    }
    if (pads->size() != 2 * axes.size())
      return ctx.error(llvm::formatv("pads has {0} values, expected {1}",
                                     pads->size(), 2 * axes.size()));
    DimVector out(data.getDims().begin(), data.getDims().end());
    for (unsigned i = 0, e = axes.size(); i != e; ++i) {
      int64_t before = (*pads)[i], after = (*pads)[i + e];
      const Dim &dim = out[axes[i]];
      if (dim.isStatic()) {
        std::optional<int64_t> extent = checkedAdd(dim.getExtent(), before);
        if (extent)
          extent = checkedAdd(*extent, after);
        if (!extent || *extent < 0)
          return ctx.error(
              llvm::formatv("pads make axis {0} negative", axes[i]));
        out[axes[i]] = Dim::fixed(*extent);
      } else if (before != 0 || after != 0) {
        out[axes[i]] = Dim::unknown();
      }
    }
    setOutput(ctx, 0, TensorType(dtype, out));
    return llvm::Error::success();
  };
}

void registerPad(OpRegistry &registry) {
  const char *padWrapLater = "'wrap' needs opset 19";
  SchemaBuilder(kOnnxDomain, "Pad", 11)
      .inputs(2, 3)
      .outputs(1)
      .attrString("mode", "constant")
      .amp(AmpClass::Follow)
      .infer(withStringChoices("mode", {"constant", "reflect", "edge"},
                               padWrapLater, inferPad(false)))
      .add(registry);
  SchemaBuilder pad18(kOnnxDomain, "Pad", 18);
  pad18.inputs(2, 4)
      .outputs(1)
      .attrString("mode", "constant")
      .amp(AmpClass::Follow)
      .infer(withStringChoices("mode", {"constant", "reflect", "edge"},
                               padWrapLater, inferPad(true)))
      .add(registry);
  pad18
      .infer(withStringChoices("mode", {"constant", "reflect", "edge", "wrap"},
                               "", inferPad(true)))
      .addAt(registry, 19);
}

//===----------------------------------------------------------------------===//
// Gathers and scatters
//===----------------------------------------------------------------------===//

llvm::Error inferGather(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1, indexDTypes(), "indices"))
    return err;
  const TensorType &data = ctx.getInputType(0);
  const TensorType &indices = ctx.getInputType(1);
  DType dtype = data.getDType();
  if (!data.hasRank() || !indices.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(dtype));
    return llvm::Error::success();
  }
  if (data.getRank() == 0)
    return ctx.error("data must have rank >= 1");
  auto axis = normalizeAxis(ctx, ctx.getIntAttr("axis", 0), data.getRank());
  if (!axis)
    return axis.takeError();
  llvm::ArrayRef<Dim> dims = data.getDims();
  DimVector out(dims.begin(), dims.begin() + *axis);
  out.append(indices.getDims().begin(), indices.getDims().end());
  out.append(dims.begin() + *axis + 1, dims.end());
  setOutput(ctx, 0, TensorType(dtype, out));
  return llvm::Error::success();
}

llvm::Error inferGatherElements(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1, indexDTypes(), "indices"))
    return err;
  const TensorType &data = ctx.getInputType(0);
  const TensorType &indices = ctx.getInputType(1);
  if (data.hasRank()) {
    if (indices.hasRank() && indices.getRank() != data.getRank())
      return ctx.error(llvm::formatv("indices have rank {0} but data has rank "
                                     "{1}",
                                     indices.getRank(), data.getRank()));
    auto axis = normalizeAxis(ctx, ctx.getIntAttr("axis", 0), data.getRank());
    if (!axis)
      return axis.takeError();
  }
  TensorType out = indices;
  out.setDType(data.getDType());
  setOutput(ctx, 0, std::move(out));
  return llvm::Error::success();
}

llvm::Error inferGatherND(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1, {DType::I64}, "indices"))
    return err;
  const TensorType &data = ctx.getInputType(0);
  const TensorType &indices = ctx.getInputType(1);
  DType dtype = data.getDType();
  int64_t batchDims = ctx.getIntAttr("batch_dims", 0);
  if (!data.hasRank() || !indices.hasRank() || indices.getRank() == 0 ||
      !indices.getDims().back().isStatic()) {
    setOutput(ctx, 0, TensorType::unranked(dtype));
    return llvm::Error::success();
  }
  int64_t last = indices.getDims().back().getExtent();
  int64_t rank = data.getRank();
  if (batchDims < 0 || batchDims > rank || last > rank - batchDims)
    return ctx.error(llvm::formatv("indices address {0} dimensions after {1} "
                                   "batch dimensions but data has rank {2}",
                                   last, batchDims, data.getRank()));
  DimVector out(indices.getDims().begin(), indices.getDims().end() - 1);
  out.append(data.getDims().begin() + batchDims + last, data.getDims().end());
  setOutput(ctx, 0, TensorType(dtype, out));
  return llvm::Error::success();
}

llvm::Error inferScatter(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1, indexDTypes(), "indices"))
    return err;
  auto dtype = checkSameDType(ctx, {0, 2});
  if (!dtype)
    return dtype.takeError();
  setOutput(ctx, 0, ctx.getInputType(0));
  return llvm::Error::success();
}

void registerGathersAndScatters(OpRegistry &registry) {
  SchemaBuilder(kOnnxDomain, "Gather", 11)
      .inputs(2)
      .outputs(1)
      .attrInt("axis", 0)
      .amp(AmpClass::Follow)
      .infer(inferGather)
      .add(registry);
  SchemaBuilder(kOnnxDomain, "GatherElements", 11)
      .inputs(2)
      .outputs(1)
      .attrInt("axis", 0)
      .amp(AmpClass::Follow)
      .infer(inferGatherElements)
      .add(registry);
  SchemaBuilder(kOnnxDomain, "GatherND", 11)
      .inputs(2)
      .outputs(1)
      .amp(AmpClass::Follow)
      .infer(inferGatherND)
      .add(registry);
  SchemaBuilder(kOnnxDomain, "GatherND", 12)
      .inputs(2)
      .outputs(1)
      .attrInt("batch_dims", 0)
      .amp(AmpClass::Follow)
      .infer(inferGatherND)
      .add(registry);

  // ScatterElements (with its axis) and ScatterND: the same versions, the
  // same reduction values.
  const char *scatterMinMaxLater = "'max' and 'min' need opset 18";
  for (llvm::StringRef name : {"ScatterElements", "ScatterND"}) {
    SchemaBuilder scatter(kOnnxDomain, name, 11);
    scatter.inputs(3).outputs(1);
    if (name == "ScatterElements")
      scatter.attrInt("axis", 0);
    scatter.inPlace(0).amp(AmpClass::Follow).infer(inferScatter);
    scatter.add(registry);
    scatter.attrString("reduction", "none")
        .infer(withStringChoices("reduction", {"none", "add", "mul"},
                                 scatterMinMaxLater, inferScatter))
        .addAt(registry, 16);
    scatter
        .infer(withStringChoices("reduction",
                                 {"none", "add", "mul", "max", "min"}, "",
                                 inferScatter))
        .addAt(registry, 18);
  }
}

} // namespace

void ops::registerIndexingOps(OpRegistry &registry) {
  registerPad(registry);
  registerGathersAndScatters(registry);
}
