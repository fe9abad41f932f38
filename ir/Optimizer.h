//===- Optimizer.h - Building and importing the in-graph optimizer -*- C++ -*-===//
//
// The optimizer is part of the training module: one com.microsoft
// AdamWOptimizer or SGDOptimizerV2 node at the end of the graph updates
// every trainable parameter (and AdamW's moments) in place. This header
// says what that optimizer is (OptimizerSpec), builds it into a module
// (buildOptimizer, shared by `--optimizer=adamw|sgd` and by the merge of
// ONNX Runtime's optimizer_model.onnx), reads the spec back from a module,
// and imports it from an optimizer_model.onnx.
//
// What buildOptimizer adds, and how the runtime drives it:
//  - graph inputs `learning_rate` (f32[1]) and, for AdamW, `step`
//    (i64[1]). The runtime feeds both before every optimizer step: the
//    learning rate (so a schedule can drive it) and, as ONNX Runtime's
//    training API does, step = (updates done so far) + 1;
//  - per trainable parameter P (AdamW), persistent zero-initialized graph
//    inputs `P.momentum0` and `P.momentum1` (ONNX Runtime's state names),
//    plan category optimizer_state, as is the step count;
//  - graph input `optimizer.update_signal` (bool[1]) in the op's
//    update_signal slot. Gradient accumulation: the optimizer node runs in
//    every micro-step, and the runtime sets the signal true on the last
//    micro-step of an optimizer step only, so the update fires once, after
//    the last accumulation (a false signal leaves weights and moments alone
//    and makes the flag 0). Mixed precision can AND its overflow check into
//    the same slot;
//  - the node reads each parameter's gradient from its accumulation buffer
//    when it has one (ONNX Runtime's optimizer reads the accumulated
//    gradient buffers), else from its gradient value; its flag result is a
//    graph output `optimizer.updated_flag`.
// The training signature records these values and is what the planner, the
// runtime and checkpoints read (names are labels only): each parameter's
// ParamInfo::optimizerState holds its moments, StepSlot::StepCount the step
// count and StepSlot::LearningRate the learning rate; the verifier checks
// that an optimizer node updating a signature parameter agrees with them.
// The update signal has no slot: it is read off the node (OptimizerOperands).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPTIMIZER_H
#define GMOPT_IR_OPTIMIZER_H

#include "ir/OptimizerOps.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace gmopt {

class Module;
class Node;

/// An in-graph optimizer and its hyper-parameters (the op's attributes).
/// The defaults are those of the AdamW block of ONNX Runtime's
/// generate_artifacts (onnxblock.optim.AdamW), i.e. the optimizer_model.onnx
/// of every testdata model; the op's own attribute defaults differ
/// (epsilon 1e-8, weight_decay 0.01, adam_mode 0).
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::AdamW;
  /// AdamW `alpha`: first-moment decay (beta1).
  float alpha = 0.9f;
  /// AdamW `beta`: second-moment decay (beta2).
  float beta = 0.999f;
  /// AdamW `epsilon`, added to the denominator.
  float epsilon = 1e-6f;
  /// AdamW `weight_decay`.
  float weightDecay = 0.0f;
  /// AdamW `correct_bias`: 1 applies bias correction.
  int64_t correctBias = 1;
  /// AdamW `adam_mode`: 0 PyTorch (decay first, corrections on the
  /// moments), 1 Hugging Face (corrections in the learning rate, decay
  /// last).
  int64_t adamMode = 1;

  /// `adamw` or `sgd`.
  llvm::StringRef kindName() const;
  /// One line: `adamw{alpha=0.9, beta=0.999, ...}` or `sgd`.
  std::string str() const;
  /// Errors for attribute values the op does not define (adam_mode not 0
  /// or 1, correct_bias not 0 or 1, a decay outside [0, 1), a negative
  /// epsilon or weight decay).
  llvm::Error validate() const;
};

/// Appends the optimizer \p spec describes to \p module and records its
/// inputs in the training signature (see the file comment). Fails, changing
/// nothing, when the module already has an optimizer node, has no
/// trainable parameter, or a trainable parameter has neither an
/// accumulation buffer nor a gradient, is not fp32 or already has
/// optimizer state, or the signature's learning_rate slot (or, for AdamW,
/// step_count slot) is already taken. Clears the plan. The nodes it adds
/// are Phase::Optimizer. Returns the optimizer node.
llvm::Expected<Node *> buildOptimizer(Module &module,
                                      const OptimizerSpec &spec);

/// The optimizer node of \p module (the first AdamWOptimizer or
/// SGDOptimizerV2), or null.
Node *findOptimizerNode(const Module &module);

/// The graph input the runtime feeds as \p optimizer's update signal: the
/// node's update-signal operand when that is a graph input, or, where
/// mixed precision ANDed its overflow check into the slot (the `amp`
/// pass: `And(signal, is_finite)`), the And's graph-input operand. Null
/// when there is none.
Value *findFedUpdateSignal(const Node &optimizer);

/// The spec of optimizer node \p node (its attributes, with the op's
/// defaults for absent ones).
OptimizerSpec readOptimizerSpec(const Node &node);

/// Imports ONNX Runtime's optimizer_model.onnx from \p bytes (\p fileName
/// in messages): exactly one com.microsoft AdamWOptimizer (graph inputs
/// learning_rate, step, params, gradients, first_order_moments,
/// second_order_moments, in this order, as ONNX Runtime's training API
/// requires) or SGDOptimizerV2 (learning_rate, params, gradients), with
/// tensor-sequence parameter inputs. ir_version up to 10; libonnx's checker
/// is not run (it rejects ir_version 10). Every attribute is read (absent
/// ones take the op's defaults); an unknown attribute or node is an error.
llvm::Expected<OptimizerSpec>
importOptimizerModelBytes(llvm::StringRef bytes, llvm::StringRef fileName);
/// Reads and imports the optimizer model at \p path.
llvm::Expected<OptimizerSpec> importOptimizerModelFile(llvm::StringRef path);

} // namespace gmopt

#endif // GMOPT_IR_OPTIMIZER_H
