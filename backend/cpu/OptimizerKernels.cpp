//===- OptimizerKernels.cpp - In-graph AdamW and SGD updates --------------===//
//
// The CPU kernels of com.microsoft AdamWOptimizer and SGDOptimizerV2 over
// gmopt's operand-group layout (ir/OptimizerOps.h). They update the fp32
// weights and moments in place, as ONNX Runtime's kernels do through their
// input/output aliases, and follow its arithmetic step by step in fp32 so
// that a run matches ONNX Runtime's training API to rounding:
//
//   bias corrections (correct_bias = 1), from the 1-based step t:
//     ca = 1 - alpha^t, cb = 1 - beta^t (powers in double, then fp32),
//     lr' = lr * (sqrt(cb) / ca)
//   m1 = alpha * m1 + (1 - alpha) * g;  m2 = beta * m2 + (1 - beta) * g * g
//   adam_mode 0 (PyTorch AdamW): decay first, corrections on the moments
//     w -= w * lr * wd;  w -= lr * m1 / (ca * (sqrt(m2 / cb) + eps))
//   adam_mode 1 (Hugging Face AdamW): corrections in lr', decay last
//     w -= lr' * m1 / (sqrt(m2) + eps);  w -= lr * wd * w
//   SGD: w += -lr * g
//
// A false update_signal skips the update and writes 0 into the flag.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"

#include "ir/OptimizerOps.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// Element operations per weight element (the parallel grain).
constexpr int64_t kAdamWCost = 16;
constexpr int64_t kSgdCost = 2;

/// Hyper-parameters of one AdamW update, already bias-corrected.
struct AdamWStep {
  float alpha, beta, epsilon, weightDecay;
  float lr, lrCorrected, alphaCorrection, betaCorrection;
  int64_t mode;
};

/// AdamW's attributes, decoded at prepare.
struct AdamWAttrs {
  float alpha = 0.9f, beta = 0.999f, epsilon = 1e-8f, weightDecay = 1e-2f;
  int64_t mode = 0;
  bool correctBias = true;
};

/// An optimizer's operand layout, decoded at prepare: an error unless its
/// operands form the optimizer's groups.
llvm::Expected<OptimizerOperands> readLayout(const Node &node) {
  OptimizerOperands layout(node);
  if (!layout.isWellFormed())
    return prepareError(node, "operands do not form the optimizer's groups");
  return layout;
}

/// What an optimizer kernel reads at every step: its operand layout and,
/// for AdamW, its hyper-parameters.
struct OptimizerState {
  OptimizerOperands layout;
  AdamWAttrs adamW;
};

llvm::Expected<std::unique_ptr<KernelState>> prepareAdamW(const Node &node) {
  auto layout = readLayout(node);
  if (!layout)
    return layout.takeError();
  AdamWAttrs attrs;
  attrs.alpha = node.getFloatAttr("alpha", 0.9f);
  attrs.beta = node.getFloatAttr("beta", 0.999f);
  attrs.epsilon = node.getFloatAttr("epsilon", 1e-8f);
  attrs.weightDecay = node.getFloatAttr("weight_decay", 1e-2f);
  attrs.mode = node.getIntAttr("adam_mode", 0);
  attrs.correctBias = node.getIntAttr("correct_bias", 1) == 1;
  if (attrs.mode != 0 && attrs.mode != 1)
    return prepareError(node, "adam_mode must be 0 (PyTorch) or 1 (Hugging "
                              "Face), got " +
                                  llvm::Twine(attrs.mode));
  return makeKernelState(OptimizerState{*layout, attrs});
}

llvm::Expected<std::unique_ptr<KernelState>> prepareSgd(const Node &node) {
  auto layout = readLayout(node);
  if (!layout)
    return layout.takeError();
  return makeKernelState(OptimizerState{*layout, AdamWAttrs()});
}

