//===- MinCut.cpp - Minimum s-t cut by maximum flow -----------------------===//
//
// Dinic's algorithm: breadth-first levels, then blocking flows along level
// edges with a per-vertex cursor. The augmenting walk is iterative, so deep
// forward graphs (thousands of layers) cannot overflow the stack.
//
//===----------------------------------------------------------------------===//

#include "passes/recompute/MinCut.h"

#include <algorithm>
#include <cassert>
#include <deque>

using namespace gmopt;

void FlowNetwork::addEdge(uint32_t from, uint32_t to, uint64_t capacity) {
  assert(from < firstEdge.size() && to < firstEdge.size());
  capacity = std::min(capacity, kInfinite);
  edges.push_back({to, firstEdge[from], capacity});
  firstEdge[from] = edges.size() - 1;
  edges.push_back({from, firstEdge[to], 0});
  firstEdge[to] = edges.size() - 1;
}

bool FlowNetwork::buildLevels(uint32_t source, uint32_t sink) {
  level.assign(firstEdge.size(), -1);
  std::deque<uint32_t> queue{source};
  level[source] = 0;
  while (!queue.empty()) {
    uint32_t vertex = queue.front();
    queue.pop_front();
    for (int32_t e = firstEdge[vertex]; e != -1; e = edges[e].next)
      if (edges[e].residual && level[edges[e].to] < 0) {
        level[edges[e].to] = level[vertex] + 1;
        queue.push_back(edges[e].to);
      }
  }
  return level[sink] >= 0;
}

uint64_t FlowNetwork::push(uint32_t source, uint32_t sink, uint64_t limit) {
  // One augmenting path along level edges, found by an explicit stack.
  std::vector<int32_t> path;
  uint32_t vertex = source;
  while (true) {
    if (vertex == sink) {
      uint64_t amount = limit;
      for (int32_t e : path)
        amount = std::min(amount, edges[e].residual);
      for (int32_t e : path) {
        edges[e].residual -= amount;
        edges[e ^ 1].residual += amount;
      }
      return amount;
    }
    int32_t &e = cursor[vertex];
    while (e != -1 &&
           !(edges[e].residual && level[edges[e].to] == level[vertex] + 1))
      e = edges[e].next;
    if (e != -1) {
      path.push_back(e);
      vertex = edges[e].to;
      continue;
    }
    // Dead end: retreat and never try this vertex again in this phase.
    level[vertex] = -1;
    if (path.empty())
      return 0;
    int32_t back = path.back();
    path.pop_back();
    vertex = edges[back ^ 1].to;
    cursor[vertex] = edges[cursor[vertex]].next;
  }
}

uint64_t FlowNetwork::maxFlow(uint32_t source, uint32_t sink) {
  uint64_t total = 0;
  while (total < kInfinite && buildLevels(source, sink)) {
    cursor = firstEdge;
    while (uint64_t amount = push(source, sink, kInfinite)) {
      total = std::min(kInfinite, total + amount);
      if (total >= kInfinite)
        break;
    }
  }
  // The source side of the cut: reachable in the residual network.
  sourceSide.assign(firstEdge.size(), false);
  std::deque<uint32_t> queue{source};
  sourceSide[source] = true;
  while (!queue.empty()) {
    uint32_t vertex = queue.front();
    queue.pop_front();
    for (int32_t e = firstEdge[vertex]; e != -1; e = edges[e].next)
      if (edges[e].residual && !sourceSide[edges[e].to]) {
        sourceSide[edges[e].to] = true;
        queue.push_back(edges[e].to);
      }
  }
  return total;
}
