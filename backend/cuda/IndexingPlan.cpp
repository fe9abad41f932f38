//===- IndexingPlan.cpp - Building the CUDA kernels' index arithmetic -----===//
//
// Broadcast strides, dimension collapsing, and Tile's and Pad's copies for
// BroadcastIndexing (see IndexingPlan.h). Compiled in every build so its tests
// run without the CUDA toolkit.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/IndexingPlan.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

using namespace gmopt;
using namespace gmopt::cuda;

IndexVector cuda::contiguousStrides(llvm::ArrayRef<int64_t> shape) {
  IndexVector strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

bool cuda::broadcastStrides(llvm::ArrayRef<int64_t> operand,
                            llvm::ArrayRef<int64_t> out, IndexVector &strides) {
  if (operand.size() > out.size())
    return false;
  IndexVector padded(out.size() - operand.size(), 1);
  padded.append(operand.begin(), operand.end());
  IndexVector own = contiguousStrides(padded);
  strides.assign(out.size(), 0);
  for (size_t d = 0; d < out.size(); ++d) {
    if (padded[d] == out[d])
      strides[d] = padded[d] == 1 ? 0 : own[d];
    else if (padded[d] != 1)
      return false;
  }
  return true;
}

bool cuda::collapseIndexing(IndexVector extents,
                            llvm::SmallVector<IndexVector, 4> strides,
                            BroadcastIndexing &ix) {
  assert(strides.size() <= 4 && "four slots at most");
  for (IndexVector &s : strides) {
    assert(s.size() == extents.size() && "one stride per dimension");
    (void)s;
  }
  // Unit dimensions step nowhere: drop them (keeping at least one).
  for (int d = static_cast<int>(extents.size()) - 1; d >= 0; --d)
    if (extents[d] == 1 && extents.size() > 1) {
      extents.erase(extents.begin() + d);
      for (IndexVector &s : strides)
        s.erase(s.begin() + d);
    }
  // Merge d with d + 1 where every slot steps evenly across both.
  for (int d = static_cast<int>(extents.size()) - 2; d >= 0; --d) {
    bool mergeable = llvm::all_of(strides, [&](const IndexVector &s) {
      return s[d] == s[d + 1] * extents[d + 1];
    });
    if (!mergeable)
      continue;
    extents[d] *= extents[d + 1];
    extents.erase(extents.begin() + d + 1);
    for (IndexVector &s : strides) {
      s[d] = s[d + 1];
      s.erase(s.begin() + d + 1);
    }
  }
  if (extents.size() > static_cast<size_t>(kMaxRank))
    return false;
  ix = BroadcastIndexing();
  ix.rank = static_cast<int32_t>(extents.size());
  for (size_t d = 0; d < extents.size(); ++d)
    ix.extent[d] = extents[d];
  for (size_t slot = 0; slot < 4; ++slot) {
    if (slot >= strides.size() || extents.empty()) {
      // A missing slot reads element 0; a rank-0 space has one element.
      ix.flat[slot] = true;
      ix.stride[slot][0] = slot < strides.size() ? 1 : 0;
      continue;
    }
    for (size_t d = 0; d < extents.size(); ++d)
      ix.stride[slot][d] = strides[slot][d];
    // One dimension with stride 1 (contiguous) or 0 (scalar): linear.
    ix.flat[slot] =
        extents.size() == 1 && (strides[slot][0] == 1 || strides[slot][0] == 0);
  }
  return true;
}

bool cuda::tileIndexing(llvm::ArrayRef<int64_t> in,
                        llvm::ArrayRef<int64_t> repeats,
                        BroadcastIndexing &ix) {
  if (in.size() != repeats.size() ||
      llvm::any_of(repeats, [](int64_t r) { return r < 0; }))
    return false;
  IndexVector out;
  for (size_t d = 0; d < in.size(); ++d)
    out.push_back(in[d] * repeats[d]);
  IndexVector inStrides = contiguousStrides(in);
  IndexVector outStrides = contiguousStrides(out);
  IndexVector extents, inSlot, outSlot;
  for (size_t d = 0; d < in.size(); ++d) {
    extents.append({repeats[d], in[d]});
    inSlot.append({0, inStrides[d]});
    outSlot.append({in[d] * outStrides[d], outStrides[d]});
  }
  IndexVector none(extents.size(), 0);
  return collapseIndexing(extents, {inSlot, none, none, outSlot}, ix);
}

bool cuda::padCopy(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> out,
                   llvm::ArrayRef<int64_t> begin, PadCopy &copy) {
  if (in.size() != out.size() || in.size() != begin.size())
    return false;
  IndexVector inStrides = contiguousStrides(in);
  IndexVector outStrides = contiguousStrides(out);
  copy = PadCopy();
  for (size_t d = 0; d < in.size(); ++d) {
    int64_t inStart = std::max<int64_t>(-begin[d], 0);
    int64_t outStart = std::max<int64_t>(begin[d], 0);
    int64_t extent = std::min(in[d] - inStart, out[d] - outStart);
    copy.extents.push_back(std::max<int64_t>(extent, 0));
    copy.inOffset += inStart * inStrides[d];
    copy.outOffset += outStart * outStrides[d];
  }
  return true;
}

bool cuda::padIndexing(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> out,
                       llvm::ArrayRef<int64_t> begin, PadMode mode,
                       PadIndexing &ix) {
  if (in.size() != out.size() || in.size() != begin.size() ||
      in.size() > static_cast<size_t>(kMaxRank))
    return false;
  IndexVector inStrides = contiguousStrides(in);
  ix = PadIndexing();
  ix.rank = static_cast<int32_t>(in.size());
  ix.mode = mode;
  for (size_t d = 0; d < in.size(); ++d) {
    if (mode != PadMode::Constant && in[d] == 0 && out[d] > 0)
      return false;
    ix.outExtent[d] = out[d];
    ix.inExtent[d] = in[d];
    ix.inStride[d] = inStrides[d];
    ix.begin[d] = begin[d];
  }
  return true;
}
