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
  // runStaged: one fp32 copy per distinct half input, one per half output.
  auto staged = [](const Value *value) {
    return scratchBytes(DType::F32, value->getType().getNumElements());
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

/// Runs a StageHalfAsFloat kernel whose tensors include f16/bf16 ones.
static llvm::Error runStaged(const KernelInfo &info, KernelCall &call) {
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
  KernelCall staged(call.getNode(), inputs, outputs, ctx);
  if (llvm::Error err = info.fn(staged))
    return err;
  for (unsigned i = 0; i < outputs.size(); ++i)
    if (outputs[i] && outputs[i] != call.out(i))
      convertFromFloat(outputs[i]->getDataAs<float>(), *call.out(i), threads);
  return llvm::Error::success();
}

llvm::Expected<const KernelInfo *> cpu::prepareCpuKernel(const Node &node) {
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
  useSingleThreadedBlas();
  return info;
}

llvm::Error cpu::runCpuKernel(const Node &node,
                              llvm::ArrayRef<const TensorView *> inputs,
                              llvm::ArrayRef<TensorView *> outputs,
                              CpuKernelContext &ctx) {
  auto info = prepareCpuKernel(node);
  if (!info)
    return info.takeError();
  return runPreparedCpuKernel(**info, node, inputs, outputs, ctx);
}

llvm::Error cpu::runPreparedCpuKernel(const KernelInfo &kernel,
                                      const Node &node,
                                      llvm::ArrayRef<const TensorView *> inputs,
                                      llvm::ArrayRef<TensorView *> outputs,
                                      CpuKernelContext &ctx) {
  const KernelInfo *info = &kernel;
  KernelCall call(node, inputs, outputs, ctx);
  if (info->mode == KernelMode::StageHalfAsFloat) {
    bool anyHalf = false;
    for (const TensorView *input : inputs)
      anyHalf |= input && isHalfType(input->getDType());
    for (const TensorView *output : outputs)
      anyHalf |= output && isHalfType(output->getDType());
    if (anyHalf)
      return runStaged(*info, call);
  }
  return info->fn(call);
}
