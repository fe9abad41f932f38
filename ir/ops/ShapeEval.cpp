//===- ShapeEval.cpp - The one shape evaluator ----------------------------===//
//
// The static-shape rules of ShapeEval.h and their error texts.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/ShapeEval.h"
#include "ir/IR.h"
#include "ir/ops/Axes.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/MathExtras.h"

#include <string>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

std::string text(llvm::ArrayRef<int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i != shape.size(); ++i)
    out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

} // namespace

llvm::Expected<int64_t> ops::countElements(llvm::ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t extent : shape) {
    if (extent < 0)
      return fail("shape " + text(shape) + " has a negative extent");
    if (llvm::MulOverflow(count, extent, count))
      return fail("shape " + text(shape) + " has too many elements");
  }
  return count;
}

llvm::Expected<llvm::SmallVector<unsigned, 6>>
ops::normalizeAxisList(llvm::ArrayRef<int64_t> axes, int64_t rank,
                       llvm::StringRef what) {
  llvm::SmallVector<unsigned, 6> result;
  for (int64_t axis : axes) {
    auto normalized = checkAxis(axis, rank, what);
    if (!normalized)
      return normalized.takeError();
    if (llvm::is_contained(result, *normalized))
      return fail(what + " contains axis " + llvm::Twine(axis) + " twice");
    result.push_back(*normalized);
  }
  return result;
}

//===----------------------------------------------------------------------===//
// Reshape
//===----------------------------------------------------------------------===//

bool ops::reshapeAllowsZero(const Node &node) {
  return node.getIntAttr("allowzero", 0) != 0;
}

SqueezeAxesSource ops::getSqueezeAxesSource(const Node &node) {
  SqueezeAxesSource source;
  int64_t version = node.getOpsetVersion();
  source.fromOperand = version <= 0 || version >= 13;
  if (source.fromOperand) {
    source.given = node.getNumOperands() > 1 && node.getOperand(1);
  } else {
    source.given = node.hasAttr("axes");
    source.attrAxes = node.getIntsAttr("axes", {});
  }
  return source;
}

llvm::Expected<llvm::SmallVector<ReshapeElement, 6>>
ops::classifyReshapeTarget(llvm::ArrayRef<std::optional<int64_t>> target,
                           bool allowZero) {
  llvm::SmallVector<ReshapeElement, 6> kinds;
  bool hasZero = false, hasInfer = false;
  for (const std::optional<int64_t> &value : target) {
    if (!value) {
      kinds.push_back(ReshapeElement::Extent);
      continue;
    }
    if (*value < -1)
      return fail("invalid shape element " + llvm::Twine(*value));
    if (*value == -1) {
      if (hasInfer)
        return fail("shape contains more than one -1");
      hasInfer = true;
      kinds.push_back(ReshapeElement::Infer);
      continue;
    }
    hasZero |= *value == 0;
    kinds.push_back(*value == 0 && !allowZero ? ReshapeElement::Copy
                                              : ReshapeElement::Extent);
  }
  if (allowZero && hasZero && hasInfer)
    return fail("shape contains both 0 and -1 with allowzero=1");
  return kinds;
}

llvm::Error ops::reshapeCopyOutOfRange(unsigned index, llvm::StringRef input,
                                       int64_t rank) {
  return fail("shape element " + llvm::Twine(index) +
              " is 0 (copy) but the input " + input + " has rank " +
              llvm::Twine(rank));
}

