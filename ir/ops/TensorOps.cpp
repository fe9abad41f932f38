//===- TensorOps.cpp - ai.onnx data-movement and shape operator schemas ---===//
//
// Reshape and its relatives (Flatten, Squeeze, Unsqueeze, Identity: the
// alias/view ops), Transpose, Concat, Slice, Split, Expand, Tile and Trilu
// (gathers, scatters and Pad are in IndexingOps.cpp; Shape, Constant and
// their relatives in ConstantOps.cpp). Target shapes, axes and split sizes
// are read through getShapeValue, so shapes computed by
// Shape->Gather->Concat chains keep their symbolic dimensions.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/OpDefs.h"
#include "ir/ops/ShapeEval.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <set>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

//===----------------------------------------------------------------------===//
// Reshape family (views)
//===----------------------------------------------------------------------===//

/// The factors of a shape, for cancelling equal dimensions on both sides of
/// a reshape.
struct Factors {
  int64_t staticProduct = 1;
  std::multiset<std::string> symbols;
  unsigned numUnknown = 0;

  void add(const Dim &dim) {
    std::optional<int64_t> product =
        dim.isStatic() ? checkedMul(staticProduct, dim.getExtent())
                       : std::nullopt;
    if (product)
      staticProduct = *product;
    else if (dim.isStatic())
      ++numUnknown; // Overflow: too large to reason about.
    else if (dim.isSymbolic())
      symbols.insert(dim.getSymbol().str());
    else
      ++numUnknown;
  }
};

llvm::Error inferReshape(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1, kInt64Only, "shape"))
    return err;
  const TensorType &data = ctx.getInputType(0);
  DType dtype = data.getDType();
  bool allowZero = reshapeAllowsZero(ctx.getNode());
  std::optional<SymIntVector> target = shapeValueInput(ctx, 1);
  if (!target) {
    if (std::optional<int64_t> length = staticLength(ctx, 1))
      setOutput(ctx, 0, unknownDims(dtype, *length));
    else
      setOutput(ctx, 0, TensorType::unranked(dtype));
    return llvm::Error::success();
  }

  llvm::SmallVector<std::optional<int64_t>, 6> values;
  for (const SymInt &element : *target)
    values.push_back(element.isConstant()
                         ? std::optional<int64_t>(element.getValue())
                         : std::nullopt);
  auto kinds = classifyReshapeTarget(values, allowZero);
  if (!kinds)
    return ctx.error(llvm::toString(kinds.takeError()));
  if (data.hasStaticShape() && llvm::all_of(values, [](const auto &value) {
        return value.has_value();
      })) {
    llvm::SmallVector<int64_t, 6> targetValues;
    for (const std::optional<int64_t> &value : values)
      targetValues.push_back(*value);
    auto shape = reshapeTarget(data.getStaticShape(), targetValues, allowZero);
    if (!shape)
      return ctx.error(llvm::toString(shape.takeError()));
    DimVector out;
    for (int64_t extent : *shape)
      out.push_back(Dim::fixed(extent));
    setOutput(ctx, 0, TensorType(dtype, out));
    return llvm::Error::success();
  }

  // Symbolic dimensions: copy what 0 copies, then cancel factors below.
  DimVector out;
  int inferIndex = -1;
  llvm::SmallVector<bool, 4> copiedFromInput(
      data.hasRank() ? data.getRank() : 0, false);
  llvm::SmallVector<bool, 4> copiedToOutput;
  for (unsigned i = 0, e = target->size(); i != e; ++i) {
    copiedToOutput.push_back(false);
    switch ((*kinds)[i]) {
    case ReshapeElement::Infer:
      inferIndex = i;
      out.push_back(Dim::unknown());
      continue;
    case ReshapeElement::Extent:
      out.push_back((*target)[i].toDim());
      continue;
    case ReshapeElement::Copy:
      break;
    }
    if (!data.hasRank()) {
      out.push_back(Dim::unknown());
      continue;
    }
    if (i >= data.getRank())
      return ctx.error(
          llvm::toString(reshapeCopyOutOfRange(i, data.str(), data.getRank())));
    out.push_back(data.getDim(i));
    copiedFromInput[i] = true;
    copiedToOutput.back() = true;
  }

  if (data.hasRank()) {
    // Cancel the factors both sides share, then solve for -1 or check the
    // element counts.
    Factors in, outFactors;
    for (unsigned i = 0, e = data.getRank(); i != e; ++i)
      if (!copiedFromInput[i])
        in.add(data.getDim(i));
    for (unsigned i = 0, e = out.size(); i != e; ++i)
      if (!copiedToOutput[i] && static_cast<int>(i) != inferIndex)
        outFactors.add(out[i]);
    if (in.numUnknown == 0 && outFactors.numUnknown == 0) {
      for (auto it = outFactors.symbols.begin();
           it != outFactors.symbols.end();) {
        auto match = in.symbols.find(*it);
        if (match == in.symbols.end()) {
          ++it;
          continue;
        }
        in.symbols.erase(match);
        it = outFactors.symbols.erase(it);
      }
      bool staticRest = in.symbols.empty() && outFactors.symbols.empty();
      if (inferIndex >= 0 && outFactors.symbols.empty() &&
          outFactors.staticProduct != 0) {
        if (in.symbols.empty()) {
          if (in.staticProduct % outFactors.staticProduct != 0)
            return ctx.error(llvm::formatv(
                "cannot reshape {0} to {1}: {2} elements are not divisible "
                "by {3}",
                data.str(), shapeString(out), in.staticProduct,
                outFactors.staticProduct));
          out[inferIndex] =
              Dim::fixed(in.staticProduct / outFactors.staticProduct);
        } else if (in.symbols.size() == 1 &&
                   in.staticProduct == outFactors.staticProduct) {
          out[inferIndex] = Dim::symbolic(*in.symbols.begin());
        }
      } else if (inferIndex < 0 && staticRest &&
                 in.staticProduct != outFactors.staticProduct) {
        return ctx.error(
            llvm::formatv("cannot reshape {0} to {1}: element counts differ",
                          data.str(), shapeString(out)));
      }
    }
  }
  setOutput(ctx, 0, TensorType(dtype, out));
  return llvm::Error::success();
}

