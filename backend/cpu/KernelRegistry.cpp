//===- KernelRegistry.cpp - CPU kernel lookup and dispatch ----------------===//
//
// Builds the kernel table once from every family's registration hook and
// indexes it by schema. Preparing a node finds its entry by schema and
// checks, once, its arity against the schema and the operands and results
// the kernel needs; running a prepared entry calls it, for float kernels
// staging f16/bf16 tensors through fp32 copies (counted as temporaries) so
// no kernel needs a 16-bit code path.
//
//===----------------------------------------------------------------------===//

#include "backend/Device.h"
#include "backend/cpu/Blas.h"
#include "backend/cpu/CollectiveKernels.h"
#include "backend/cpu/KernelSupport.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <thread>

extern "C" void openblas_set_num_threads(int numThreads);

using namespace gmopt;
using namespace gmopt::cpu;

static const KernelTable &getKernelTable() {
  static const KernelTable table = [] {
    KernelTable t;
    registerElementwiseKernels(t);
    registerUnaryKernels(t);
    registerTrainingKernels(t);
    registerSoftmaxKernels(t);
    registerLossKernels(t);
    registerNormKernels(t);
    registerMatMulKernels(t);
    registerConvKernels(t);
    registerPoolKernels(t);
    registerReduceKernels(t);
    registerShapeKernels(t);
    registerMovementKernels(t);
    registerGatherKernels(t);
    registerDropoutKernels(t);
    registerOptimizerKernels(t);
    registerResizeKernels(t);
    registerCollectiveKernels(t);
    registerAttentionKernels(t);
    registerCrossEntropyKernels(t);
    registerKernelWorkspaces(t);
    t.indexSchemas();
    return t;
  }();
  return table;
}

//===----------------------------------------------------------------------===//
// CpuKernelContext
//===----------------------------------------------------------------------===//

static unsigned hardwareThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

CpuKernelContext::CpuKernelContext(CountingAllocator &allocator)
    : allocator(allocator), numThreads(hardwareThreads()) {}

void CpuKernelContext::setNumThreads(unsigned threads) {
  numThreads = threads == 0 ? hardwareThreads() : threads;
}

llvm::Expected<TensorBuffer>
CpuKernelContext::allocateScratch(DType dtype, llvm::ArrayRef<int64_t> shape,
                                  MemoryCategory category) {
  if (sliceActive) {
    int64_t elements = 1;
    for (int64_t d : shape)
      elements *= d;
    uint64_t bytes = scratchBytes(dtype, elements);
    if (bytes <= sliceBytes - sliceUsed) {
      TensorBuffer buffer =
          TensorBuffer::borrow(sliceBase + sliceUsed, dtype, shape);
      sliceUsed += bytes;
      return buffer;
    }
    unplannedScratchBytes += bytes;
  }
  return TensorBuffer::create(allocator, dtype, shape, category);
}

void CpuKernelContext::setWorkspaceSlice(void *base, uint64_t bytes) {
  sliceActive = true;
  sliceBase = static_cast<uint8_t *>(base);
  sliceBytes = base ? bytes : 0;
  sliceUsed = 0;
}