llvm::Expected<StaticShape> ops::reshapeTarget(llvm::ArrayRef<int64_t> input,
                                               llvm::ArrayRef<int64_t> target,
                                               bool allowZero) {
  llvm::SmallVector<std::optional<int64_t>, 6> values(target.begin(),
                                                      target.end());
  auto kinds = classifyReshapeTarget(values, allowZero);
  if (!kinds)
    return kinds.takeError();
  auto total = countElements(input);
  if (!total)
    return total.takeError();
  StaticShape out;
  int64_t known = 1;
  std::optional<size_t> inferIndex;
  for (size_t i = 0; i != target.size(); ++i) {
    int64_t extent = target[i];
    switch ((*kinds)[i]) {
    case ReshapeElement::Copy:
      if (i >= input.size())
        return reshapeCopyOutOfRange(i, text(input), input.size());
      extent = input[i];
      break;
    case ReshapeElement::Infer:
      inferIndex = i;
      out.push_back(-1);
      continue;
    case ReshapeElement::Extent:
      break;
    }
    if (llvm::MulOverflow(known, extent, known))
      return fail("cannot reshape " + text(input) + " to " + text(target) +
                  ": element counts differ");
    out.push_back(extent);
  }
  if (inferIndex) {
    if (known == 0 || *total % known != 0)
      return fail("cannot reshape " + text(input) + " to " + text(out) + ": " +
                  llvm::Twine(*total) + " elements are not divisible by " +
                  llvm::Twine(known));
    out[*inferIndex] = *total / known;
  } else if (known != *total) {
    return fail("cannot reshape " + text(input) + " to " + text(out) +
                ": element counts differ");
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Broadcasting
//===----------------------------------------------------------------------===//

std::optional<StaticShape>
ops::broadcastStaticShapes(llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes) {
  size_t rank = 0;
  for (llvm::ArrayRef<int64_t> shape : shapes)
    rank = std::max(rank, shape.size());
  StaticShape result(rank, 1);
  for (llvm::ArrayRef<int64_t> shape : shapes) {
    size_t offset = rank - shape.size();
    for (size_t d = 0; d != shape.size(); ++d) {
      int64_t &out = result[offset + d];
      if (shape[d] == out || shape[d] == 1)
        continue;
      if (out != 1)
        return std::nullopt;
      out = shape[d];
    }
  }
  return result;
}

llvm::Expected<StaticShape>
ops::broadcastStaticShapes(llvm::ArrayRef<int64_t> a,
                           llvm::ArrayRef<int64_t> b) {
  llvm::ArrayRef<int64_t> shapes[] = {a, b};
  if (std::optional<StaticShape> result = broadcastStaticShapes(shapes))
    return std::move(*result);
  return fail("shapes " + text(a) + " and " + text(b) + " do not broadcast");
}

llvm::Expected<GradientAxes>
ops::broadcastGradientArgs(llvm::ArrayRef<int64_t> a,
                           llvm::ArrayRef<int64_t> b) {
  GradientAxesResult result =
      walkBroadcastGradient(a, b, classifyBroadcastPair);
  if (result.stop != BroadcastPair::Same)
    return fail("shapes " + text(a) + " and " + text(b) + " do not broadcast");
  return std::move(result.axes);
}

//===----------------------------------------------------------------------===//
// Expand, Tile, Squeeze, Unsqueeze, Concat
//===----------------------------------------------------------------------===//

llvm::Expected<StaticShape> ops::expandShape(llvm::ArrayRef<int64_t> input,
                                             llvm::ArrayRef<int64_t> target) {
  for (int64_t value : target)
    if (value < 0)
      return fail("invalid shape element " + llvm::Twine(value));
  llvm::ArrayRef<int64_t> shapes[] = {input, target};
  if (std::optional<StaticShape> result = broadcastStaticShapes(shapes))
    return std::move(*result);
  return fail("incompatible broadcast: cannot expand " + text(input) + " to " +
              text(target));
}

llvm::Error
ops::checkTileRepeats(llvm::ArrayRef<std::optional<int64_t>> repeats,
                      int64_t rank) {
  if (static_cast<int64_t>(repeats.size()) != rank)
    return fail("repeats has " + llvm::Twine(repeats.size()) +
                " values but the input has rank " + llvm::Twine(rank));
  for (const std::optional<int64_t> &repeat : repeats)
    if (repeat && *repeat < 0)
      return fail("repeats value " + llvm::Twine(*repeat) + " is negative");
  return llvm::Error::success();
}

llvm::Expected<StaticShape> ops::tileShape(llvm::ArrayRef<int64_t> input,
                                           llvm::ArrayRef<int64_t> repeats) {
  llvm::SmallVector<std::optional<int64_t>, 6> values(repeats.begin(),
                                                      repeats.end());
  if (llvm::Error err = checkTileRepeats(values, input.size()))
    return err;
  StaticShape out;
  for (size_t d = 0; d != input.size(); ++d) {
    int64_t extent;
    if (llvm::MulOverflow(input[d], repeats[d], extent))
      return fail("tiled extent overflows");
    out.push_back(extent);
  }
  return out;
}

llvm::Expected<StaticShape> ops::unsqueezeShape(llvm::ArrayRef<int64_t> input,
                                                llvm::ArrayRef<int64_t> axes) {
  auto normalized = normalizeAxisList(axes, input.size() + axes.size());
  if (!normalized)
    return normalized.takeError();
  return unsqueezeDims<int64_t>(input, *normalized, 1);
}

llvm::Error ops::squeezeExtentError(unsigned axis, int64_t extent) {
  return fail("cannot squeeze axis " + llvm::Twine(axis) + " of extent " +
              llvm::Twine(extent));
}

llvm::Expected<StaticShape>
ops::squeezeShape(llvm::ArrayRef<int64_t> input,
                  std::optional<llvm::ArrayRef<int64_t>> axes) {
  std::optional<llvm::SmallVector<unsigned, 6>> normalized;
  if (axes) {
    auto list = normalizeAxisList(*axes, input.size());
    if (!list)
      return list.takeError();
    normalized = std::move(*list);
  }
  std::optional<llvm::ArrayRef<unsigned>> selected;
  if (normalized)
    selected = llvm::ArrayRef<unsigned>(*normalized);
  return squeezeDims<int64_t>(
      input, selected,
      [](int64_t extent) -> std::optional<int64_t> { return extent; });
}

llvm::Expected<StaticShape>
ops::concatShape(llvm::ArrayRef<llvm::ArrayRef<int64_t>> inputs, int64_t axis) {
  if (inputs.empty())
    return fail("concatenation of no inputs");
  int64_t rank = inputs[0].size();
  for (size_t i = 1; i != inputs.size(); ++i)
    if (static_cast<int64_t>(inputs[i].size()) != rank)
      return fail("input " + llvm::Twine(i) + " has rank " +
                  llvm::Twine(inputs[i].size()) + " but input 0 has rank " +
                  llvm::Twine(rank));
  auto normalized = checkAxis(axis, rank);
  if (!normalized)
    return normalized.takeError();
  StaticShape out(inputs[0].begin(), inputs[0].end());
  out[*normalized] = 0;
  for (size_t i = 0; i != inputs.size(); ++i) {
    for (int64_t d = 0; d != rank; ++d) {
      if (d == static_cast<int64_t>(*normalized))
        continue;
      if (inputs[i][d] != out[d])
        return fail("dimension " + llvm::Twine(d) + " of input " +
                    llvm::Twine(i) + " is " + llvm::Twine(inputs[i][d]) +
                    " but another input has " + llvm::Twine(out[d]));
    }
    if (llvm::AddOverflow(out[*normalized], inputs[i][*normalized],
                          out[*normalized]))
      return fail("the concatenated extent overflows");
  }
  return out;
}

llvm::Expected<int64_t> ops::checkSplitSizes(llvm::ArrayRef<int64_t> split,
                                             unsigned numOutputs, unsigned axis,
                                             std::optional<int64_t> extent) {
  if (split.size() != numOutputs)
    return fail("split has " + llvm::Twine(split.size()) +
                " values but the node has " + llvm::Twine(numOutputs) +
                " outputs");
  int64_t total = 0;
  for (int64_t size : split) {
    if (size < 0)
      return fail("split size " + llvm::Twine(size) + " is negative");
    if (llvm::AddOverflow(total, size, total))
      return fail("split sizes overflow");
  }
  if (extent && *extent != total)
    return fail("split sizes sum to " + llvm::Twine(total) + " but axis " +
                llvm::Twine(axis) + " has extent " + llvm::Twine(*extent));
  return total;
}