llvm::Error inferFlatten(InferenceContext &ctx) {
  const TensorType &data = ctx.getInputType(0);
  if (!data.hasRank()) {
    setOutput(ctx, 0, unknownDims(data.getDType(), 2));
    return llvm::Error::success();
  }
  int64_t rank = data.getRank();
  int64_t axis = ctx.getIntAttr("axis", 1);
  // Flatten accepts axis == rank.
  if (axis < -rank || axis > rank)
    return ctx.error(
        llvm::formatv("axis {0} is out of range for rank {1}", axis, rank));
  if (axis < 0)
    axis += rank;
  llvm::ArrayRef<Dim> dims = data.getDims();
  DimVector out = {multiplyDims(dims.take_front(axis)),
                   multiplyDims(dims.drop_front(axis))};
  setOutput(ctx, 0, TensorType(data.getDType(), out));
  return llvm::Error::success();
}

/// Squeeze with \p axesFromInput selecting the opset-13 form.
InferenceFn inferSqueeze(bool axesFromInput) {
  return [axesFromInput](InferenceContext &ctx) -> llvm::Error {
    const TensorType &data = ctx.getInputType(0);
    DType dtype = data.getDType();
    SqueezeAxesSource source = getSqueezeAxesSource(ctx.getNode());
    std::optional<std::vector<int64_t>> axes;
    bool axesGiven = source.given;
    if (axesFromInput) {
      if (auto err = checkDTypeIn(ctx, 1, kInt64Only, "axes"))
        return err;
      if (axesGiven)
        axes = intValuesInput(ctx, 1);
    } else if (axesGiven) {
      axes = source.attrAxes;
    }
    if (!data.hasRank()) {
      setOutput(ctx, 0, TensorType::unranked(dtype));
      return llvm::Error::success();
    }
    auto dimExtent = [](const Dim &dim) -> std::optional<int64_t> {
      if (dim.isStatic())
        return dim.getExtent();
      return std::nullopt;
    };
    if (!axesGiven) {
      // Whether a dimension that is not static is 1 decides the rank.
      if (!llvm::all_of(data.getDims(),
                        [](const Dim &dim) { return dim.isStatic(); })) {
        setOutput(ctx, 0, TensorType::unranked(dtype));
        return llvm::Error::success();
      }
    } else if (!axes) {
      std::optional<int64_t> length = staticLength(ctx, 1);
      if (length && *length <= data.getRank())
        setOutput(ctx, 0, unknownDims(dtype, data.getRank() - *length));
      else
        setOutput(ctx, 0, TensorType::unranked(dtype));
      return llvm::Error::success();
    }
    llvm::SmallVector<unsigned, 4> normalized;
    if (axesGiven) {
      auto list = normalizeAxes(ctx, *axes, data.getRank());
      if (!list)
        return list.takeError();
      normalized = std::move(*list);
    }
    std::optional<llvm::ArrayRef<unsigned>> selected;
    if (axesGiven)
      selected = llvm::ArrayRef<unsigned>(normalized);
    auto out = squeezeDims<Dim>(data.getDims(), selected, dimExtent);
    if (!out)
      return ctx.error(llvm::toString(out.takeError()));
    setOutput(ctx, 0, TensorType(dtype, DimVector(out->begin(), out->end())));
    return llvm::Error::success();
  };
}