void CpuKernelContext::clearWorkspaceSlice() {
  sliceActive = false;
  sliceBase = nullptr;
  sliceBytes = sliceUsed = 0;
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

uint64_t cpu::getCpuKernelWorkspaceBytes(const Node &node) {
  const KernelInfo *info =
      getKernelTable().lookup(node.getDomain(), node.getOpType());
  if (!info)
    return 0;
  auto isStatic = [](const Value *value) {
    return !value || value->getType().hasStaticShape();
  };
  if (!llvm::all_of(node.getOperands(), isStatic) ||
      !llvm::all_of(node.getResults(), isStatic))
    return 0;
  uint64_t bytes = info->workspace ? info->workspace(node) : 0;
  if (info->mode != KernelMode::StageHalfAsFloat)
    return bytes;
  // runStaged: one fp32 copy per distinct half input, one per half output,
  // each of a slice of rows where the entry declares rows.
  std::optional<RowSlicing> slicing;
  if (info->rowDims) {
    llvm::SmallVector<llvm::SmallVector<int64_t, 6>, 6> shapes;
    auto shapeOf = [](const Value *value) {
      llvm::SmallVector<int64_t, 6> shape;
      if (value) {
        auto dims = value->getType().getStaticShape();
        shape.assign(dims.begin(), dims.end());
      }
      return shape;
    };
    for (const Value *value : node.getOperands())
      shapes.push_back(shapeOf(value));
    for (const Value *value : node.getResults())
      shapes.push_back(shapeOf(value));
    slicing = planRowSlices(info->rowDims(node), shapes);
  }
  auto staged = [&](const Value *value) {
    int64_t elements = value->getType().getNumElements();
    if (slicing)
      elements = elements / slicing->rows * slicing->sliceRows;
    return scratchBytes(DType::F32, elements);
  };
  llvm::SmallPtrSet<const Value *, 4> widened;
  for (const Value *operand : node.getOperands())
    if (operand && isHalfType(operand->getType().getDType()) &&
        widened.insert(operand).second)
      bytes += staged(operand);
  for (const Value *result : node.getResults())
    if (result && isHalfType(result->getType().getDType()))
      bytes += staged(result);
  return bytes;
}

bool cpu::hasCpuKernel(llvm::StringRef domain, llvm::StringRef opType) {
  return getKernelTable().lookup(domain, opType) != nullptr;
}

std::vector<std::string> cpu::listCpuKernels() {
  return getKernelTable().keys();
}

llvm::Expected<uint64_t> cpu::getRandomStreamId(const Node &node) {
  if (std::optional<uint64_t> id = node.getStreamId())
    return *id;
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "random node " + node.describe() +
                                     " has no stream id");
}

