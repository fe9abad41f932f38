//===- CudaIndexDispatch.cpp - The CUDA kernel table's indexing entries ---===//
//
// The entries of the indexing group: GatherElements, GatherND (batch_dims),
// ScatterElements and ScatterND (reductions none / add / mul / max / min),
// com.microsoft GatherElementsGrad and GatherNDGrad, and Size. Geometry is
// decoded from the static shapes into IndexMath.h's ElementIndexing /
// NDIndexing with the CPU kernels' checks (backend/cpu/GatherKernels.cpp),
// so a node the CPU would refuse is refused here at prepare time; indices
// only the device sees are checked on the device (a fault naming the node).
// Scatters copy data into the output (or zero it, for the gradients) and
// then launch the scatter on it. Each node is decoded once, when it is
// prepared, into an IndexPlan its launches read.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/IndexKernels.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

llvm::Expected<bool> indices32Of(const Node &node, const Value *indices) {
  DType type = indices->getType().getDType();
  if (type != DType::I64 && type != DType::I32)
    return nodeError(node, "indices must be int64 or int32");
  return type == DType::I32;
}

//===----------------------------------------------------------------------===//
// Element indexing: GatherElements, ScatterElements, GatherElementsGrad
//===----------------------------------------------------------------------===//

llvm::Expected<ElementIndexing>
elementIndexing(const Node &node, const Shape &data, const Shape &indices) {
  int64_t rank = data.size();
  if (rank == 0)
    return nodeError(node, "data must have rank >= 1");
  if (rank > kMaxIndexRank)
    return nodeError(node, "rank " + llvm::Twine(rank) + " exceeds " +
                               llvm::Twine(kMaxIndexRank));
  auto axis = normalizeAxis(node, node.getIntAttr("axis", 0), rank);
  if (!axis)
    return axis.takeError();
  if (static_cast<int64_t>(indices.size()) != rank)
    return nodeError(node, "indices must have data's rank");
  ElementIndexing g;
  g.rank = static_cast<int32_t>(rank);
  g.axis = static_cast<int32_t>(*axis);
  g.extent = data[*axis];
  Shape strides = contiguousStrides(data);
  for (int64_t d = 0; d < rank; ++d) {
    if (d != *axis && indices[d] > data[d])
      return nodeError(node, "indices exceed data outside the axis");
    g.indexShape[d] = indices[d];
    g.dataStrides[d] = strides[d];
  }
  return g;
}

/// The `reduction` of scatter \p node (ops::getScatterReduction).
llvm::Expected<ScatterOp> scatterOpOf(const Node &node) {
  auto reduction = ops::getScatterReduction(node);
  if (!reduction)
    return nodeError(node, llvm::toString(reduction.takeError()));
  return *reduction;
}

/// The storage a scatter of \p value with \p op runs in: any storage without
/// a reduction, the CPU kernel's f32 / f64 / i64 / i32 with one.
llvm::Expected<Storage> scatterStorage(const Node &node, const Value *value,
                                       ScatterOp op) {
  std::optional<Storage> s = storageOf(value->getType().getDType());
  if (!s)
    return nodeError(node, "element type " +
                               dtypeName(value->getType().getDType()) +
                               " is not supported");
  if (op != ScatterOp::None && *s != Storage::F32 && *s != Storage::F64 &&
      *s != Storage::I64 && *s != Storage::I32)
    return nodeError(node, "a reduction needs f32, f64, int64 or int32 (got " +
                               dtypeName(value->getType().getDType()) + ")");
  return *s;
}

/// The gradients' storage: f32, f64, f16 or bf16 (16-bit adds run in fp32,
/// rounded per update).
llvm::Expected<Storage> gradStorage(const Node &node, const Value *dy,
                                    const Value *dx) {
  if (dy->getType().getDType() != dx->getType().getDType())
    return nodeError(node, "the gradient and dX must have one element type");
  std::optional<Storage> s = storageOf(dx->getType().getDType());
  if (!s || (*s != Storage::F32 && *s != Storage::F64 && *s != Storage::F16 &&
             *s != Storage::BF16))
    return nodeError(node, "element type " +
                               dtypeName(dx->getType().getDType()) +
                               " is not supported (f32, f64, f16, bf16)");
  return *s;
}

llvm::Error checkSameType(const Node &node, const Value *a, const Value *b) {
  if (a->getType().getDType() != b->getType().getDType())
    return nodeError(node, "data, updates and output must have one element "
                           "type");
  return llvm::Error::success();
}