InferenceFn inferUnsqueeze(bool axesFromInput) {
  return [axesFromInput](InferenceContext &ctx) -> llvm::Error {
    const TensorType &data = ctx.getInputType(0);
    DType dtype = data.getDType();
    std::optional<std::vector<int64_t>> axes;
    std::optional<int64_t> numAxes;
    if (axesFromInput) {
      if (auto err = checkDTypeIn(ctx, 1, kInt64Only, "axes"))
        return err;
      axes = intValuesInput(ctx, 1);
      numAxes =
          axes ? std::optional<int64_t>(axes->size()) : staticLength(ctx, 1);
    } else {
      axes = getSqueezeAxesSource(ctx.getNode()).attrAxes;
      numAxes = axes->size();
    }
    if (!data.hasRank() || !numAxes) {
      setOutput(ctx, 0, TensorType::unranked(dtype));
      return llvm::Error::success();
    }
    int64_t outRank = data.getRank() + *numAxes;
    if (!axes) {
      setOutput(ctx, 0, unknownDims(dtype, outRank));
      return llvm::Error::success();
    }
    auto normalized = normalizeAxes(ctx, *axes, outRank);
    if (!normalized)
      return normalized.takeError();
    auto out = unsqueezeDims<Dim>(data.getDims(), *normalized, Dim::fixed(1));
    setOutput(ctx, 0, TensorType(dtype, DimVector(out.begin(), out.end())));
    return llvm::Error::success();
  };
}

void registerViews(OpRegistry &registry) {
  SchemaBuilder reshape(kOnnxDomain, "Reshape", 5);
  reshape.inputs(2)
      .outputs(1)
      .traits(TraitView)
      .amp(AmpClass::Follow)
      .infer(inferReshape);
  reshape.add(registry);
  reshape.attrInt("allowzero", 0).addAt(registry, 14);

  SchemaBuilder(kOnnxDomain, "Flatten", 1)
      .inputs(1)
      .outputs(1)
      .attrInt("axis", 1)
      .traits(TraitView)
      .amp(AmpClass::Follow)
      .infer(inferFlatten)
      .add(registry);

  SchemaBuilder(kOnnxDomain, "Identity", 1)
      .inputs(1)
      .outputs(1)
      .traits(TraitView)
      .amp(AmpClass::Follow)
      .infer(inferSameAs(0))
      .add(registry);

  SchemaBuilder(kOnnxDomain, "Squeeze", 11)
      .inputs(1)
      .outputs(1)
      .optionalAttr("axes", Attribute::Kind::Ints)
      .traits(TraitView)
      .amp(AmpClass::Follow)
      .infer(inferSqueeze(false))
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Squeeze", 13)
      .inputs(1, 2)
      .outputs(1)
      .traits(TraitView)
      .amp(AmpClass::Follow)
      .infer(inferSqueeze(true))
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Unsqueeze", 11)
      .inputs(1)
      .outputs(1)
      .requiredAttr("axes", Attribute::Kind::Ints)
      .traits(TraitView)
      .amp(AmpClass::Follow)
      .infer(inferUnsqueeze(false))
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Unsqueeze", 13)
      .inputs(2)
      .outputs(1)
      .traits(TraitView)
      .amp(AmpClass::Follow)
      .infer(inferUnsqueeze(true))
      .add(registry);
}