void cpu::useSingleThreadedBlas() {
  // Kernels parallelize GEMM themselves (Blas.h), reproducibly.
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

/// \p view's rows [first, first + count) of the RowSlicing over its first
/// \p dims dimensions, as a tensor of the same rank: the leading dimensions
/// become [1, ..., 1, count].
static TensorView rowSlice(const TensorView &view, unsigned dims, int64_t rows,
                           int64_t first, int64_t count) {
  llvm::SmallVector<int64_t, 6> shape(view.getShape().begin(),
                                      view.getShape().end());
  int64_t rowElements = view.getNumElements() / rows;
  for (unsigned d = 0; d + 1 < dims; ++d)
    shape[d] = 1;
  shape[dims - 1] = count;
  return TensorView(static_cast<char *>(view.getData()) +
                        first * rowElements * view.getElementSize(),
                    view.getDType(), shape);
}

/// runStaged over slices of rows (the entry's rowDims): each slice of every
/// 16-bit input is widened into fp32 scratch of one slice, the kernel runs
/// on the slice, and its 16-bit outputs are rounded back. Rows are
/// independent, so an output written in place over an input only
/// overwrites rows already read.
static llvm::Error runStagedByRows(const KernelInfo &info, KernelCall &call,
                                   const RowSlicing &slicing) {
  CpuKernelContext &ctx = call.getContext();
  unsigned threads = ctx.getNumThreads();
  auto sliceOf = [&](const TensorView &view, int64_t first, int64_t count) {
    return rowSlice(view, slicing.dims, slicing.rows, first, count);
  };
  // One scratch slice per distinct half input (by buffer) and per half
  // output, allocated once in request order.
  llvm::SmallVector<TensorBuffer, 8> staging;
  staging.reserve(call.getNumInputs() + call.getNumOutputs());
  llvm::SmallVector<int, 8> inputStage(call.getNumInputs(), -1);
  llvm::DenseMap<const void *, int> stageByData;
  for (unsigned i = 0; i < call.getNumInputs(); ++i) {
    const TensorView *input = call.in(i);
    if (!input || !isHalfType(input->getDType()))
      continue;
    auto it = stageByData.find(input->getData());
    if (it != stageByData.end() &&
        call.in(it->second)->getShape() == input->getShape()) {
      inputStage[i] = inputStage[it->second];
      continue;
    }
    auto buffer = ctx.allocateScratch(
        DType::F32, sliceOf(*input, 0, slicing.sliceRows).getShape(),
        MemoryCategory::Temporaries);
    if (!buffer)
      return buffer.takeError();
    inputStage[i] = staging.size();
    stageByData[input->getData()] = i;
    staging.push_back(std::move(*buffer));
  }
  llvm::SmallVector<int, 4> outputStage(call.getNumOutputs(), -1);
  for (unsigned i = 0; i < call.getNumOutputs(); ++i) {
    const TensorView *output = call.out(i);
    if (!output || !isHalfType(output->getDType()))
      continue;
    auto buffer = ctx.allocateScratch(
        DType::F32, sliceOf(*output, 0, slicing.sliceRows).getShape(),
        MemoryCategory::Temporaries);
    if (!buffer)
      return buffer.takeError();
    outputStage[i] = staging.size();
    staging.push_back(std::move(*buffer));
  }
  for (int64_t first = 0; first < slicing.rows; first += slicing.sliceRows) {
    int64_t count = std::min(slicing.sliceRows, slicing.rows - first);
    llvm::SmallVector<TensorView, 8> inViews(call.getNumInputs());
    llvm::SmallVector<const TensorView *, 8> inputs(call.getNumInputs(),
                                                    nullptr);
    llvm::SmallPtrSet<const TensorBuffer *, 8> widened;
    for (unsigned i = 0; i < call.getNumInputs(); ++i) {
      const TensorView *input = call.in(i);
      if (!input)
        continue;
      TensorView slice = sliceOf(*input, first, count);
      if (inputStage[i] < 0) {
        inViews[i] = slice;
      } else {
        float *data = staging[inputStage[i]].getView().getDataAs<float>();
        inViews[i] = TensorView(data, DType::F32, slice.getShape());
        if (widened.insert(&staging[inputStage[i]]).second)
          convertToFloat(slice, data, threads);
      }
      inputs[i] = &inViews[i];
    }
    llvm::SmallVector<TensorView, 4> outViews(call.getNumOutputs());
    llvm::SmallVector<TensorView *, 4> outputs(call.getNumOutputs(), nullptr);
    for (unsigned i = 0; i < call.getNumOutputs(); ++i) {
      const TensorView *output = call.out(i);
      if (!output)
        continue;
      TensorView slice = sliceOf(*output, first, count);
      outViews[i] =
          outputStage[i] < 0
              ? slice
              : TensorView(staging[outputStage[i]].getView().getData(),
                           DType::F32, slice.getShape());
      outputs[i] = &outViews[i];
    }
    KernelCall staged(call.getNode(), inputs, outputs, ctx,
                      call.getPreparedState());
    if (llvm::Error err = info.fn(staged))
      return err;
    for (unsigned i = 0; i < call.getNumOutputs(); ++i)
      if (outputStage[i] >= 0)
        convertFromFloat(outViews[i].getDataAs<float>(),
                         sliceOf(*call.out(i), first, count), threads);
  }
  return llvm::Error::success();
}

/// Runs a StageHalfAsFloat kernel whose tensors include f16/bf16 ones,
/// slicing rows over the first \p rowDims dimensions (0: none).
static llvm::Error runStaged(const KernelInfo &info, unsigned rowDims,
                             KernelCall &call) {
  if (rowDims) {
    llvm::SmallVector<llvm::SmallVector<int64_t, 6>, 6> shapes;
    for (unsigned i = 0; i < call.getNumInputs(); ++i)
      shapes.emplace_back(call.in(i) ? call.in(i)->getShape()
                                     : llvm::ArrayRef<int64_t>());
    for (unsigned i = 0; i < call.getNumOutputs(); ++i)
      shapes.emplace_back(call.out(i) ? call.out(i)->getShape()
                                      : llvm::ArrayRef<int64_t>());
    if (std::optional<RowSlicing> slicing = planRowSlices(rowDims, shapes))
      return runStagedByRows(info, call, *slicing);
  }
  CpuKernelContext &ctx = call.getContext();
  unsigned threads = ctx.getNumThreads();
  // Reserved up front so views into the buffers stay valid as it fills.
  llvm::SmallVector<TensorBuffer, 8> staging;
  staging.reserve(call.getNumInputs() + call.getNumOutputs());
  // One staging copy per distinct half input buffer (Mul(x, x) widens once).
  llvm::DenseMap<const void *, const TensorView *> stagedByData;
  llvm::SmallVector<const TensorView *, 8> inputs(call.getInputs().begin(),
                                                  call.getInputs().end());
  for (const TensorView *&input : inputs) {
    if (!input || !isHalfType(input->getDType()))
      continue;
    auto it = stagedByData.find(input->getData());
    if (it != stagedByData.end() &&
        it->second->getShape() == input->getShape()) {
      input = it->second;
      continue;
    }
    auto buffer = ctx.allocateScratch(DType::F32, input->getShape(),
                                      MemoryCategory::Temporaries);
    if (!buffer)
      return buffer.takeError();
    staging.push_back(std::move(*buffer));
    TensorView &widened = staging.back().getView();
    convertToFloat(*input, widened.getDataAs<float>(), threads);
    stagedByData[input->getData()] = &widened;
    input = &widened;
  }
  llvm::SmallVector<TensorView *, 4> outputs(call.getOutputs().begin(),
                                             call.getOutputs().end());
  for (TensorView *&output : outputs) {
    if (!output || !isHalfType(output->getDType()))
      continue;
    auto buffer = ctx.allocateScratch(DType::F32, output->getShape(),
                                      MemoryCategory::Temporaries);
    if (!buffer)
      return buffer.takeError();
    staging.push_back(std::move(*buffer));
    output = &staging.back().getView();
  }
  KernelCall staged(call.getNode(), inputs, outputs, ctx,
                    call.getPreparedState());
  if (llvm::Error err = info.fn(staged))
    return err;
  for (unsigned i = 0; i < outputs.size(); ++i)
    if (outputs[i] && outputs[i] != call.out(i))
      convertFromFloat(outputs[i]->getDataAs<float>(), *call.out(i), threads);
  return llvm::Error::success();
}

llvm::Expected<PreparedCpuKernel> cpu::prepareCpuKernel(const Node &node) {
  auto schema = getKernelSchema(node, "CPU");
  if (!schema)
    return schema.takeError();
  const KernelInfo *info = getKernelTable().lookup(*schema);
  if (!info)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no CPU kernel for '" + node.getOp().str() +
                                       "' (node " + node.describe() + ")");
  // getKernelSchema checked the counts and the required operands; the
  // results a schema counts are present unless the kernel allows otherwise.
  if (info->results == KernelResults::SchemaRequired)
    for (unsigned i = 0; i < (*schema)->minOutputs; ++i)
      if (!node.getResult(i))
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            node.getOp().str() + ": required output " + llvm::Twine(i) +
                " is missing (node " + node.describe() + ")");
  PreparedCpuKernel prepared;
  prepared.info = info;
  if (info->prepare) {
    auto state = info->prepare(node);
    if (!state)
      return state.takeError();
    prepared.state = std::move(*state);
  }
  if (info->rowDims)
    prepared.rowDims = info->rowDims(node);
  useSingleThreadedBlas();
  return prepared;
}

llvm::Error cpu::runCpuKernel(const Node &node,
                              llvm::ArrayRef<const TensorView *> inputs,
                              llvm::ArrayRef<TensorView *> outputs,
                              CpuKernelContext &ctx) {
  auto prepared = prepareCpuKernel(node);
  if (!prepared)
    return prepared.takeError();
  return runPreparedCpuKernel(*prepared, node, inputs, outputs, ctx);
}

llvm::Error cpu::runPreparedCpuKernel(const PreparedCpuKernel &kernel,
                                      const Node &node,
                                      llvm::ArrayRef<const TensorView *> inputs,
                                      llvm::ArrayRef<TensorView *> outputs,
                                      CpuKernelContext &ctx) {
  const KernelInfo &info = *kernel.info;
  KernelCall call(node, inputs, outputs, ctx, kernel.state.get());
  if (info.mode == KernelMode::StageHalfAsFloat) {
    bool anyHalf = false;
    for (const TensorView *input : inputs)
      anyHalf |= input && isHalfType(input->getDType());
    for (const TensorView *output : outputs)
      anyHalf |= output && isHalfType(output->getDType());
    if (anyHalf)
      return runStaged(info, kernel.rowDims, call);
  }
  return info.fn(call);
}
