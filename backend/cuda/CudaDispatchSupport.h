//===- CudaDispatchSupport.h - What the CUDA kernel table's entries share -*-
// C++ -*-===//
//
// Internal to backend/cuda: the helpers the kernel table's entries share
// (storage types, shapes, constant operands, broadcast indexing), CudaCall
// (one node being launched), the table's entry type and decodedEntry, which
// makes an entry whose nodes are decoded once, at prepare. CudaDispatch.cpp
// holds the table; each family's Cuda*Dispatch.cpp its entries.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDADISPATCHSUPPORT_H
#define GMOPT_BACKEND_CUDA_CUDADISPATCHSUPPORT_H

#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudaDispatch.h"
#include "backend/cuda/CudaKernelTable.h"
#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/IndexingPlan.h"
#include "ir/ops/Axes.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <cassert>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>

namespace gmopt {
namespace cuda {
namespace dispatch {

using Shape = IndexVector;

/// A page-locked copy of host bytes a prepared kernel owns (a Constant's
/// value, a Shape's extents, a Size, ConcatTraining's lengths), which its
/// launches copy to the device. Made on the first launch (the warm-up step,
/// before any CUDA graph capture; a device-less prepare makes none), it
/// keeps every later copy asynchronous and capturable, which a copy from
/// pageable memory is not reliably. Moves with the plan that owns it.
class PinnedCopy {
public:
  PinnedCopy() = default;
  PinnedCopy(const PinnedCopy &) = delete;
  PinnedCopy &operator=(const PinnedCopy &) = delete;
  PinnedCopy(PinnedCopy &&other) noexcept
      : pinned(std::exchange(other.pinned, nullptr)) {}
  PinnedCopy &operator=(PinnedCopy &&other) noexcept {
    if (this != &other) {
      release();
      pinned = std::exchange(other.pinned, nullptr);
    }
    return *this;
  }
  ~PinnedCopy() { release(); }

