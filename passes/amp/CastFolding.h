//===- CastFolding.h - Peephole patterns over Cast chains -------*- C++ -*-===//
//
// Mixed precision inserts Casts at every precision boundary; exporters
// already write Casts of their own (masks to float, float to the loss's
// type). Two patterns remove the redundant ones:
//
//   * fold-cast-pair: z = Cast(Cast(x, to=T1), to=T2) where the inner cast
//     is exact (T1 holds every value of x's type: f16/bf16 -> f32 -> f64,
//     a widening integer cast, any type to itself) reads x directly:
//     z = Cast(x, to=T2). A narrowing inner cast rounds, so the pair
//     Cast(Cast(x: f32, to=f16), to=f32) is never folded.
//   * remove-identity-cast: z = Cast(x, to=type(x)) is x. Names move as for
//     Identity removal (Canonicalize.h): a graph output keeps its Cast
//     unless x can take its name.
//
// Both run in canonicalize (option fold-casts) and in the amp pass. The
// pair fold changes the outer Cast in place, and the greedy driver
// revisits it, so a chain of any length collapses to one Cast or none.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_AMP_CASTFOLDING_H
#define GMOPT_PASSES_AMP_CASTFOLDING_H

#include "passes/PatternRewriter.h"

#include "ir/Types.h"

namespace gmopt {

/// True if casting from \p from to \p to is exact for every value of
/// \p from (so casting back recovers the value).
bool isExactCast(DType from, DType to);

/// The pattern names, as counted in GreedyRewriteResult.
inline constexpr llvm::StringLiteral kFoldCastPairPattern = "fold-cast-pair";
inline constexpr llvm::StringLiteral kRemoveIdentityCastPattern =
    "remove-identity-cast";

/// `Cast(Cast(x, exact), to=T2)` -> `Cast(x, to=T2)`.
class FoldCastPair : public RewritePattern {
public:
  FoldCastPair() : RewritePattern(kFoldCastPairPattern) {}
  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override;
};

/// `Cast(x, to=type(x))` -> `x`.
class RemoveIdentityCast : public RewritePattern {
public:
  RemoveIdentityCast() : RewritePattern(kRemoveIdentityCastPattern) {}
  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override;
};

} // namespace gmopt

#endif // GMOPT_PASSES_AMP_CASTFOLDING_H