//===----------------------------------------------------------------------===//
// Transpose, Concat, Slice, Split
//===----------------------------------------------------------------------===//

llvm::Error inferTranspose(InferenceContext &ctx) {
  const TensorType &data = ctx.getInputType(0);
  if (!data.hasRank()) {
    std::vector<int64_t> perm = ctx.getIntsAttr("perm");
    if (perm.empty())
      setOutput(ctx, 0, TensorType::unranked(data.getDType()));
    else
      setOutput(ctx, 0, unknownDims(data.getDType(), perm.size()));
    return llvm::Error::success();
  }
  unsigned rank = data.getRank();
  std::vector<int64_t> perm = ctx.getIntsAttr("perm");
  if (!ctx.getNode().hasAttr("perm"))
    for (unsigned i = 0; i != rank; ++i)
      perm.push_back(rank - 1 - i);
  if (perm.size() != rank)
    return ctx.error(llvm::formatv("perm has {0} entries but the input has "
                                   "rank {1}",
                                   perm.size(), rank));
  llvm::SmallVector<bool, 4> seen(rank, false);
  DimVector out;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return ctx.error("perm is not a permutation of the input axes");
    seen[p] = true;
    out.push_back(data.getDim(p));
  }
  setOutput(ctx, 0, TensorType(data.getDType(), out));
  return llvm::Error::success();
}

} // namespace

llvm::Error ops::inferConcatResult(InferenceContext &ctx) {
  llvm::SmallVector<unsigned, 4> indices;
  for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i)
    indices.push_back(i);
  auto dtype = checkSameDType(ctx, indices);
  if (!dtype)
    return dtype.takeError();
  const TensorType *ranked = nullptr;
  bool allRanked = true;
  for (unsigned i : indices) {
    const TensorType &type = ctx.getInputType(i);
    if (!type.hasRank()) {
      allRanked = false;
      continue;
    }
    if (!ranked)
      ranked = &type;
    else if (type.getRank() != ranked->getRank())
      return ctx.error(llvm::formatv("input {0} has rank {1} but input 0 has "
                                     "rank {2}",
                                     i, type.getRank(), ranked->getRank()));
  }
  if (!ranked) {
    setOutput(ctx, 0, TensorType::unranked(*dtype));
    return llvm::Error::success();
  }
  int64_t rank = ranked->getRank();
  auto axis = normalizeAxis(ctx, ctx.getIntAttr("axis", 0), rank);
  if (!axis)
    return axis.takeError();
  DimVector out(ranked->getDims().begin(), ranked->getDims().end());
  DimVector axisDims;
  for (unsigned i : indices) {
    const TensorType &type = ctx.getInputType(i);
    if (!type.hasRank())
      continue;
    axisDims.push_back(type.getDim(*axis));
    for (int64_t d = 0; d != rank; ++d) {
      if (d == static_cast<int64_t>(*axis))
        continue;
      std::optional<Dim> merged = unifyDims(out[d], type.getDim(d));
      if (!merged)
        return ctx.error(llvm::formatv(
            "dimension {0} of input {1} is {2} but another input has {3}", d, i,
            shapeString(type.getDim(d)), shapeString(out[d])));
      out[d] = *merged;
    }
  }
  out[*axis] = allRanked ? addDims(axisDims) : Dim::unknown();
  setOutput(ctx, 0, TensorType(*dtype, out));
  return llvm::Error::success();
}

