//===- CudnnConvDispatch.cpp - Conv and ConvGrad on cuDNN -------*- C++ -*-===//
//
// The CUDA kernel table's Conv and ConvGrad (dX, dW, dB as ONNX Runtime's
// com.microsoft ConvGrad outputs them) on cuDNN's legacy API, NCHW, 1-D
// convolutions as 2-D ones of height 1.
//
// Types: fp32, f16 or bf16 storage, one type per node, computed in fp32
// (cuDNN's FLOAT compute type): fp32 data with FMA math (no TF32 unless
// --allow-tf32), 16-bit data with whatever math cuDNN ranks first, tensor
// cores included (their products and sums are fp32); a 16-bit bias and its
// gradient are gmopt's kernels (fp32 sums, rounded once), cuDNN documenting
// no bf16 for cudnnAddTensor / cudnnConvolutionBackwardBias.
//
// Asymmetric pads (begin != end, e.g. SAME_UPPER with an even kernel):
// cuDNN's descriptors take one pad per axis for both ends, so such a
// convolution pads X explicitly, with zeros, into its planned workspace and
// convolves that with zero pads; ConvGrad computes the padded input's
// gradient there and crops it into dX (ConvWorkspaceLayout, CudnnGeometry.h,
// sizes the extra bytes). An eager run has no slice and refuses such a node.
//
// Workspace: the CUDA workspace model (CudnnGeometry.h) gives every
// convolution node a slice bounded from its shapes alone, so plans made
// without a GPU reserve it. When the node is prepared (once, with the size
// of its planned slice) its geometry is resolved, its descriptors made and
// the algorithms cuDNN's heuristics rank (cudnnGet*Algorithm_v7, fastest
// first) tried in order, deterministic ones first: the first whose
// workspace (cudnnGet*WorkspaceSize) fits the slice is kept in the prepared
// kernel, which each launch reads. An eager node has no slice and gets a
// zero-workspace algorithm (implicit GEMM, which always exists). Nothing is
// allocated inside a step. Compiled only where cuDNN's header was found.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CnnDispatch.h"
#include "backend/cuda/CnnKernels.h"
#include "backend/cuda/CudnnGeometry.h"

#ifdef GMOPT_HAVE_CUDNN

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;
using namespace gmopt::cuda::dispatch::cnn;

/// A convolution node's descriptors and the algorithms chosen for the
/// workspace bytes it was made for.
struct cnn::ConvPlan {
  Descriptors owned;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  /// One per direction, each with the math type of its algorithm.
  cudnnConvolutionDescriptor_t forward = nullptr, data = nullptr,
                               filter = nullptr;
  cudnnConvolutionFwdAlgo_t forwardAlgo =
      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t dataAlgo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filterAlgo =
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  /// The cuDNN scratch bytes the algorithms were chosen for.
  uint64_t workspaceBytes = 0;
};

llvm::Error cnn::checkConv(const Node &node) {
  if (llvm::Error err = requireCudnnLibrary(node))
    return err;
  if (auto storage = commonFloatStorage(node); !storage)
    return storage.takeError();
  auto params = resolveConvParams(node);
  if (!params)
    return params.takeError();
  const WindowParams &g = params->window;
  // The padded input (asymmetric pads) is what cuDNN sees.
  const WindowParams &seen = getConvWorkspaceLayout(node, *params).cudnn.window;
  if (!fitsInt({g.batch, g.channels, seen.inH, seen.inW}) ||
      !fitsInt({g.batch, params->outChannels, g.outH, g.outW}) ||
      !fitsInt({params->outChannels, params->groupIn, g.kernelH, g.kernelW}))
    return nodeError(node, "extents exceed cuDNN's 32-bit dimensions");
  Shape x = {g.batch, g.channels};
  Shape w = {params->outChannels, params->groupIn};
  if (params->spatialDims == 2) {
    x.append({g.inH, g.inW});
    w.append({g.kernelH, g.kernelW});
  } else {
    x.push_back(g.inW);
    w.push_back(g.kernelW);
  }
  if (node.getOpType() == "Conv")
    return checkChannels(
        node, node.getNumOperands() > 2 ? node.getOperand(2) : nullptr,
        params->outChannels, "B");
  auto result = [&](unsigned i) {
    return i < node.getNumResults() ? node.getResult(i) : nullptr;
  };
  if (llvm::Error err = checkShape(node, result(0), x, "dX"))
    return err;
  if (llvm::Error err = checkShape(node, result(1), w, "dW"))
    return err;
  return checkChannels(node, result(2), params->outChannels, "dB");
}

