//===- MinCut.h - Minimum s-t cut by maximum flow ---------------*- C++ -*-===//
//
// A small Dinic maximum-flow solver over 64-bit capacities, for choosing
// which values to keep: recompute's selective mode cuts the forward graph
// between what must be computed in the forward pass and what the backward
// pass reads, at the least kept bytes (the formulation of PyTorch's min-cut
// partitioner, on gmopt's IR). O(V^2 E) worst case; the forward graphs of
// training steps are sparse DAGs where it runs in near-linear time.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_RECOMPUTE_MINCUT_H
#define GMOPT_PASSES_RECOMPUTE_MINCUT_H

#include <cstdint>
#include <limits>
#include <vector>

namespace gmopt {

/// A flow network with a minimum-cut query.
class FlowNetwork {
public:
  /// A capacity no finite cut reaches.
  static constexpr uint64_t kInfinite = uint64_t(1) << 62;

  explicit FlowNetwork(uint32_t numVertices) : firstEdge(numVertices, -1) {}

  /// Adds the directed edge \p from -> \p to with \p capacity.
  void addEdge(uint32_t from, uint32_t to, uint64_t capacity);
  /// Computes a maximum flow from \p source to \p sink and returns its
  /// value (the capacity of a minimum cut, saturating at kInfinite).
  uint64_t maxFlow(uint32_t source, uint32_t sink);
  /// After maxFlow: true if \p vertex is on the source side of the minimum
  /// cut (reachable from the source in the residual network).
  bool onSourceSide(uint32_t vertex) const { return sourceSide[vertex]; }

private:
  struct Edge {
    uint32_t to;
    int32_t next;
    uint64_t residual;
  };
  bool buildLevels(uint32_t source, uint32_t sink);
  uint64_t push(uint32_t vertex, uint32_t sink, uint64_t limit);

  std::vector<int32_t> firstEdge;
  std::vector<Edge> edges;
  std::vector<int32_t> level;
  std::vector<int32_t> cursor;
  std::vector<bool> sourceSide;
};

} // namespace gmopt

#endif // GMOPT_PASSES_RECOMPUTE_MINCUT_H
