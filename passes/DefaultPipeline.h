//===- DefaultPipeline.h - The pipeline gmopt-compile runs ------*- C++ -*-===//
//
// The one place that defines what `gmopt-compile` does when --passes is not
// given. It grows with the passes as they land, towards the design's
// `canonicalize,tie-weights,amp,recompute,schedule,plan-buffers`: the graph
// rewrites (fold-transpose, tie-weights, amp, recompute) slot in after
// canonicalize and before schedule, because schedule orders the final graph
// and plan-buffers plans that order; both must stay last. fold-transpose
// comes first among the rewrites: a transposed weight it removes is one
// activation fewer for recompute and the planner to keep; fold-scale then
// takes attention's scalar scales into the products. Selective recompute
// joined when its CPU step time came within 5% of the unrewritten step's
// (bench/recompute_step_time.py). fuse-attention (after fold-scale, which
// it expects folded) keeps one log-sum-exp per row instead of the
// sequence-squared probabilities; its CPU step was 0.93-1.02x the unfused
// one (bench/README.md). fuse-cross-entropy in forward-gradient mode keeps
// one token chunk of logits instead of the [N, V] log-probabilities and
// gradient, with the unfused kernels and FLOPs (its recompute mode would
// add 9% FLOPs on GPT-2 small). pack-dropout-masks stores the masks
// selective recompute keeps as bits, losslessly. On GPT-2 small 8 x 1024
// these take the planned peak from 0.381x to 0.255x of the eager baseline
// at 2.2% more FLOPs than it, and its CPU step at 1 x 1024 (one thread)
// was 0.95-0.96x the previous default's (bench/README.md, "Default
// pipeline").
// Only registered passes may appear here (PassManagerTest checks that it
// parses).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_DEFAULTPIPELINE_H
#define GMOPT_PASSES_DEFAULTPIPELINE_H

#include "llvm/ADT/StringRef.h"

namespace gmopt {

/// The default compilation pipeline, as pipeline text.
constexpr llvm::StringLiteral kDefaultPipeline =
    "canonicalize,fold-transpose,fold-scale,fuse-attention,"
    "fuse-cross-entropy{mode=forward-gradient},pack-dropout-masks,"
    "recompute{mode=selective},schedule,plan-buffers";

} // namespace gmopt

#endif // GMOPT_PASSES_DEFAULTPIPELINE_H