namespace {

/// True when a slice [start, end) with \p step provably covers a whole
/// dimension of unknown extent.
bool coversWholeDim(int64_t start, int64_t end, int64_t step) {
  constexpr int64_t kToEnd = (int64_t(1) << 31) - 1;
  return step == 1 && start == 0 && end >= kToEnd;
}

llvm::Error inferSlice(InferenceContext &ctx) {
  const TensorType &data = ctx.getInputType(0);
  DType dtype = data.getDType();
  for (unsigned i = 1; i != 5; ++i)
    if (auto err = checkDTypeIn(ctx, i, indexDTypes(), "slice parameter"))
      return err;
  if (!data.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(dtype));
    return llvm::Error::success();
  }
  int64_t rank = data.getRank();
  auto starts = intValuesInput(ctx, 1);
  auto ends = intValuesInput(ctx, 2);
  std::optional<std::vector<int64_t>> axes, steps;
  bool axesKnown = true;
  if (ctx.hasInput(3)) {
    axes = intValuesInput(ctx, 3);
    axesKnown = axes.has_value();
  }
  bool stepsKnown = true;
  if (ctx.hasInput(4)) {
    steps = intValuesInput(ctx, 4);
    stepsKnown = steps.has_value();
  }
  DimVector out(data.getDims().begin(), data.getDims().end());
  if (!axesKnown) {
    setOutput(ctx, 0, unknownDims(dtype, rank));
    return llvm::Error::success();
  }
  if (!starts || !ends || !stepsKnown) {
    // The sliced axes are known even if the bounds are not.
    if (axes) {
      auto normalized = normalizeAxes(ctx, *axes, rank);
      if (!normalized)
        return normalized.takeError();
      for (unsigned axis : *normalized)
        out[axis] = Dim::unknown();
      setOutput(ctx, 0, TensorType(dtype, out));
    } else {
      setOutput(ctx, 0, unknownDims(dtype, rank));
    }
    return llvm::Error::success();
  }
  size_t count = starts->size();
  if (ends->size() != count || (axes && axes->size() != count) ||
      (steps && steps->size() != count))
    return ctx.error("starts, ends, axes and steps must have the same length");
  if (!axes) {
    axes.emplace();
    for (size_t i = 0; i != count; ++i)
      axes->push_back(i);
  }
  auto normalized = normalizeAxes(ctx, *axes, rank);
  if (!normalized)
    return normalized.takeError();
  for (size_t i = 0; i != count; ++i) {
    int64_t step = steps ? (*steps)[i] : 1;
    if (step == 0)
      return ctx.error("slice step must not be 0");
    unsigned axis = (*normalized)[i];
    const Dim &dim = data.getDim(axis);
    if (dim.isStatic())
      out[axis] = Dim::fixed(
          sliceRange(dim.getExtent(), (*starts)[i], (*ends)[i], step).second);
    else if (!coversWholeDim((*starts)[i], (*ends)[i], step))
      out[axis] = Dim::unknown();
  }
  setOutput(ctx, 0, TensorType(dtype, out));
  return llvm::Error::success();
}

/// Where Split reads its sizes from, by version.
enum class SplitForm { Attribute11, Input13, Input18 };