/// An indexing node decoded once: its geometry, element types and sizes.
struct IndexPlan {
  /// Size's value, page-locked for the launches' copies.
  PinnedCopy pinnedSize;
  ElementIndexing element = {};
  NDIndexing nd = {};
  bool indices32 = false;
  /// Index count (the element kernels' thread count).
  int64_t indexCount = 0;
  /// Bytes of one data element (gathers).
  int64_t elementBytes = 0;
  /// The storage a scatter adds or writes in, and its reduction.
  Storage storage = Storage::F32;
  ScatterOp op = ScatterOp::None;
  /// Bytes of the output, which a scatter first fills.
  uint64_t outputBytes = 0;
  /// Size: the element count the launch copies (kept here so the host
  /// source outlives the asynchronous copy).
  int64_t size = 0;
};

llvm::Expected<IndexPlan> decodeGatherElements(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  if (llvm::Error err =
          checkSameType(node, node.getOperand(0), node.getResult(0)))
    return err;
  auto i32 = indices32Of(node, node.getOperand(1));
  if (!i32)
    return i32.takeError();
  auto g = elementIndexing(node, shapeOf(node.getOperand(0)),
                           shapeOf(node.getOperand(1)));
  if (!g)
    return g.takeError();
  IndexPlan p;
  p.element = *g;
  p.indices32 = *i32;
  p.indexCount = node.getOperand(1)->getType().getNumElements();
  p.elementBytes = elementBytes(node.getOperand(0));
  return p;
}

llvm::Error launchGatherElementsPlan(CudaCall &call, const IndexPlan &p) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchGatherElements(call.inPtr(0), call.inPtr(1),
                                         p.indices32, call.outPtr(0),
                                         p.indexCount, p.element,
                                         p.elementBytes, call.ctx.stream),
                    "GatherElements kernel");
}

/// Copies data (operand 0) into the output; the scatters then run on it.
llvm::Error copyDataToOutput(CudaCall &call, const IndexPlan &p) {
  if (!p.outputBytes || call.inPtr(0) == call.outPtr(0))
    return llvm::Error::success();
  return call.check(cudaMemcpyAsync(call.outPtr(0), call.inPtr(0),
                                    p.outputBytes, cudaMemcpyDeviceToDevice,
                                    call.ctx.stream),
                    "cudaMemcpyAsync");
}

llvm::Error zeroOutput(CudaCall &call, const IndexPlan &p) {
  if (!p.outputBytes)
    return llvm::Error::success();
  return call.check(
      cudaMemsetAsync(call.outPtr(0), 0, p.outputBytes, call.ctx.stream),
      "cudaMemsetAsync");
}

llvm::Expected<IndexPlan> decodeScatterElements(const Node &node) {
  auto op = scatterOpOf(node);
  if (!op)
    return op.takeError();
  const Value *data = node.getOperand(0);
  auto s = scatterStorage(node, data, *op);
  if (!s)
    return s.takeError();
  if (llvm::Error err = checkSameType(node, data, node.getOperand(2)))
    return err;
  if (llvm::Error err = checkSameType(node, data, node.getResult(0)))
    return err;
  if (shapeOf(node.getOperand(1)) != shapeOf(node.getOperand(2)))
    return nodeError(node, "indices and updates must have one shape");
  if (shapeOf(data) != shapeOf(node.getResult(0)))
    return nodeError(node, "the output must have data's shape");
  auto i32 = indices32Of(node, node.getOperand(1));
  if (!i32)
    return i32.takeError();
  auto g = elementIndexing(node, shapeOf(data), shapeOf(node.getOperand(1)));
  if (!g)
    return g.takeError();
  IndexPlan p;
  p.element = *g;
  p.indices32 = *i32;
  p.indexCount = node.getOperand(1)->getType().getNumElements();
  p.storage = *s;
  p.op = *op;
  p.outputBytes = node.getResult(0)->getType().getSizeInBytes();
  return p;
}

llvm::Error launchScatterElementsPlan(CudaCall &call, const IndexPlan &p) {
  if (llvm::Error err = copyDataToOutput(call, p))
    return err;
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchScatterElements(call.inPtr(1), p.indices32,
                                          call.inPtr(2), call.outPtr(0),
                                          p.indexCount, p.element, p.storage,
                                          p.op, call.ctx.stream),
                    "ScatterElements kernel");
}