  /// Copies \p bytes of \p source to device \p target on \p call's
  /// stream, from the page-locked copy (made from \p source on the first
  /// call; \p source and \p bytes never change for one owner).
  template <typename CallT>
  llvm::Error upload(CallT &call, void *target, const void *source,
                     size_t bytes) const {
    if (!bytes)
      return llvm::Error::success();
    if (!pinned) {
      void *buffer = nullptr;
      if (llvm::Error err =
              call.check(cudaHostAlloc(&buffer, bytes, cudaHostAllocDefault),
                         "cudaHostAlloc (a host constant's page-locked copy)"))
        return err;
      std::memcpy(buffer, source, bytes);
      pinned = buffer;
    }
    return call.check(cudaMemcpyAsync(target, pinned, bytes,
                                      cudaMemcpyHostToDevice, call.ctx.stream),
                      "cudaMemcpyAsync");
  }

private:
  void release() {
    if (pinned)
      cudaFreeHost(pinned);
    pinned = nullptr;
  }
  mutable void *pinned = nullptr;
};

inline llvm::Error nodeError(const Node &node, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "CUDA kernel for '" + node.getOp().str() +
                                     "': " + message + " (node " +
                                     node.describe() + ")");
}

inline std::optional<Storage> storageOf(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return Storage::F32;
  case DType::F16:
    return Storage::F16;
  case DType::BF16:
    return Storage::BF16;
  case DType::F64:
    return Storage::F64;
  case DType::I64:
    return Storage::I64;
  case DType::I32:
    return Storage::I32;
  case DType::Bool:
    return Storage::Bool;
  default:
    return std::nullopt;
  }
}

inline bool isFloatStorage(Storage s) {
  return s == Storage::F32 || s == Storage::F16 || s == Storage::BF16;
}

inline Shape shapeOf(const Value *value) {
  Shape shape;
  for (int64_t d : value->getType().getStaticShape())
    shape.push_back(d);
  return shape;
}

inline int64_t product(llvm::ArrayRef<int64_t> dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

inline int64_t elementBytes(const Value *value) {
  int64_t n = value->getType().getNumElements();
  return n ? static_cast<int64_t>(value->getType().getSizeInBytes() /
                                  static_cast<uint64_t>(n))
           : 0;
}

/// The float storage shared by every present operand and result of \p node
/// (skipping the listed operand / result indices).
inline llvm::Expected<Storage>
commonFloatStorage(const Node &node, llvm::ArrayRef<unsigned> skipOperands = {},
                   llvm::ArrayRef<unsigned> skipResults = {}) {
  std::optional<Storage> common;
  auto visit = [&](const Value *value) -> llvm::Error {
    if (!value)
      return llvm::Error::success();
    std::optional<Storage> s = storageOf(value->getType().getDType());
    if (!s || !isFloatStorage(*s))
      return nodeError(node, "element type " +
                                 dtypeName(value->getType().getDType()) +
                                 " is not supported (f32, f16, bf16)");
    if (common && *common != *s)
      return nodeError(node, "operands mix element types");
    common = s;
    return llvm::Error::success();
  };
  for (unsigned i = 0; i < node.getNumOperands(); ++i)
    if (!llvm::is_contained(skipOperands, i))
      if (llvm::Error err = visit(node.getOperand(i)))
        return err;
  for (unsigned i = 0; i < node.getNumResults(); ++i)
    if (!llvm::is_contained(skipResults, i))
      if (llvm::Error err = visit(node.getResult(i)))
        return err;
  if (!common)
    return nodeError(node, "no float operand");
  return *common;
}

/// The values of operand \p index, which must be an integer initializer.
inline llvm::Expected<std::vector<int64_t>>
constantInts(const Node &node, unsigned index, llvm::StringRef what) {
  const Value *value =
      index < node.getNumOperands() ? node.getOperand(index) : nullptr;
  if (!value)
    return nodeError(node, what + " is missing");
  if (!value->isInitializer())
    return nodeError(node, what +
                               " must be a constant (an initializer) for the "
                               "CUDA kernels");
  if (llvm::Error err = value->getData().load())
    return err;
  return value->getData().getIntValues();
}

/// ops::normalizeAxis (ir/ops/Axes.h) against the node; a rank-0 tensor
/// also takes axis 0 (the kernels read a scalar as one element).
inline llvm::Expected<int64_t> normalizeAxis(const Node &node, int64_t axis,
                                             int64_t rank) {
  if (rank == 0 && axis == 0)
    return 0;
  if (std::optional<unsigned> normalized = ops::normalizeAxis(axis, rank))
    return *normalized;
  return nodeError(node, ops::axisOutOfRange("axis", axis, rank));
}

//===----------------------------------------------------------------------===//
// Broadcast indexing
//===----------------------------------------------------------------------===//

/// Indexing of an n-ary broadcast of \p operands to a contiguous \p out.
inline llvm::Expected<BroadcastIndexing>
broadcastIndexing(const Node &node, llvm::ArrayRef<Shape> operands,
                  llvm::ArrayRef<int64_t> out) {
  llvm::SmallVector<IndexVector, 4> strides;
  for (const Shape &operand : operands) {
    Shape s;
    if (!broadcastStrides(operand, out, s))
      return nodeError(node, "operand shapes do not broadcast to the output");
    strides.push_back(s);
  }
  while (strides.size() < 3)
    strides.push_back(Shape(out.size(), 0));
  strides.push_back(contiguousStrides(out));
  BroadcastIndexing ix;
  if (!collapseIndexing(Shape(out.begin(), out.end()), strides, ix))
    return nodeError(node, "more than " + llvm::Twine(kMaxRank) +
                               " dimensions after collapsing");
  return ix;
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

/// One node being launched.
struct CudaCall {
  const Node &node;
  const NodeLaunch &launch;
  CudaKernelContext &ctx;
  /// What the entry's prepare decoded (null for entries without one).
  const CudaKernelDescriptor *descriptor = nullptr;

  /// The descriptor, as the entry's own type.
  template <typename T> const T &getDescriptor() const {
    assert(descriptor && "the entry prepared a descriptor");
    return static_cast<const T &>(*descriptor);
  }

  const Value *in(unsigned i) const {
    return i < node.getNumOperands() ? node.getOperand(i) : nullptr;
  }
  const Value *out(unsigned i) const {
    return i < node.getNumResults() ? node.getResult(i) : nullptr;
  }
  const void *inPtr(unsigned i) const {
    return i < launch.operands.size() ? launch.operands[i] : nullptr;
  }
  void *outPtr(unsigned i) const {
    return i < launch.results.size() ? launch.results[i] : nullptr;
  }
  template <typename T> const T *inAs(unsigned i) const {
    return static_cast<const T *>(inPtr(i));
  }
  template <typename T> T *outAs(unsigned i) const {
    return static_cast<T *>(outPtr(i));
  }
  /// Turns a launch status into an error naming \p what and the node.
  llvm::Error check(cudaError_t status, llvm::StringRef what) const {
    if (status == cudaSuccess)
      return llvm::Error::success();
    return cudaCallError(node, what, status);
  }
  /// Makes the next faulting kernel record this launch.
  llvm::Error markFaultable() const {
    return check(setKernelLaunchId(ctx.launchId, ctx.stream),
                 "cudaMemcpyToSymbolAsync (launch id)");
  }
};

/// Scratch of \p bytes for one launch: the node's planned workspace slice,
/// or in an eager run stream-ordered memory from the device's pool (part
/// of the baseline's measured high-water mark), freed after the launches
/// enqueued before release.
class LaunchScratch {
public:
  static llvm::Expected<LaunchScratch> acquire(CudaCall &call, uint64_t bytes) {
    LaunchScratch scratch;
    if (call.launch.planned) {
      if (call.launch.workspaceBytes < bytes || !call.launch.workspace)
        return nodeError(call.node,
                         llvm::formatv("needs {0} bytes of workspace and the "
                                       "plan gave it {1}: compile it for the "
                                       "CUDA workspace model",
                                       bytes, call.launch.workspaceBytes));
      scratch.address = call.launch.workspace;
      return scratch;
    }
    if (!call.ctx.scratchPool)
      return nodeError(call.node, "an eager run without the device's pool");
    if (llvm::Error err = call.check(
            cudaMallocFromPoolAsync(&scratch.address, bytes ? bytes : 1,
                                    call.ctx.scratchPool, call.ctx.stream),
            "cudaMallocFromPoolAsync (the node's scratch)"))
      return err;
    scratch.owned = true;
    return scratch;
  }
  void *get() const { return address; }
  llvm::Error release(CudaCall &call) {
    if (!owned)
      return llvm::Error::success();
    owned = false;
    return call.check(cudaFreeAsync(address, call.ctx.stream),
                      "cudaFreeAsync (the node's scratch)");
  }

private:
  void *address = nullptr;
  bool owned = false;
};

/// Decides whether a node can run (no device needed).
using CheckFn = llvm::Error (*)(const Node &);
/// Enqueues one launch.
using RunFn = llvm::Error (*)(CudaCall &);
/// Decodes a node once for all its launches (the decision of CheckFn
/// included).
using PrepareFn = llvm::Expected<std::unique_ptr<CudaKernelDescriptor>> (*)(
    const Node &, const KernelPreparation &, CudaKernelContext &);

/// One op's CUDA kernel.
struct KernelEntry {
  CheckFn check;
  RunFn run;
  /// When set, preparing a node calls it instead of check and each launch
  /// gets its descriptor (CudaCall::descriptor); null: run decodes.
  PrepareFn prepare = nullptr;
  /// The planned scratch of a node (null: none). Not registered by the
  /// families: the table takes it from its scratch column
  /// (CudaKernelTable.h), which the planner reads without the toolkit.
  ScratchFn scratch = nullptr;
  /// prepare needs the device's context (a cuBLASLt heuristic query):
  /// prepareCudaKernelOnHost runs check instead.
  bool preparesOnDevice = false;
};

/// What a decoded-once entry keeps: the value its Decode function built.
template <typename T> struct DecodedKernel final : CudaKernelDescriptor {
  explicit DecodedKernel(T value) : value(std::move(value)) {}
  T value;
};

/// The entry of an op whose nodes are decoded once: Decode reads the node
/// (attributes, static shapes, element types; refusing what the kernels
/// cannot run) into a T when the node is prepared, and Launch enqueues a
/// launch from the T and the launch's addresses alone. The check is the
/// decode with its result dropped.
template <typename T, llvm::Expected<T> (*Decode)(const Node &),
          llvm::Error (*Launch)(CudaCall &, const T &)>
KernelEntry decodedEntry() {
  KernelEntry entry;
  entry.check = [](const Node &node) -> llvm::Error {
    return Decode(node).takeError();
  };
  entry.prepare = [](const Node &node, const KernelPreparation &,
                     CudaKernelContext &)
      -> llvm::Expected<std::unique_ptr<CudaKernelDescriptor>> {
    auto value = Decode(node);
    if (!value)
      return value.takeError();
    return std::make_unique<DecodedKernel<T>>(std::move(*value));
  };
  entry.run = [](CudaCall &call) -> llvm::Error {
    return Launch(call, call.getDescriptor<DecodedKernel<T>>().value);
  };
  return entry;
}

/// Adds \p entry to \p table as (\p domain, \p op)'s kernel.
inline void addEntry(llvm::StringMap<KernelEntry> &table,
                     llvm::StringRef domain, llvm::StringRef op,
                     KernelEntry entry) {
  table[(domain + "::" + op).str()] = entry;
}

inline llvm::Error checkAnyElement(const Node &node) {
  for (const Value *value : node.getResults())
    if (value) {
      int64_t bytes = elementBytes(value);
      if (value->getType().getNumElements() && bytes != 1 && bytes != 2 &&
          bytes != 4 && bytes != 8)
        return nodeError(node, "element type " +
                                   dtypeName(value->getType().getDType()) +
                                   " is not supported");
    }
  return llvm::Error::success();
}

/// Adds the elementwise entries (CudaElementwiseDispatch.cpp) to the table.
void addElementwiseKernels(llvm::StringMap<KernelEntry> &table);

/// Adds the data-movement entries (copies and views, Transpose, Expand,
/// Tile, Pad, Slice(Grad), Concat, Split, Shape, Where, comparisons,
/// ConstantOfShape, Cast) to the table.
void addMovementKernels(llvm::StringMap<KernelEntry> &table);

/// Adds the CNN entries (Conv, ConvGrad and batch norm on cuDNN; the pools
/// and their gradients on CnnKernels.cu) to the table (CudnnDispatch.cpp).
void addCnnKernels(llvm::StringMap<KernelEntry> &table);
/// Adds gmopt's collectives (all-reduces, ZeRO's reduce-scatter, all-gather and
/// shard; CudaCollectiveDispatch.cpp) to the table.
void addCollectiveKernels(llvm::StringMap<KernelEntry> &table);
/// Adds the indexing entries (CudaIndexDispatch.cpp) to the table.
void addIndexKernels(llvm::StringMap<KernelEntry> &table);
/// Adds ZeroGradient, PassThrough and InPlaceAccumulator
/// (CudaTrainingDispatch.cpp) to the table.
void addTrainingKernels(llvm::StringMap<KernelEntry> &table);
/// Adds IsFinite, IsAllFinite and MixedPrecisionScale
/// (CudaScalingDispatch.cpp) to the table.
void addScalingKernels(llvm::StringMap<KernelEntry> &table);
/// Adds the losses (SoftmaxCrossEntropyLoss and its gradient,
/// NegativeLogLikelihoodLoss, the dense SoftmaxCrossEntropy and its
/// gradient; CudaLossDispatch.cpp) to the table.
void addLossKernels(llvm::StringMap<KernelEntry> &table);
/// Adds Dropout, BitmaskDropout, BiasDropout and the dropout gradients
/// (CudaDropoutDispatch.cpp) to the table.
void addDropoutKernels(llvm::StringMap<KernelEntry> &table);
/// Adds Constant, Range, Trilu, OneHot, NonZero, BroadcastGradientArgs and
/// Einsum (CudaShapeDispatch.cpp) to the table.
void addShapeKernels(llvm::StringMap<KernelEntry> &table);
/// Adds Resize and ResizeGrad (CudaResizeDispatch.cpp) to the table.
void addResizeKernels(llvm::StringMap<KernelEntry> &table);
/// Adds gmopt's fused attention and fused linear cross entropy, forward
/// and backward (CudaFusedDispatch.cpp), to the table.
void addFusedKernels(llvm::StringMap<KernelEntry> &table);

/// A dropout-like node's random stream, ratio and training mode, decoded
/// once (CudaDropoutDispatch.cpp; the fused attention's dropout too).
struct DropoutMode {
  /// The node's random stream (Node::getStreamId); 0 for a gradient, which
  /// draws nothing.
  uint64_t streamId = 0;
  /// A constant ratio (checked to lie in [0, 1)), or -1 when the kernel
  /// reads the ratio operand on the device.
  float ratioValue = -1;
  std::optional<unsigned> ratioOperand;
  /// The training_mode operand, read on the device; none: the op never
  /// drops.
  std::optional<unsigned> trainingOperand;
};

/// Decodes the mode of \p node, whose ratio and training-mode operands are
/// \p ratioIndex and \p trainingIndex (absent ratio: the `ratio`
/// attribute, else 0.5); \p random: the node draws, so it must have a
/// stream id.
llvm::Expected<DropoutMode> decodeDropoutMode(const Node &node,
                                              unsigned ratioIndex,
                                              unsigned trainingIndex,
                                              bool random);
/// The kernels' DropoutParams of one launch of \p call: \p mode with the
/// run's seed and step and the launch's operand addresses.
DropoutParams dropoutParams(const CudaCall &call, const DropoutMode &mode);

/// Adds the Reduce* family, ArgMax / ArgMin, InstanceNormalization,
/// InvertibleLayerNormalizationGrad and DivGrad (CudaReduceDispatch.cpp) to
/// the table.
void addReduceKernels(llvm::StringMap<KernelEntry> &table);

} // namespace dispatch
} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDADISPATCHSUPPORT_H
