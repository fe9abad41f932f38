//===- DropoutKernels.cpp - Dropout, BitmaskDropout and gradients ---------===//
//
// Dropout (ratio as input from opset 12, as attribute before; training_mode
// input, false when absent: then the op is the identity with an all-true
// mask), com.microsoft BitmaskDropout (the mask packed 32 elements per
// uint32 word, element i in bit i % 32 of word i / 32), BiasDropout
// (dropout of data + bias, plus a residual), DropoutGrad and
// BitmaskDropoutGrad. Element i is kept when the i-th uniform number of the
// node's Philox stream (backend/Philox.h, the CUDA kernels' too) is >= ratio;
// kept elements are scaled by 1 / (1 - ratio). All three dropout ops draw the
// same decisions for the same (seed, step, stream id).
//
//===----------------------------------------------------------------------===//

#include "backend/Philox.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"

#include <cstring>
#include <optional>
#include <string>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// Ratio and mode of a dropout-like op.
struct DropoutMode {
  float ratio = 0.5f;
  bool training = false;
  /// True when the op drops anything (training with a nonzero ratio).
  bool active() const { return training && ratio > 0; }
  float scale() const { return 1.0f / (1.0f - ratio); }
};

/// What a dropout node says apart from its operands, decoded at prepare.
struct DropoutAttrs {
  /// The `ratio` attribute (before opset 12), used without a ratio operand.
  float ratio = 0.5f;
  /// The node's random stream (getRandomStreamId), for the ops that draw.
  std::optional<uint64_t> streamId;
};

/// The message of a ratio outside [0, 1).
std::string ratioOutside(float ratio) {
  return "ratio " + std::to_string(ratio) + " is outside [0, 1)";
}

/// True when \p node has operand \p index.
bool hasOperand(const Node &node, unsigned index) {
  return index < node.getNumOperands() && node.getOperand(index);
}

/// A dropout node's attributes, its ratio operand at \p ratioAt and its
/// training_mode at \p trainingAt; for an op that \p draws, also its
/// stream id, which it needs whenever it may train (training_mode present).
llvm::Expected<std::unique_ptr<KernelState>>
readDropoutAttrs(const Node &node, unsigned ratioAt, unsigned trainingAt,
                 bool draws) {
  DropoutAttrs attrs;
  attrs.ratio = node.getFloatAttr("ratio", 0.5f);
  if (!hasOperand(node, ratioAt) && !(attrs.ratio >= 0 && attrs.ratio < 1))
    return prepareError(node, ratioOutside(attrs.ratio));
  if (draws && hasOperand(node, trainingAt)) {
    llvm::Expected<uint64_t> streamId = getRandomStreamId(node);
    if (!streamId)
      return streamId.takeError();
    attrs.streamId = *streamId;
  }
  return makeKernelState(attrs);
}

/// Dropout and BitmaskDropout(data, ratio?, training_mode?).
llvm::Expected<std::unique_ptr<KernelState>> prepareDropout(const Node &node) {
  return readDropoutAttrs(node, 1, 2, true);
}

/// BiasDropout(data, bias, residual?, ratio?, training_mode?).
llvm::Expected<std::unique_ptr<KernelState>>
prepareBiasDropout(const Node &node) {
  return readDropoutAttrs(node, 3, 4, true);
}

/// DropoutGrad and BitmaskDropoutGrad(dy, mask, ratio?, training_mode?)
/// draw nothing.
llvm::Expected<std::unique_ptr<KernelState>>
prepareDropoutGrad(const Node &node) {
  return readDropoutAttrs(node, 2, 3, false);
}

llvm::Expected<DropoutMode> getDropoutMode(const KernelCall &call,
                                           unsigned ratioInput,
                                           unsigned trainingInput) {
  DropoutMode mode;
  mode.ratio = call.getState<DropoutAttrs>().ratio;
  if (const TensorView *ratio = call.in(ratioInput)) {
    auto value = readScalar(call, *ratio, "ratio");
    if (!value)
      return value.takeError();
    mode.ratio = static_cast<float>(*value);
  }
  if (const TensorView *training = call.in(trainingInput)) {
    auto value = readScalar(call, *training, "training_mode");
    if (!value)
      return value.takeError();
    mode.training = *value != 0;
  }
  if (!(mode.ratio >= 0 && mode.ratio < 1))
    return call.error(ratioOutside(mode.ratio));
  return mode;
}

/// Elements per parallel task (a multiple of 32 and of 4).
constexpr int64_t kDropoutGrain = 8192;