namespace {

/// The first of \p perf (cuDNN's ranking, fastest first) that succeeded,
/// is deterministic when \p deterministicOnly, and whose workspace under
/// the math type it will run with fits \p limit; that math type is set on
/// \p conv. \p size queries an algorithm's workspace. \p anyMath (16-bit
/// data, whose tensor-core products accumulate in fp32 anyway, or
/// --allow-tf32) keeps the candidate's math type; else only FMA math runs.
template <typename Perf, typename SizeFn>
std::optional<Perf> pickAlgorithm(llvm::ArrayRef<Perf> perf,
                                  cudnnConvolutionDescriptor_t conv,
                                  bool anyMath, uint64_t limit, SizeFn size) {
  for (bool deterministicOnly : {true, false})
    for (const Perf &candidate : perf) {
      if (candidate.status != CUDNN_STATUS_SUCCESS)
        continue;
      if (deterministicOnly && candidate.determinism != CUDNN_DETERMINISTIC)
        continue;
      cudnnMathType_t math = anyMath ? candidate.mathType : CUDNN_FMA_MATH;
      if (!anyMath && candidate.mathType != CUDNN_FMA_MATH &&
          candidate.mathType != CUDNN_DEFAULT_MATH)
        continue;
      if (cudnnSetConvolutionMathType(conv, math) != CUDNN_STATUS_SUCCESS)
        continue;
      size_t bytes = 0;
      if (size(candidate, bytes) != CUDNN_STATUS_SUCCESS || bytes > limit)
        continue;
      return candidate;
    }
  return std::nullopt;
}

/// The descriptors and algorithms of convolution \p p (the one cuDNN is
/// asked for: over the padded input where the node pads explicitly) on
/// \p storage data, for \p workspaceBytes of cuDNN scratch.
llvm::Expected<std::shared_ptr<ConvPlan>>
makeConvPlan(const Node &node, const ConvParams &p, Storage storage,
             uint64_t workspaceBytes, CudaKernelContext &ctx) {
  cudnnHandle_t handle = ctx.cudnn->handle;
  auto plan = std::make_shared<ConvPlan>();
  ConvPlan &d = *plan;
  d.workspaceBytes = workspaceBytes;
  const WindowParams &g = p.window;
  cudnnDataType_t type = cudnnTypeOf(storage);
  bool anyMath = ctx.allowTf32 || storage != Storage::F32;
  auto x = d.owned.tensor(node, type, g.batch, g.channels, g.inH, g.inW);
  if (!x)
    return x.takeError();
  d.x = *x;
  auto y = d.owned.tensor(node, type, g.batch, p.outChannels, g.outH, g.outW);
  if (!y)
    return y.takeError();
  d.y = *y;
  auto bias = d.owned.tensor(node, type, 1, p.outChannels, 1, 1);
  if (!bias)
    return bias.takeError();
  d.bias = *bias;
  CUDNN_CHECK(node, cudnnCreateFilterDescriptor(&d.w));
  d.owned.filters.push_back(d.w);
  CUDNN_CHECK(node, cudnnSetFilter4dDescriptor(d.w, type, CUDNN_TENSOR_NCHW,
                                               p.outChannels, p.groupIn,
                                               g.kernelH, g.kernelW));
  for (cudnnConvolutionDescriptor_t *conv : {&d.forward, &d.data, &d.filter}) {
    CUDNN_CHECK(node, cudnnCreateConvolutionDescriptor(conv));
    d.owned.convolutions.push_back(*conv);
    CUDNN_CHECK(node, cudnnSetConvolution2dDescriptor(
                          *conv, g.padTop, g.padLeft, g.strideH, g.strideW,
                          g.dilationH, g.dilationW, CUDNN_CROSS_CORRELATION,
                          CUDNN_DATA_FLOAT));
    CUDNN_CHECK(node, cudnnSetConvolutionGroupCount(*conv, p.groups));
    // The math type the heuristics rank for (pickAlgorithm then sets each
    // candidate's own).
    cudnnMathType_t math = storage != Storage::F32 ? CUDNN_TENSOR_OP_MATH
                           : ctx.allowTf32         ? CUDNN_DEFAULT_MATH
                                                   : CUDNN_FMA_MATH;
    CUDNN_CHECK(node, cudnnSetConvolutionMathType(*conv, math));
  }
  // cuDNN must see the output extents the graph has.
  int n = 0, c = 0, h = 0, w = 0;
  CUDNN_CHECK(node, cudnnGetConvolution2dForwardOutputDim(d.forward, d.x, d.w,
                                                          &n, &c, &h, &w));
  if (n != g.batch || c != p.outChannels || h != g.outH || w != g.outW)
    return nodeError(node, llvm::formatv("cuDNN computes an output of "
                                         "[{0}, {1}, {2}, {3}], the graph has "
                                         "[{4}, {5}, {6}, {7}]",
                                         n, c, h, w, g.batch, p.outChannels,
                                         g.outH, g.outW)
                               .str());
  bool grad = node.getOpType() == "ConvGrad";
  auto noAlgorithm = [&](llvm::StringRef direction) {
    return nodeError(node, "cuDNN has no " + direction +
                               " algorithm within the " +
                               llvm::Twine(workspaceBytes) + "-byte workspace");
  };
  if (!grad) {
    int count = 0;
    CUDNN_CHECK(node,
                cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::max(count, 1));
    int returned = 0;
    CUDNN_CHECK(node, cudnnGetConvolutionForwardAlgorithm_v7(
                          handle, d.x, d.w, d.forward, d.y, perf.size(),
                          &returned, perf.data()));
    perf.resize(returned);
    auto chosen = pickAlgorithm<cudnnConvolutionFwdAlgoPerf_t>(
        perf, d.forward, anyMath, workspaceBytes,
        [&](const cudnnConvolutionFwdAlgoPerf_t &c, size_t &bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(
              handle, d.x, d.w, d.forward, d.y, c.algo, &bytes);
        });
    if (!chosen)
      return noAlgorithm("forward");
    d.forwardAlgo = chosen->algo;
    return plan;
  }
  if (node.getResult(0)) {
    int count = 0;
    CUDNN_CHECK(
        node, cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(count, 1));
    int returned = 0;
    CUDNN_CHECK(node, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                          handle, d.w, d.y, d.data, d.x, perf.size(), &returned,
                          perf.data()));
    perf.resize(returned);
    auto chosen = pickAlgorithm<cudnnConvolutionBwdDataAlgoPerf_t>(
        perf, d.data, anyMath, workspaceBytes,
        [&](const cudnnConvolutionBwdDataAlgoPerf_t &c, size_t &bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(
              handle, d.w, d.y, d.data, d.x, c.algo, &bytes);
        });
    if (!chosen)
      return noAlgorithm("backward-data");
    d.dataAlgo = chosen->algo;
  }
  if (node.getNumResults() > 1 && node.getResult(1)) {
    int count = 0;
    CUDNN_CHECK(node, cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(
                          handle, &count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::max(count, 1));
    int returned = 0;
    CUDNN_CHECK(node, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                          handle, d.x, d.y, d.filter, d.w, perf.size(),
                          &returned, perf.data()));
    perf.resize(returned);
    auto chosen = pickAlgorithm<cudnnConvolutionBwdFilterAlgoPerf_t>(
        perf, d.filter, anyMath, workspaceBytes,
        [&](const cudnnConvolutionBwdFilterAlgoPerf_t &c, size_t &bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(
              handle, d.x, d.y, d.filter, d.w, c.algo, &bytes);
        });
    if (!chosen)
      return noAlgorithm("backward-filter");
    d.filterAlgo = chosen->algo;
  }
  return plan;
}

} // namespace