/// Checks that operand \p index is present, fp32, and shaped like
/// \p param.
llvm::Error checkGroupOperand(const KernelCall &call, unsigned index,
                              const TensorView *param, unsigned paramIndex,
                              llvm::StringRef role) {
  const TensorView *view = call.in(index);
  if (!view)
    return call.error(llvm::Twine(role) + " of parameter " +
                      llvm::Twine(paramIndex) + " is missing");
  if (view->getDType() != DType::F32)
    return call.error(llvm::Twine(role) + " of parameter " +
                      llvm::Twine(paramIndex) +
                      " must be float32 (the CPU optimizers update fp32 "
                      "weights and moments with fp32 gradients)");
  if (param && view->getShape() != param->getShape())
    return call.error(llvm::Twine(role) + " of parameter " +
                      llvm::Twine(paramIndex) + " has shape " +
                      shapeString(view->getShape()) + ", the parameter " +
                      shapeString(param->getShape()));
  return llvm::Error::success();
}

/// Checks every group of \p layout (well formed: prepare checked it):
/// present, fp32, same shape per parameter.
llvm::Error checkGroups(const KernelCall &call,
                        const OptimizerOperands &layout) {
  static const char *const kStateRoles[] = {"first moment", "second moment"};
  for (unsigned i = 0, n = layout.size(); i != n; ++i) {
    if (auto err =
            checkGroupOperand(call, layout.paramIndex(i), nullptr, i, "weight"))
      return err;
    const TensorView *param = call.in(layout.paramIndex(i));
    if (auto err =
            checkGroupOperand(call, layout.gradIndex(i), param, i, "gradient"))
      return err;
    for (unsigned k = 0, e = OptimizerOperands::numStates(layout.getKind());
         k != e; ++k)
      if (auto err = checkGroupOperand(call, layout.stateIndex(k, i), param, i,
                                       kStateRoles[k]))
        return err;
  }
  return llvm::Error::success();
}

/// Reads the optional update signal: true when absent.
llvm::Expected<bool> readUpdateSignal(const KernelCall &call,
                                      const OptimizerOperands &layout) {
  const TensorView *signal =
      call.in(OptimizerOperands::updateSignalIndex(layout.getKind()));
  if (!signal)
    return true;
  if (signal->getDType() != DType::Bool)
    return call.error("update_signal must be a bool tensor");
  auto value = readScalar(call, *signal, "update_signal");
  if (!value)
    return value.takeError();
  return *value != 0;
}

/// Fills every element of the flag output with \p value.
template <typename T>
llvm::Error writeFlag(const KernelCall &call, DType dtype, T value) {
  TensorView *flag = call.out(0);
  if (!flag)
    return llvm::Error::success();
  if (auto err = checkDType(call, *flag, dtype, "flag"))
    return err;
  T *data = flag->getDataAs<T>();
  for (int64_t i = 0, e = flag->getNumElements(); i != e; ++i)
    data[i] = value;
  return llvm::Error::success();
}