/// Calls keepFn(i, keep) for every element i of an n-element random tensor
/// from the node's prepared stream. Fails for a tensor too large for one
/// stream.
template <typename KeepFn>
llvm::Error drawKeepMask(const KernelCall &call, int64_t n, float ratio,
                         const KeepFn &keepFn) {
  // Prepare found the stream of every node that may train.
  const std::optional<uint64_t> &streamId =
      call.getState<DropoutAttrs>().streamId;
  if (!streamId)
    return call.error("draws without a stream id");
  if (static_cast<uint64_t>(n) > kPhiloxMaxElements)
    return call.error("a random tensor of " + llvm::Twine(n) +
                      " elements is larger than one Philox stream (2^34)");
  PhiloxStreamKey stream = makePhiloxStreamKey(
      call.getContext().getSeed(), *streamId, call.getContext().getStep());
  parallelFor(call.getNumThreads(), n, kDropoutGrain,
              [&](int64_t lo, int64_t hi) {
                for (int64_t base = lo; base < hi; base += 4) {
                  PhiloxWords block =
                      philoxBlock(stream, static_cast<uint32_t>(base / 4));
                  for (int64_t lane = 0; lane < 4 && base + lane < hi; ++lane)
                    keepFn(base + lane, dropoutKeeps(block.w[lane], ratio));
                }
              });
  return llvm::Error::success();
}

/// Dropout(data, ratio?, training_mode?) -> (output, mask?).
llvm::Error dropoutKernel(KernelCall &call) {
  const TensorView &x = *call.in(0), &y = *call.out(0);
  TensorView *mask = call.out(1);
  if (llvm::Error err = checkSameShape(call, x, y, "data and output"))
    return err;
  if (mask) {
    if (llvm::Error err = checkSameShape(call, x, *mask, "data and mask"))
      return err;
    if (llvm::Error err = checkDType(call, *mask, DType::Bool, "mask"))
      return err;
  }
  auto mode = getDropoutMode(call, 1, 2);
  if (!mode)
    return mode.takeError();
  int64_t n = x.getNumElements();
  if (!mode->active()) {
    copyElements(x, y);
    if (mask)
      std::memset(mask->getData(), 1, n);
    return llvm::Error::success();
  }
  return dispatchFloat(call, x.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *px = x.getDataAs<T>();
    T *py = y.getDataAs<T>();
    uint8_t *pm = mask ? mask->getDataAs<uint8_t>() : nullptr;
    T scale = static_cast<T>(mode->scale());
    return drawKeepMask(call, n, mode->ratio, [&](int64_t i, bool keep) {
      py[i] = keep ? px[i] * scale : T(0);
      if (pm)
        pm[i] = keep;
    });
  });
}

/// BitmaskDropout(data, ratio?, training_mode?) -> (output, mask?).
llvm::Error bitmaskDropoutKernel(KernelCall &call) {
  const TensorView &x = *call.in(0), &y = *call.out(0);
  TensorView *mask = call.out(1);
  if (llvm::Error err = checkSameShape(call, x, y, "data and output"))
    return err;
  int64_t n = x.getNumElements();
  int64_t words = (n + 31) / 32;
  if (mask) {
    if (llvm::Error err = checkDType(call, *mask, DType::U32, "mask"))
      return err;
    if (mask->getNumElements() != words)
      return call.error("mask must have " + llvm::Twine(words) + " words");
  }
  auto mode = getDropoutMode(call, 1, 2);
  if (!mode)
    return mode.takeError();
  uint32_t *pm = mask ? mask->getDataAs<uint32_t>() : nullptr;
  if (!mode->active()) {
    copyElements(x, y);
    for (int64_t w = 0; pm && w < words; ++w) {
      int64_t valid = std::min<int64_t>(32, n - w * 32);
      pm[w] = valid == 32 ? ~0u : ((1u << valid) - 1);
    }
    return llvm::Error::success();
  }
  if (pm)
    std::memset(pm, 0, words * sizeof(uint32_t));
  return dispatchFloat(call, x.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *px = x.getDataAs<T>();
    T *py = y.getDataAs<T>();
    T scale = static_cast<T>(mode->scale());
    // Tasks cover whole words (the grain is a multiple of 32), so no two
    // threads write one word.
    return drawKeepMask(call, n, mode->ratio, [&](int64_t i, bool keep) {
      py[i] = keep ? px[i] * scale : T(0);
      if (pm && keep)
        pm[i / 32] |= 1u << (i % 32);
    });
  });
}