InferenceFn inferSplit(SplitForm form) {
  return [form](InferenceContext &ctx) -> llvm::Error {
    const TensorType &data = ctx.getInputType(0);
    DType dtype = data.getDType();
    unsigned numOutputs = ctx.getNumOutputs();
    if (!data.hasRank()) {
      for (unsigned i = 0; i != numOutputs; ++i)
        setOutput(ctx, i, TensorType::unranked(dtype));
      return llvm::Error::success();
    }
    auto axis = normalizeAxis(ctx, ctx.getIntAttr("axis", 0), data.getRank());
    if (!axis)
      return axis.takeError();
    std::optional<std::vector<int64_t>> split;
    bool splitGiven = false;
    if (form == SplitForm::Attribute11) {
      splitGiven = ctx.getNode().hasAttr("split");
      if (splitGiven)
        split = ctx.getIntsAttr("split");
    } else {
      if (auto err = checkDTypeIn(ctx, 1, kInt64Only, "split"))
        return err;
      splitGiven = ctx.hasInput(1);
      if (splitGiven)
        split = intValuesInput(ctx, 1);
    }
    const Dim &dim = data.getDim(*axis);
    DimVector sizes;
    if (splitGiven && split) {
      std::optional<int64_t> extent;
      if (dim.isStatic())
        extent = dim.getExtent();
      if (auto total = checkSplitSizes(*split, numOutputs, *axis, extent);
          !total)
        return ctx.error(llvm::toString(total.takeError()));
      for (int64_t size : *split)
        sizes.push_back(Dim::fixed(size));
    } else if (splitGiven) {
      sizes.assign(numOutputs, Dim::unknown());
    } else {
      if (form == SplitForm::Input18 && ctx.getNode().hasAttr("num_outputs") &&
          ctx.getIntAttr("num_outputs", 0) != numOutputs)
        return ctx.error(llvm::formatv("num_outputs is {0} but the node has "
                                       "{1} outputs",
                                       ctx.getIntAttr("num_outputs", 0),
                                       numOutputs));
      if (numOutputs == 1) {
        sizes.push_back(dim);
      } else if (!dim.isStatic()) {
        sizes.assign(numOutputs, Dim::unknown());
      } else if (form == SplitForm::Input18 &&
                 ctx.getNode().hasAttr("num_outputs")) {
        // Opset 18: ceil-sized chunks, the last one smaller.
        int64_t extent = dim.getExtent();
        int64_t chunk = (extent + numOutputs - 1) / numOutputs;
        if (chunk * (numOutputs - 1) >= extent && extent != 0)
          return ctx.error(llvm::formatv("cannot split extent {0} into {1} "
                                         "non-empty chunks",
                                         extent, numOutputs));
        for (unsigned i = 0; i + 1 < numOutputs; ++i)
          sizes.push_back(Dim::fixed(chunk));
        sizes.push_back(Dim::fixed(extent - chunk * (numOutputs - 1)));
      } else {
        int64_t extent = dim.getExtent();
        if (extent % numOutputs != 0)
          return ctx.error(llvm::formatv("axis extent {0} is not divisible "
                                         "into {1} equal outputs",
                                         extent, numOutputs));
        sizes.assign(numOutputs, Dim::fixed(extent / numOutputs));
      }
    }
    for (unsigned i = 0; i != numOutputs; ++i) {
      DimVector out(data.getDims().begin(), data.getDims().end());
      out[*axis] = sizes[i];
      setOutput(ctx, i, TensorType(dtype, out));
    }
    return llvm::Error::success();
  };
}

void registerMovement(OpRegistry &registry) {
  SchemaBuilder(kOnnxDomain, "Transpose", 1)
      .inputs(1)
      .outputs(1)
      .optionalAttr("perm", Attribute::Kind::Ints)
      .amp(AmpClass::Follow)
      .infer(inferTranspose)
      .add(registry);

  SchemaBuilder(kOnnxDomain, "Concat", 11)
      .inputs(1, kVariadic)
      .outputs(1)
      .requiredAttr("axis", Attribute::Kind::Int)
      .amp(AmpClass::Follow)
      .infer(inferConcatResult)
      .add(registry);

  SchemaBuilder(kOnnxDomain, "Slice", 10)
      .inputs(3, 5)
      .outputs(1)
      .amp(AmpClass::Follow)
      .infer(inferSlice)
      .add(registry);

  SchemaBuilder(kOnnxDomain, "Split", 11)
      .inputs(1)
      .outputs(1, kVariadic)
      .attrInt("axis", 0)
      .optionalAttr("split", Attribute::Kind::Ints)
      .amp(AmpClass::Follow)
      .infer(inferSplit(SplitForm::Attribute11))
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Split", 13)
      .inputs(1, 2)
      .outputs(1, kVariadic)
      .attrInt("axis", 0)
      .amp(AmpClass::Follow)
      .infer(inferSplit(SplitForm::Input13))
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Split", 18)
      .inputs(1, 2)
      .outputs(1, kVariadic)
      .attrInt("axis", 0)
      .optionalAttr("num_outputs", Attribute::Kind::Int)
      .amp(AmpClass::Follow)
      .infer(inferSplit(SplitForm::Input18))
      .add(registry);
}