/// GatherElementsGrad(dY, shape, indices) -> dX.
llvm::Expected<IndexPlan> decodeGatherElementsGrad(const Node &node) {
  auto s = gradStorage(node, node.getOperand(0), node.getResult(0));
  if (!s)
    return s.takeError();
  if (shapeOf(node.getOperand(0)) != shapeOf(node.getOperand(2)))
    return nodeError(node, "dY and indices must have one shape");
  auto i32 = indices32Of(node, node.getOperand(2));
  if (!i32)
    return i32.takeError();
  auto g = elementIndexing(node, shapeOf(node.getResult(0)),
                           shapeOf(node.getOperand(2)));
  if (!g)
    return g.takeError();
  IndexPlan p;
  p.element = *g;
  p.indices32 = *i32;
  p.indexCount = node.getOperand(2)->getType().getNumElements();
  p.storage = *s;
  p.op = ScatterOp::Add;
  p.outputBytes = node.getResult(0)->getType().getSizeInBytes();
  return p;
}

llvm::Error launchGatherElementsGrad(CudaCall &call, const IndexPlan &p) {
  if (llvm::Error err = zeroOutput(call, p))
    return err;
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchScatterElements(call.inPtr(2), p.indices32,
                                          call.inPtr(0), call.outPtr(0),
                                          p.indexCount, p.element, p.storage,
                                          p.op, call.ctx.stream),
                    "GatherElementsGrad kernel");
}

//===----------------------------------------------------------------------===//
// ND indexing: GatherND, ScatterND, GatherNDGrad
//===----------------------------------------------------------------------===//

/// The CPU kernel's resolveND over static shapes; \p blockShape receives
/// the shape GatherND produces (indices[:-1] + data[batch_dims + depth:]).
llvm::Expected<NDIndexing> ndIndexing(const Node &node, const Shape &data,
                                      const Shape &indices, int64_t batchDims,
                                      Shape &gathered) {
  int64_t dataRank = data.size(), indexRank = indices.size();
  if (indexRank < 1 || batchDims < 0 ||
      batchDims >= std::min(dataRank, indexRank))
    return nodeError(node, "batch_dims " + llvm::Twine(batchDims) +
                               " does not fit ranks " + llvm::Twine(dataRank) +
                               " and " + llvm::Twine(indexRank));
  NDIndexing g;
  g.depth = indices.back();
  if (g.depth < 1 || batchDims + g.depth > dataRank)
    return nodeError(node, "index tuples of length " + llvm::Twine(g.depth) +
                               " do not fit data of rank " +
                               llvm::Twine(dataRank));
  llvm::ArrayRef<int64_t> d(data), ix(indices);
  if (d.take_front(batchDims) != ix.take_front(batchDims))
    return nodeError(node, "batch dimensions of data and indices differ");
  g.batches = product(d.take_front(batchDims));
  g.tuples = product(ix.slice(batchDims, indexRank - 1 - batchDims));
  g.block = product(d.drop_front(batchDims + g.depth));
  g.batchSize = product(d.drop_front(batchDims));
  for (int64_t j = 0; j < g.depth; ++j)
    g.extents[j] = data[batchDims + j];
  g.strides[g.depth - 1] = 1;
  for (int64_t j = g.depth - 2; j >= 0; --j)
    g.strides[j] = g.strides[j + 1] * g.extents[j + 1];
  gathered.assign(ix.begin(), ix.end() - 1);
  gathered.append(d.begin() + batchDims + g.depth, d.end());
  return g;
}

llvm::Expected<IndexPlan> decodeGatherND(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  if (llvm::Error err =
          checkSameType(node, node.getOperand(0), node.getResult(0)))
    return err;
  auto i32 = indices32Of(node, node.getOperand(1));
  if (!i32)
    return i32.takeError();
  Shape gathered;
  auto g =
      ndIndexing(node, shapeOf(node.getOperand(0)), shapeOf(node.getOperand(1)),
                 node.getIntAttr("batch_dims", 0), gathered);
  if (!g)
    return g.takeError();
  if (gathered != shapeOf(node.getResult(0)))
    return nodeError(node, "the output shape is not GatherND's");
  IndexPlan p;
  p.nd = *g;
  p.indices32 = *i32;
  p.elementBytes = elementBytes(node.getOperand(0));
  return p;
}

llvm::Error launchGatherNDPlan(CudaCall &call, const IndexPlan &p) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchGatherND(call.inPtr(0), call.inPtr(1), p.indices32,
                                   call.outPtr(0), p.nd, p.elementBytes,
                                   call.ctx.stream),
                    "GatherND kernel");
}