/// One AdamW update of \p n elements.
void adamWUpdate(const AdamWStep &s, float *weight, const float *grad,
                 float *m1, float *m2, int64_t n) {
  const float oneMinusAlpha = 1.f - s.alpha, oneMinusBeta = 1.f - s.beta;
  if (s.mode == 0) {
    for (int64_t i = 0; i < n; ++i) {
      float w = weight[i];
      w = w - w * s.lr * s.weightDecay;
      float g = grad[i];
      float first = s.alpha * m1[i] + oneMinusAlpha * g;
      float second = s.beta * m2[i] + oneMinusBeta * g * g;
      m1[i] = first;
      m2[i] = second;
      float denom = std::sqrt(second / s.betaCorrection) + s.epsilon;
      weight[i] = w - (s.lr * first) / (s.alphaCorrection * denom);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    float first = s.alpha * m1[i] + oneMinusAlpha * g;
    float second = s.beta * m2[i] + oneMinusBeta * g * g;
    m1[i] = first;
    m2[i] = second;
    float denom = std::sqrt(second) + s.epsilon;
    float w = weight[i] - s.lrCorrected * first / denom;
    weight[i] = w - s.lr * s.weightDecay * w;
  }
}

/// AdamWOptimizer(lr, step, update_signal?, W.., G.., M1.., M2..) ->
/// updated_flag (int64).
llvm::Error adamWKernel(KernelCall &call) {
  const OptimizerState &state = call.getState<OptimizerState>();
  const OptimizerOperands &layout = state.layout;
  if (auto err = checkGroups(call, layout))
    return err;
  auto update = readUpdateSignal(call, layout);
  if (!update)
    return update.takeError();
  if (!*update)
    return writeFlag<int64_t>(call, DType::I64, 0);

  const TensorView &lrView = *call.in(0), &stepView = *call.in(1);
  if (lrView.getDType() != DType::F32 || stepView.getDType() != DType::I64)
    return call.error("lr must be float32 and step int64");
  auto lr = readScalar(call, lrView, "lr");
  if (!lr)
    return lr.takeError();
  auto stepValue = readScalar(call, stepView, "step");
  if (!stepValue)
    return stepValue.takeError();

  AdamWStep s;
  s.alpha = state.adamW.alpha;
  s.beta = state.adamW.beta;
  s.epsilon = state.adamW.epsilon;
  s.weightDecay = state.adamW.weightDecay;
  s.mode = state.adamW.mode;
  s.lr = static_cast<float>(*lr);
  s.lrCorrected = s.lr;
  s.alphaCorrection = s.betaCorrection = 1.f;
  if (state.adamW.correctBias) {
    double step = *stepValue;
    s.alphaCorrection =
        1.f - static_cast<float>(std::pow(static_cast<double>(s.alpha), step));
    s.betaCorrection =
        1.f - static_cast<float>(std::pow(static_cast<double>(s.beta), step));
    s.lrCorrected *= std::sqrt(s.betaCorrection) / s.alphaCorrection;
  }

  for (unsigned i = 0, n = layout.size(); i != n; ++i) {
    float *weight = call.in(layout.paramIndex(i))->getDataAs<float>();
    const float *grad = call.in(layout.gradIndex(i))->getDataAs<float>();
    float *m1 = call.in(layout.stateIndex(0, i))->getDataAs<float>();
    float *m2 = call.in(layout.stateIndex(1, i))->getDataAs<float>();
    int64_t elements = call.in(layout.paramIndex(i))->getNumElements();
    parallelFor(call.getNumThreads(), elements, grainFor(kAdamWCost),
                [&](int64_t lo, int64_t hi) {
                  adamWUpdate(s, weight + lo, grad + lo, m1 + lo, m2 + lo,
                              hi - lo);
                });
  }
  return writeFlag<int64_t>(call, DType::I64, 1);
}

/// SGDOptimizerV2(lr, update_signal?, W.., G..) -> update_completed (bool).
llvm::Error sgdKernel(KernelCall &call) {
  const OptimizerOperands &layout = call.getState<OptimizerState>().layout;
  if (auto err = checkGroups(call, layout))
    return err;
  auto update = readUpdateSignal(call, layout);
  if (!update)
    return update.takeError();
  if (!*update)
    return writeFlag<uint8_t>(call, DType::Bool, 0);
  const TensorView &lrView = *call.in(0);
  if (lrView.getDType() != DType::F32)
    return call.error("lr must be float32");
  auto lr = readScalar(call, lrView, "lr");
  if (!lr)
    return lr.takeError();
  const float negativeLr = -static_cast<float>(*lr);
  for (unsigned i = 0, n = layout.size(); i != n; ++i) {
    float *weight = call.in(layout.paramIndex(i))->getDataAs<float>();
    const float *grad = call.in(layout.gradIndex(i))->getDataAs<float>();
    int64_t elements = call.in(layout.paramIndex(i))->getNumElements();
    parallelFor(call.getNumThreads(), elements, grainFor(kSgdCost),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t k = lo; k < hi; ++k)
                    weight[k] = weight[k] + negativeLr * grad[k];
                });
  }
  return writeFlag<uint8_t>(call, DType::Bool, 1);
}

} // namespace

void cpu::registerOptimizerKernels(KernelTable &table) {
  // Only lr (and AdamW's step) are required up front; update_signal's slot
  // may be empty and the groups are checked by the kernels.
  table.add(kMsDomain, "AdamWOptimizer", adamWKernel, KernelMode::Native);
  table.setPrepare(kMsDomain, "AdamWOptimizer", prepareAdamW);
  table.add(kMsDomain, "SGDOptimizerV2", sgdKernel, KernelMode::Native);
  table.setPrepare(kMsDomain, "SGDOptimizerV2", prepareSgd);
}