namespace {

/// A Conv or ConvGrad node prepared once: its geometry and workspace
/// layout, and (unless the convolution is empty) its cuDNN descriptors and
/// the algorithms chosen for the planned workspace.
struct ConvDescriptor final : CudaKernelDescriptor {
  ConvParams params;
  ConvWorkspaceLayout layout;
  Storage storage = Storage::F32;
  bool grad = false;
  /// An empty convolution: every output is zero, nothing runs on cuDNN.
  bool empty = false;
  /// Bytes of one X element.
  int64_t elementBytes = 0;
  /// The cuDNN scratch within the node's slice (after the padded copies).
  uint64_t workspaceBytes = 0;
  /// Conv: B is present. ConvGrad: which of dX, dW, dB are.
  bool bias = false;
  bool outputs[3] = {false, false, false};
  /// Each result's bytes (an empty convolution clears them).
  uint64_t resultBytes[3] = {0, 0, 0};
  std::shared_ptr<ConvPlan> plan;
};

} // namespace

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
cnn::prepareConv(const Node &node, const KernelPreparation &preparation,
                 CudaKernelContext &ctx) {
  if (llvm::Error err = checkConv(node))
    return err;
  auto d = std::make_unique<ConvDescriptor>();
  d->params = *resolveConvParams(node);
  const WindowParams &g = d->params.window;
  d->grad = node.getOpType() == "ConvGrad";
  for (unsigned i = 0; i < 3 && i < node.getNumResults(); ++i)
    if (const Value *result = node.getResult(i)) {
      d->outputs[i] = true;
      d->resultBytes[i] = result->getType().getSizeInBytes();
    }
  d->bias = !d->grad && node.getNumOperands() > 2 && node.getOperand(2);
  d->empty = g.batch * g.channels * g.inSize() == 0 ||
             g.batch * d->params.outChannels * g.outSize() == 0;
  if (d->empty)
    return d;
  if (llvm::Error err = requireCudnn(node, ctx))
    return err;
  d->storage = *storageOf(node.getOperand(0)->getType().getDType());
  d->elementBytes = dispatch::elementBytes(node.getOperand(d->grad ? 1 : 0));
  d->layout = getConvWorkspaceLayout(node, d->params);
  uint64_t sliceBytes = preparation.planned ? preparation.workspaceBytes : 0;
  if (d->layout.explicitPadding &&
      (!sliceBytes || sliceBytes < d->layout.scratchOffset))
    return nodeError(node,
                     "asymmetric pads are padded explicitly into the node's "
                     "planned workspace, which an eager (baseline) run does "
                     "not have");
  d->workspaceBytes = sliceBytes > d->layout.scratchOffset
                          ? sliceBytes - d->layout.scratchOffset
                          : 0;
  auto plan =
      makeConvPlan(node, d->layout.cudnn, d->storage, d->workspaceBytes, ctx);
  if (!plan)
    return plan.takeError();
  d->plan = std::move(*plan);
  return d;
}