/// BiasDropout(data, bias, residual?, ratio?, training_mode?) ->
/// (Dropout(data + bias) + residual, mask?), the bias broadcast along the
/// last dimension.
llvm::Error biasDropoutKernel(KernelCall &call) {
  const TensorView &x = *call.in(0), &bias = *call.in(1), &y = *call.out(0);
  const TensorView *residual = call.in(2);
  TensorView *mask = call.out(1);
  if (llvm::Error err = checkSameShape(call, x, y, "data and output"))
    return err;
  if (residual)
    if (llvm::Error err =
            checkSameShape(call, x, *residual, "data and residual"))
      return err;
  if (mask) {
    if (llvm::Error err = checkSameShape(call, x, *mask, "data and mask"))
      return err;
    if (llvm::Error err = checkDType(call, *mask, DType::Bool, "mask"))
      return err;
  }
  int64_t width = x.getRank() ? x.getShape().back() : 1;
  if (bias.getNumElements() != width)
    return call.error("bias must have one element per last-dimension entry");
  auto mode = getDropoutMode(call, 3, 4);
  if (!mode)
    return mode.takeError();
  return dispatchFloat(call, x.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (bias.getDType() != x.getDType() ||
        (residual && residual->getDType() != x.getDType()))
      return call.error("data, bias and residual must have one element type");
    const T *px = x.getDataAs<T>(), *pb = bias.getDataAs<T>();
    const T *pr = residual ? residual->getDataAs<T>() : nullptr;
    T *py = y.getDataAs<T>();
    uint8_t *pm = mask ? mask->getDataAs<uint8_t>() : nullptr;
    auto emit = [&](int64_t i, bool keep, T scale) {
      T v = keep ? (px[i] + pb[width ? i % width : 0]) * scale : T(0);
      py[i] = pr ? v + pr[i] : v;
      if (pm)
        pm[i] = keep;
    };
    int64_t n = x.getNumElements();
    if (!mode->active()) {
      parallelFor(call.getNumThreads(), n, grainFor(2),
                  [&](int64_t lo, int64_t hi) {
                    for (int64_t i = lo; i < hi; ++i)
                      emit(i, true, T(1));
                  });
      return llvm::Error::success();
    }
    T scale = static_cast<T>(mode->scale());
    return drawKeepMask(call, n, mode->ratio,
                        [&](int64_t i, bool keep) { emit(i, keep, scale); });
  });
}

/// DropoutGrad(dy, mask, ratio?, training_mode?) and BitmaskDropoutGrad.
template <bool Bitmask> llvm::Error dropoutGradKernel(KernelCall &call) {
  const TensorView &dy = *call.in(0), &mask = *call.in(1), &dx = *call.out(0);
  if (llvm::Error err = checkSameShape(call, dy, dx, "dy and dx"))
    return err;
  int64_t n = dy.getNumElements();
  if (Bitmask) {
    if (llvm::Error err = checkDType(call, mask, DType::U32, "mask"))
      return err;
    if (mask.getNumElements() != (n + 31) / 32)
      return call.error("mask has the wrong number of words");
  } else {
    if (llvm::Error err = checkDType(call, mask, DType::Bool, "mask"))
      return err;
    if (llvm::Error err = checkSameShape(call, dy, mask, "dy and mask"))
      return err;
  }
  auto mode = getDropoutMode(call, 2, 3);
  if (!mode)
    return mode.takeError();
  // Without training_mode the forward op was the identity (see Dropout).
  if (!call.in(3) || !mode->active()) {
    copyElements(dy, dx);
    return llvm::Error::success();
  }
  return dispatchFloat(call, dy.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *g = dy.getDataAs<T>();
    T *out = dx.getDataAs<T>();
    T scale = static_cast<T>(mode->scale());
    const uint8_t *bytes = mask.getDataAs<uint8_t>();
    const uint32_t *bits = mask.getDataAs<uint32_t>();
    parallelFor(call.getNumThreads(), n, grainFor(1),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t i = lo; i < hi; ++i) {
                    bool keep = Bitmask ? (bits[i / 32] >> (i % 32)) & 1u
                                        : bytes[i] != 0;
                    out[i] = keep ? g[i] * scale : T(0);
                  }
                });
    return llvm::Error::success();
  });
}

} // namespace

void cpu::registerDropoutKernels(KernelTable &table) {
  table.add("", "Dropout", dropoutKernel);
  table.setPrepare("", "Dropout", prepareDropout);
  table.add(kMsDomain, "BitmaskDropout", bitmaskDropoutKernel);
  table.setPrepare(kMsDomain, "BitmaskDropout", prepareDropout);
  table.add(kMsDomain, "BiasDropout", biasDropoutKernel);
  table.setPrepare(kMsDomain, "BiasDropout", prepareBiasDropout);
  table.add(kMsDomain, "DropoutGrad", dropoutGradKernel<false>);
  table.setPrepare(kMsDomain, "DropoutGrad", prepareDropoutGrad);
  table.add(kMsDomain, "BitmaskDropoutGrad", dropoutGradKernel<true>);
  table.setPrepare(kMsDomain, "BitmaskDropoutGrad", prepareDropoutGrad);
}
