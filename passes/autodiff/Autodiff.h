//===- Autodiff.h - Build the training step from a forward model -*- C++ -*-===//
//
// `autodiff{loss=KIND[:OUTPUT[,TARGET]], frozen=NAMES, trainable=NAMES,
// data=NAMES}` turns a forward model (an exporter's graph with weights as
// initializers, or ONNX Runtime's eval_model.onnx with weights as inputs and
// the loss included) into a training graph of the same shape as ONNX Runtime's
// training_model.onnx, so every later pass, the optimizer builder, the
// planner and the runtimes treat it like an imported one:
//
//   1. Loss. KIND `output` takes the model's scalar output OUTPUT (default:
//      the first one-element float output); `cross-entropy` appends
//      SoftmaxCrossEntropyLoss(OUTPUT, TARGET) (logits of rank > 2 are
//      flattened to [-1, classes], as torch's CrossEntropyLoss over
//      `logits.view(-1, C)`); `mse`, `l1` and `bce-with-logits` append the
//      mean of the elementwise loss. TARGET defaults to the graph input
//      `labels` (cross-entropy) or `target`, created when absent (unless an
//      input has a name that differs only in case or by two letters or
//      fewer: that is taken for a misspelling and refused). The target is a
//      data input, always. The loss becomes the only graph output before
//      the accumulators' flags.
//   2. Parameters. Data inputs are the loss target, those named by `data`,
//      else the non-float inputs and those named `input*`, `labels`,
//      `target*`. With `trainable`, exactly the values it names are
//      trained. Otherwise every other float graph input, and every float
//      initializer of more than one element, is a trainable parameter
//      unless `frozen` names it — except literals and masks: a `Constant`
//      node's value (Value::isLiteral; an exporter's causal mask, rotary
//      table or zero attention bias) is not a weight, nor is an initializer
//      holding an infinity or a magnitude of 1e30 or more (a folded
//      additive mask). Single numbers are the exporter's constants (a Pow
//      exponent). Naming a data input or the target in `frozen` or
//      `trainable` is an error. Trainable initializers become graph inputs
//      (their data kept as the default), as in ONNX Runtime's artifacts;
//      frozen ones (buffers such as rotary tables) stay constants. A
//      candidate on no differentiable path to the loss (a dropout ratio,
//      BatchNorm running statistics) gets no gradient: it is a frozen
//      parameter (an initializer stays one).
//   3. Forward rewrites (ONNX Runtime's, before its gradient builder). With
//      train-mode (the default) Dropout's training_mode is switched on and
//      BatchNormalization becomes BatchNormInternal, which outputs the
//      saved batch statistics; rules add the results their gradient ops
//      read (a Dropout's mask, SoftmaxCrossEntropyLoss's log-probabilities,
//      LayerNormalization's mean and inverse deviation, MaxPool's indices)
//      so the backward pass reads saved values.
//   4. Backward. Activity analysis keeps only values that depend on a
//      trainable parameter through differentiable operands and that the
//      loss depends on; the forward nodes are visited in reverse and each
//      rule of passes/autodiff/GradientRules.h emits its gradient
//      (Phase::Backward), seeded by the initializer `<loss>_grad` (1). A value
//      with several consumers gets the Sum of their contributions.
//   5. Accumulation. Each trainable P gets `P_grad`, the input
//      `P_grad.accumulation.buffer`, a com.microsoft InPlaceAccumulatorV2
//      (buffer, P_grad, lazy_reset_grad) in Phase::Optimizer whose flag
//      `P_grad.accumulation.out` is a graph output, and its entry in the
//      training signature (data inputs, loss, seed, lazy_reset_grad too).
//
// Errors (a model that is already a training graph, unknown names, a loss
// that is not a float scalar, an op on the gradient path with no rule) are
// llvm::Errors naming the value or node.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_AUTODIFF_AUTODIFF_H
#define GMOPT_PASSES_AUTODIFF_AUTODIFF_H

#include "passes/Pass.h"

#include <string>

namespace gmopt {

/// How the loss is formed from the model's outputs.
enum class LossKind : uint8_t {
  /// The model outputs its scalar loss.
  Output,
  /// Softmax cross-entropy of logits against integer class labels.
  CrossEntropy,
  /// Mean squared error against a float target.
  MeanSquaredError,
  /// Binary cross-entropy of logits against a float target in [0, 1].
  BceWithLogits,
  /// Mean absolute error against a float target.
  L1,
};

/// A parsed `KIND[:OUTPUT[,TARGET]]`.
struct LossSpec {
  LossKind kind = LossKind::Output;
  /// The model output the loss reads; empty picks the default.
  std::string output;
  /// The target (labels) input; empty picks the default.
  std::string target;
};

/// Parses `KIND[:OUTPUT[,TARGET]]` (KIND: output, cross-entropy, mse,
/// bce-with-logits, l1).
llvm::Expected<LossSpec> parseLossSpec(llvm::StringRef text);

/// The `autodiff` pass (see the file comment).
class AutodiffPass : public Pass {
public:
  /// Tunables; each is a pipeline option.
  struct Options {
    /// `KIND[:OUTPUT[,TARGET]]`.
    std::string loss = "output";
    /// Comma-separated parameter names that get no gradient.
    std::string frozen;
    /// Comma-separated parameter names to train, the explicit list: every
    /// other float input or initializer gets no gradient. Empty: the rule
    /// of step 2 in the file comment.
    std::string trainable;
    /// Comma-separated data input names; empty: non-float inputs and
    /// those named `input*`, `labels`, `target*`.
    std::string data;
    /// Run the forward ops in training mode, as torch's model.train() and
    /// ONNX Runtime's training graph do: Dropout's training_mode switched
    /// on, BatchNormalization on batch statistics (BatchNormInternal).
    /// ONNX Runtime's eval_model.onnx has both switched off.
    bool trainMode = true;
  };

  /// A pass with the default options.
  AutodiffPass();
  explicit AutodiffPass(Options options);

  llvm::StringRef getName() const override { return "autodiff"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_AUTODIFF_AUTODIFF_H