llvm::Expected<IndexPlan> decodeScatterND(const Node &node) {
  auto op = scatterOpOf(node);
  if (!op)
    return op.takeError();
  const Value *data = node.getOperand(0);
  auto s = scatterStorage(node, data, *op);
  if (!s)
    return s.takeError();
  if (llvm::Error err = checkSameType(node, data, node.getOperand(2)))
    return err;
  if (llvm::Error err = checkSameType(node, data, node.getResult(0)))
    return err;
  if (shapeOf(data) != shapeOf(node.getResult(0)))
    return nodeError(node, "the output must have data's shape");
  auto i32 = indices32Of(node, node.getOperand(1));
  if (!i32)
    return i32.takeError();
  Shape gathered;
  auto g =
      ndIndexing(node, shapeOf(data), shapeOf(node.getOperand(1)), 0, gathered);
  if (!g)
    return g.takeError();
  if (gathered != shapeOf(node.getOperand(2)))
    return nodeError(node, "updates do not have the shape the indices select");
  IndexPlan p;
  p.nd = *g;
  p.indices32 = *i32;
  p.storage = *s;
  p.op = *op;
  p.outputBytes = node.getResult(0)->getType().getSizeInBytes();
  return p;
}

llvm::Error launchScatterNDPlan(CudaCall &call, const IndexPlan &p) {
  if (llvm::Error err = copyDataToOutput(call, p))
    return err;
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchScatterND(call.inPtr(1), p.indices32, call.inPtr(2),
                                    call.outPtr(0), p.nd, p.storage, p.op,
                                    call.ctx.stream),
                    "ScatterND kernel");
}

/// GatherNDGrad(shape, indices, update) -> dX.
llvm::Expected<IndexPlan> decodeGatherNDGrad(const Node &node) {
  auto s = gradStorage(node, node.getOperand(2), node.getResult(0));
  if (!s)
    return s.takeError();
  auto i32 = indices32Of(node, node.getOperand(1));
  if (!i32)
    return i32.takeError();
  Shape gathered;
  auto g =
      ndIndexing(node, shapeOf(node.getResult(0)), shapeOf(node.getOperand(1)),
                 node.getIntAttr("batch_dims", 0), gathered);
  if (!g)
    return g.takeError();
  if (gathered != shapeOf(node.getOperand(2)))
    return nodeError(node, "update does not have the shape the indices "
                           "select");
  IndexPlan p;
  p.nd = *g;
  p.indices32 = *i32;
  p.storage = *s;
  p.op = ScatterOp::Add;
  p.outputBytes = node.getResult(0)->getType().getSizeInBytes();
  return p;
}

llvm::Error launchGatherNDGrad(CudaCall &call, const IndexPlan &p) {
  if (llvm::Error err = zeroOutput(call, p))
    return err;
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchScatterND(call.inPtr(1), p.indices32, call.inPtr(2),
                                    call.outPtr(0), p.nd, p.storage, p.op,
                                    call.ctx.stream),
                    "GatherNDGrad kernel");
}

//===----------------------------------------------------------------------===//
// Size
//===----------------------------------------------------------------------===//

/// Size: the static element count, copied from the prepared kernel's
/// descriptor, which outlives the copy (as Shape's values).
llvm::Expected<IndexPlan> decodeSize(const Node &node) {
  if (node.getResult(0)->getType().getDType() != DType::I64 ||
      node.getResult(0)->getType().getNumElements() != 1)
    return nodeError(node, "the result must be an int64 scalar");
  IndexPlan p;
  p.size = node.getOperand(0)->getType().getNumElements();
  return p;
}

llvm::Error launchSize(CudaCall &call, const IndexPlan &p) {
  return p.pinnedSize.upload(call, call.outPtr(0), &p.size, sizeof(int64_t));
}

} // namespace

void cuda::dispatch::addIndexKernels(llvm::StringMap<KernelEntry> &table) {
  addEntry(table, "", "GatherElements",
           decodedEntry<IndexPlan, decodeGatherElements,
                        launchGatherElementsPlan>());
  addEntry(table, "", "ScatterElements",
           decodedEntry<IndexPlan, decodeScatterElements,
                        launchScatterElementsPlan>());
  addEntry(table, kMsDomain, "GatherElementsGrad",
           decodedEntry<IndexPlan, decodeGatherElementsGrad,
                        launchGatherElementsGrad>());
  addEntry(table, "", "GatherND",
           decodedEntry<IndexPlan, decodeGatherND, launchGatherNDPlan>());
  addEntry(table, "", "ScatterND",
           decodedEntry<IndexPlan, decodeScatterND, launchScatterNDPlan>());
  addEntry(table, kMsDomain, "GatherNDGrad",
           decodedEntry<IndexPlan, decodeGatherNDGrad, launchGatherNDGrad>());
  addEntry(table, "", "Size",
           decodedEntry<IndexPlan, decodeSize, launchSize>());
}