llvm::Error cnn::runConv(CudaCall &call) {
  const Node &node = call.node;
  const auto &d = call.getDescriptor<ConvDescriptor>();
  const WindowParams &g = d.params.window;
  if (d.empty) {
    // An empty convolution: every output is zero.
    for (unsigned i = 0; i < 3; ++i)
      if (d.outputs[i] && d.resultBytes[i])
        if (llvm::Error err =
                call.check(cudaMemsetAsync(call.outPtr(i), 0, d.resultBytes[i],
                                           call.ctx.stream),
                           "cudaMemsetAsync"))
          return err;
    return llvm::Error::success();
  }
  const ConvWorkspaceLayout &layout = d.layout;
  auto *slice = static_cast<char *>(call.launch.workspace);
  if (layout.explicitPadding && !slice)
    return nodeError(node, "the planned workspace slice is missing");
  void *workspace =
      d.workspaceBytes && slice ? slice + layout.scratchOffset : nullptr;
  uint64_t workspaceBytes = workspace ? d.workspaceBytes : 0;
  const ConvPlan &plan = *d.plan;
  cudnnHandle_t handle = call.ctx.cudnn->handle;
  // X as cuDNN reads it: the node's, or padded into the slice.
  const void *x = call.inPtr(d.grad ? 1 : 0);
  if (layout.explicitPadding && layout.paddedXBytes) {
    void *padded = slice + layout.paddedXOffset;
    if (llvm::Error err = call.check(launchConvPad(x, padded, d.elementBytes,
                                                   layout.pad, call.ctx.stream),
                                     "convolution pad kernel"))
      return err;
    x = padded;
  }
  // 16-bit data scales in fp32 as well (cuDNN's scaling type for HALF and
  // BFLOAT16 is float).
  const float one = 1, zero = 0;
  if (!d.grad) {
    CUDNN_CHECK(node, cudnnConvolutionForward(
                          handle, &one, plan.x, x, plan.w, call.inPtr(1),
                          plan.forward, plan.forwardAlgo, workspace,
                          workspaceBytes, &zero, plan.y, call.outPtr(0)));
    if (!d.bias)
      return llvm::Error::success();
    if (d.storage != Storage::F32)
      return call.check(
          launchConvBias16(d.storage, call.outPtr(0), call.inPtr(2), g.batch,
                           d.params.outChannels, g.outSize(), call.ctx.stream),
          "convolution bias kernel");
    CUDNN_CHECK(node, cudnnAddTensor(handle, &one, plan.bias, call.inPtr(2),
                                     &one, plan.y, call.outPtr(0)));
    return llvm::Error::success();
  }
  // ConvGrad(dY, X, W) -> (dX?, dW?, dB?), one after another on the stream
  // (each may use the whole scratch).
  if (d.outputs[0]) {
    void *dx =
        layout.explicitPadding ? slice + layout.paddedDxOffset : call.outPtr(0);
    CUDNN_CHECK(node, cudnnConvolutionBackwardData(
                          handle, &one, plan.w, call.inPtr(2), plan.y,
                          call.inPtr(0), plan.data, plan.dataAlgo, workspace,
                          workspaceBytes, &zero, plan.x, dx));
    if (layout.explicitPadding)
      if (llvm::Error err =
              call.check(launchConvCrop(dx, call.outPtr(0), d.elementBytes,
                                        layout.pad, call.ctx.stream),
                         "convolution crop kernel"))
        return err;
  }
  if (d.outputs[1])
    CUDNN_CHECK(node, cudnnConvolutionBackwardFilter(
                          handle, &one, plan.x, x, plan.y, call.inPtr(0),
                          plan.filter, plan.filterAlgo, workspace,
                          workspaceBytes, &zero, plan.w, call.outPtr(1)));
  if (!d.outputs[2])
    return llvm::Error::success();
  if (d.storage != Storage::F32)
    return call.check(launchConvBiasGrad16(
                          d.storage, call.inPtr(0), call.outPtr(2), g.batch,
                          d.params.outChannels, g.outSize(), call.ctx.stream),
                      "convolution bias-gradient kernel");
  CUDNN_CHECK(node,
              cudnnConvolutionBackwardBias(handle, &one, plan.y, call.inPtr(0),
                                           &zero, plan.bias, call.outPtr(2)));
  return llvm::Error::success();
}

#endif // GMOPT_HAVE_CUDNN