//===----------------------------------------------------------------------===//
// Expand, Tile, Trilu
//===----------------------------------------------------------------------===//

llvm::Error inferExpand(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1, kInt64Only, "shape"))
    return err;
  const TensorType &data = ctx.getInputType(0);
  DType dtype = data.getDType();
  std::optional<SymIntVector> target = shapeValueInput(ctx, 1);
  if (!target || !data.hasRank()) {
    std::optional<int64_t> length =
        target ? std::optional<int64_t>(target->size()) : staticLength(ctx, 1);
    if (length && data.hasRank())
      setOutput(ctx, 0,
                unknownDims(dtype, std::max<int64_t>(*length, data.getRank())));
    else
      setOutput(ctx, 0, TensorType::unranked(dtype));
    return llvm::Error::success();
  }
  DimVector shape;
  for (const SymInt &element : *target) {
    if (element.isConstant() && element.getValue() < 0)
      return ctx.error(
          llvm::formatv("invalid shape element {0}", element.getValue()));
    shape.push_back(element.toDim());
  }
  std::optional<DimVector> out = broadcastShapes(data.getDims(), shape);
  if (!out)
    return ctx.error("incompatible broadcast: cannot expand " + data.str() +
                     " to " + shapeString(shape));
  setOutput(ctx, 0, TensorType(dtype, *out));
  return llvm::Error::success();
}

llvm::Error inferTile(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1, kInt64Only, "repeats"))
    return err;
  const TensorType &data = ctx.getInputType(0);
  DType dtype = data.getDType();
  if (!data.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(dtype));
    return llvm::Error::success();
  }
  std::optional<SymIntVector> repeats = shapeValueInput(ctx, 1);
  if (!repeats) {
    setOutput(ctx, 0, unknownDims(dtype, data.getRank()));
    return llvm::Error::success();
  }
  llvm::SmallVector<std::optional<int64_t>, 6> values;
  for (const SymInt &repeat : *repeats)
    values.push_back(repeat.isConstant()
                         ? std::optional<int64_t>(repeat.getValue())
                         : std::nullopt);
  if (llvm::Error err = checkTileRepeats(values, data.getRank()))
    return ctx.error(llvm::toString(std::move(err)));
  DimVector out;
  for (unsigned i = 0, e = data.getRank(); i != e; ++i)
    out.push_back(multiplyDims({data.getDim(i), (*repeats)[i].toDim()}));
  setOutput(ctx, 0, TensorType(dtype, out));
  return llvm::Error::success();
}

void registerExpansion(OpRegistry &registry) {
  SchemaBuilder(kOnnxDomain, "Expand", 8)
      .inputs(2)
      .outputs(1)
      .amp(AmpClass::Follow)
      .infer(inferExpand)
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Tile", 6)
      .inputs(2)
      .outputs(1)
      .amp(AmpClass::Follow)
      .infer(inferTile)
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Trilu", 14)
      .inputs(1, 2)
      .outputs(1)
      .attrInt("upper", 1)
      .traits(TraitElementwise)
      .inPlace(0)
      .amp(AmpClass::Follow)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        const TensorType &data = ctx.getInputType(0);
        if (data.hasRank() && data.getRank() < 2)
          return ctx.error("input must have rank >= 2, got " + data.str());
        setOutput(ctx, 0, data);
        return llvm::Error::success();
      })
      .add(registry);
}

} // namespace

void ops::registerTensorOps(OpRegistry &registry) {
  registerViews(registry);
  registerMovement(registry);
  registerExpansion(registry);
}
