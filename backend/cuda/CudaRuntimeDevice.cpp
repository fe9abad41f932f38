//===- CudaRuntimeDevice.cpp - The CUDA backend's device ------------------===//
//
// The CUDA backend as a Device of the plan interpreter (built only with the
// toolkit). Planned mode: every block the interpreter asks for (one per
// persistent value, one arena) is a cudaMalloc made while preparing; an
// allocation once a step has started is refused, so a planned step never
// allocates. Eager mode (the PyTorch-eager baseline): blocks come from a
// dedicated stream-ordered memory pool (cudaMallocFromPoolAsync /
// cudaFreeAsync), released after their last use. All kernels are enqueued
// on one stream; synchronize waits for it and reports any device fault
// (a label or index out of range) naming the node that raised it.
// Besides that compute stream the device owns a copy stream (the host
// arena's asynchronous copies, into and out of page-locked memory) and a
// high-priority communication stream (the overlapped all-reduce's NCCL
// calls); work on them is ordered after the compute stream's by events and
// joined back by cudaStreamWaitEvent, so the host never waits for them.
// With ExecutorOptions::cudaGraph the executable runs the first step as
// usual (warm-up: cuBLASLt and cuDNN plans, lazily loaded code), captures
// the second on the compute stream (the side streams forked and joined by
// events inside the capture), instantiates it once and replays it with
// cudaGraphLaunch from then on: the arena fixes every address, and the
// step the random kernels key their Philox streams with is copied into a
// device counter from page-locked memory as the graph's first node. Every
// CUDA and cuBLASLt call is checked and its failure becomes an llvm::Error
// naming the call (and, in runNode, the node). Before the interpreter
// allocates anything, prepareCudaExecutable compares the plan's bytes with
// cudaMemGetInfo's free bytes and refuses a plan that cannot fit. Step
// times are CUDA events' elapsed device time around each step; after each
// step the eager pool's high-water marks and cudaMemGetInfo are read
// (getCudaMemoryMeasurement): the fall of the free memory from before the
// first allocation is cross-checked against the accounted bytes
// (CudaMeasurement.h), and an allocation that fails in a run names the
// free bytes and the options that would fit.
//
//===----------------------------------------------------------------------===//

#include "backend/Device.h"
#include "backend/Executor.h"
#include "backend/PlanInterpreter.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudaDispatch.h"
#include "backend/cuda/CudaGraphCapture.h"
#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/NcclCollectives.h"

#include "ir/Collectives.h"
#include "ir/Module.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>
#include <vector>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

llvm::Error callError(llvm::StringRef call, cudaError_t status) {
  // Clear a non-sticky error so later calls are not poisoned.
  (void)cudaGetLastError();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 llvm::formatv("{0} failed: {1} ({2})", call,
                                               cudaGetErrorString(status),
                                               cudaGetErrorName(status)));
}

llvm::Error check(cudaError_t status, llvm::StringRef call) {
  return status == cudaSuccess ? llvm::Error::success()
                               : callError(call, status);
}

/// cudaEvents (without timing) kept for reuse: a DeviceEvent gives its
/// event back when dropped instead of destroying it, so dropping one inside
/// a graph capture calls nothing on the CUDA runtime. Shared by the device
/// and every event it handed out, so either may go first.
class CudaEventPool {
public:
  ~CudaEventPool() {
    for (cudaEvent_t event : spare)
      (void)cudaEventDestroy(event);
  }
  llvm::Expected<cudaEvent_t> take() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!spare.empty()) {
        cudaEvent_t event = spare.back();
        spare.pop_back();
        return event;
      }
    }
    cudaEvent_t event = nullptr;
    if (auto err =
            check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                  "cudaEventCreateWithFlags"))
      return err;
    return event;
  }
  void giveBack(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(mutex);
    spare.push_back(event);
  }

private:
  std::mutex mutex;
  std::vector<cudaEvent_t> spare;
};

/// A DeviceEvent of the CUDA device: a cudaEvent recorded on the stream
/// whose work it marks.
class CudaDeviceEvent final : public DeviceEvent {
public:
  CudaDeviceEvent(std::shared_ptr<CudaEventPool> pool, cudaEvent_t event)
      : pool(std::move(pool)), event(event) {}
  ~CudaDeviceEvent() override { pool->giveBack(event); }
  cudaEvent_t get() const { return event; }

private:
  std::shared_ptr<CudaEventPool> pool;
  cudaEvent_t event;
};

class CudaDevice final : public Device {
public:
  /// \p communicator: the data-parallel ranks' NCCL communicator, or null.
  CudaDevice(CudaDeviceInfo info, CudaDeviceOptions cudaOptions,
             std::unique_ptr<NcclCommunicator> communicator)
      : info(std::move(info)), cudaOptions(std::move(cudaOptions)),
        communicator(std::move(communicator)) {
    context.communicator = this->communicator.get();
  }
  ~CudaDevice() override;

  llvm::StringRef getName() const override { return "cuda"; }
  llvm::StringRef getWorkspaceModelName() const override {
    return kCudaWorkspaceModelName;
  }

  llvm::Error initialize(MemoryCounter &counter,
                         const ExecutorOptions &options) override;
  llvm::Expected<std::unique_ptr<PreparedKernel>>
  prepare(const Node &node, const KernelPreparation &preparation) override;

  llvm::Expected<void *> allocate(uint64_t bytes) override;
  void deallocate(void *address) override;
  llvm::Error copyToDevice(void *target, const void *source,
                           uint64_t bytes) override;
  llvm::Error copyToHost(void *target, const void *source,
                         uint64_t bytes) const override;
  llvm::Expected<void *> allocateHost(uint64_t bytes) override;
  void deallocateHost(void *address) override;
  llvm::Expected<std::unique_ptr<DeviceEvent>>
  startCopyToHost(void *target, const void *source, uint64_t bytes) override;
  llvm::Expected<std::unique_ptr<DeviceEvent>>
  startCopyToDevice(void *target, const void *source, uint64_t bytes) override;
  llvm::Error waitEvent(const DeviceEvent &event) override;
  llvm::Error fillZero(void *target, uint64_t bytes) override;
  llvm::Error runNode(const PreparedKernel &kernel,
                      const NodeLaunch &launch) override;
  /// Waits for the compute, copy and communication streams and reports a
  /// device fault. While a step is captured it only joins the side streams
  /// into the capture (nothing runs, so there is nothing to wait for).
  llvm::Error synchronize() override;

  /// Starts capturing the compute stream into a CUDA graph (after a
  /// warm-up step): its first node copies the step from page-locked host
  /// memory into the device counter the random kernels then read.
  llvm::Error beginCapture();
  /// Ends the capture begun by beginCapture and returns its graph.
  llvm::Expected<cudaGraph_t> endCapture();
  /// Ends a capture that failed, dropping what was captured.
  void abandonCapture();
  /// Launches \p graph, captured by this device, for step \p step.
  llvm::Error launchGraph(cudaGraphExec_t graph, uint64_t step);

  /// The compute stream every kernel is enqueued on (null before
  /// initialize).
  cudaStream_t getStream() const { return stream; }
  /// Eager mode's dedicated memory pool (null in planned mode).
  cudaMemPool_t getPool() const { return pool; }
  /// Planned mode: the cudaMalloc blocks made so far.
  uint64_t getAllocationCount() const { return allocations; }

private:
  llvm::Error outOfMemory(uint64_t bytes, cudaError_t status,
                          llvm::StringRef call);
  /// Makes \p to wait (cudaStreamWaitEvent) for the work enqueued on
  /// \p from so far.
  llvm::Error order(cudaStream_t from, cudaStream_t to);
  /// Starts an asynchronous copy on the copy stream after the compute
  /// stream's work so far; the returned event completes with it.
  llvm::Expected<std::unique_ptr<DeviceEvent>>
  startCopy(void *target, const void *source, uint64_t bytes,
            cudaMemcpyKind kind, llvm::StringRef what);
  /// While capturing: joins \p side into the capture when it was forked.
  llvm::Error joinCapture(cudaStream_t side);

  CudaDeviceInfo info;
  CudaDeviceOptions cudaOptions;
  bool eager = false;
  /// Set by the first runNode: from then on a planned run allocates
  /// nothing.
  bool stepStarted = false;
  cudaStream_t stream = nullptr;
  /// The host arena's asynchronous copies.
  cudaStream_t copyStream = nullptr;
  /// The overlapped all-reduce's NCCL calls (highest priority, so a bucket
  /// does not queue behind the backward's kernels).
  cudaStream_t commStream = nullptr;
  std::shared_ptr<CudaEventPool> events = std::make_shared<CudaEventPool>();
  cudaMemPool_t pool = nullptr;
  uint64_t allocations = 0;
  /// True between beginCapture and endCapture.
  bool capturing = false;
  /// The device counter random kernels of a captured step read, and the
  /// page-locked word each graph launch copies the step from.
  uint64_t *stepCounter = nullptr;
  uint64_t *stepHost = nullptr;
  /// The nodes of the captured step, by launch id (fault reports of a
  /// replay, whose launches the device does not see).
  std::vector<const Node *> capturedNodes;
  std::unique_ptr<NcclCommunicator> communicator;
  CudaKernelContext context;
  /// The node of each launch since the last synchronization.
  std::vector<const Node *> launchedNodes;
};

CudaDevice::~CudaDevice() {
  // Errors cannot be reported from a destructor; the process is exiting
  // or the executable is being dropped.
  if (capturing)
    abandonCapture();
  for (cudaStream_t each : {stream, copyStream, commStream})
    if (each)
      (void)cudaStreamSynchronize(each);
  context.cudnn.reset(); // Before its stream goes.
  if (context.blasLt)
    (void)cublasLtDestroy(context.blasLt);
  if (pool)
    (void)cudaMemPoolDestroy(pool);
  if (stepHost)
    (void)cudaFreeHost(stepHost);
  for (cudaStream_t each : {stream, copyStream, commStream})
    if (each)
      (void)cudaStreamDestroy(each);
}

llvm::Error CudaDevice::initialize(MemoryCounter &counter,
                                   const ExecutorOptions &options) {
  (void)counter; // The kernels allocate no scratch of their own.
  eager = options.mode == AllocationMode::Eager;
  context.seed = options.seed;
  context.allowTf32 = cudaOptions.allowTf32;
  if (auto err = check(cudaSetDevice(info.ordinal), "cudaSetDevice"))
    return err;
  if (auto err =
          check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags"))
    return err;
  context.stream = stream;
  if (auto err =
          check(cudaStreamCreateWithFlags(&copyStream, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags (the copy stream)"))
    return err;
  int leastPriority = 0, greatestPriority = 0;
  if (auto err = check(
          cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority),
          "cudaDeviceGetStreamPriorityRange"))
    return err;
  if (auto err =
          check(cudaStreamCreateWithPriority(&commStream, cudaStreamNonBlocking,
                                             greatestPriority),
                "cudaStreamCreateWithPriority (the communication "
                "stream)"))
    return err;
  context.commStream = commStream;
  if (options.cudaGraph) {
    if (auto err = check(getStepCounter(&stepCounter),
                         "cudaGetSymbolAddress (the step counter)"))
      return err;
    void *host = nullptr;
    if (auto err =
            check(cudaHostAlloc(&host, sizeof(uint64_t), cudaHostAllocDefault),
                  "cudaHostAlloc (the step word)"))
      return err;
    stepHost = static_cast<uint64_t *>(host);
    *stepHost = 0;
  }
  cublasStatus_t status = cublasLtCreate(&context.blasLt);
  if (status != CUBLAS_STATUS_SUCCESS)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("cublasLtCreate failed: cuBLAS status {0}",
                      static_cast<int>(status)));
  if (auto err = createCudnnState(context))
    return err;
  if (eager) {
    // A pool of its own, so its high-water marks are the baseline's alone,
    // and released memory is kept for reuse like PyTorch's caching
    // allocator does.
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = info.ordinal;
    if (auto err = check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate"))
      return err;
    uint64_t keep = UINT64_MAX;
    if (auto err = check(cudaMemPoolSetAttribute(
                             pool, cudaMemPoolAttrReleaseThreshold, &keep),
                         "cudaMemPoolSetAttribute"))
      return err;
    context.scratchPool = pool;
  }
  return llvm::Error::success();
}

llvm::Error CudaDevice::outOfMemory(uint64_t bytes, cudaError_t status,
                                    llvm::StringRef call) {
  (void)cudaGetLastError();
  size_t freeBytes = 0, totalBytes = 0;
  (void)cudaMemGetInfo(&freeBytes, &totalBytes);
  return outOfDeviceMemoryError(bytes, freeBytes, totalBytes, info.name,
                                (call + ": " + cudaGetErrorName(status)).str());
}

llvm::Expected<void *> CudaDevice::allocate(uint64_t bytes) {
  if (!eager && stepStarted)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("the CUDA device was asked for {0} bytes during a "
                      "planned step; planned steps allocate nothing",
                      bytes));
  uint64_t rounded = alignBuffer(bytes ? bytes : 1);
  void *address = nullptr;
  cudaError_t status =
      eager ? cudaMallocFromPoolAsync(&address, rounded, pool, stream)
            : cudaMalloc(&address, rounded);
  llvm::StringRef call = eager ? "cudaMallocFromPoolAsync" : "cudaMalloc";
  if (status == cudaErrorMemoryAllocation)
    return outOfMemory(bytes, status, call);
  if (status != cudaSuccess)
    return callError(call, status);
  if (!eager)
    ++allocations;
  return address;
}

void CudaDevice::deallocate(void *address) {
  if (!address)
    return;
  // A failure here leaves the block to the driver at exit; it cannot be
  // reported through the interface.
  if (eager)
    (void)cudaFreeAsync(address, stream);
  else
    (void)cudaFree(address);
}

llvm::Error CudaDevice::copyToDevice(void *target, const void *source,
                                     uint64_t bytes) {
  if (!bytes)
    return llvm::Error::success();
  // Synchronous with respect to the host buffer: the caller may reuse it.
  if (auto err = check(cudaMemcpyAsync(target, source, bytes,
                                       cudaMemcpyHostToDevice, stream),
                       "cudaMemcpyAsync (host to device)"))
    return err;
  return check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

llvm::Error CudaDevice::copyToHost(void *target, const void *source,
                                   uint64_t bytes) const {
  if (!bytes)
    return llvm::Error::success();
  if (auto err = check(cudaMemcpyAsync(target, source, bytes,
                                       cudaMemcpyDeviceToHost, stream),
                       "cudaMemcpyAsync (device to host)"))
    return err;
  return check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

llvm::Expected<void *> CudaDevice::allocateHost(uint64_t bytes) {
  // Page-locked, so the copy stream's copies run asynchronously beside the
  // compute stream; cudaHostAlloc's blocks are page aligned, which is more
  // than kBufferAlignment.
  uint64_t rounded = alignBuffer(bytes ? bytes : 1);
  if (rounded < bytes)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("cannot allocate {0} host-arena bytes: the size "
                      "overflows",
                      bytes));
  void *address = nullptr;
  cudaError_t status = cudaHostAlloc(&address, rounded, cudaHostAllocDefault);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("cudaHostAlloc failed allocating {0} bytes of "
                      "page-locked host memory for the host arena: {1} ({2})",
                      bytes, cudaGetErrorString(status),
                      cudaGetErrorName(status)));
  }
  return address;
}

void CudaDevice::deallocateHost(void *address) {
  if (address)
    (void)cudaFreeHost(address);
}

llvm::Error CudaDevice::order(cudaStream_t from, cudaStream_t to) {
  auto event = events->take();
  if (!event)
    return event.takeError();
  // The wait takes the event's state when it is made: the event can go
  // back to the pool at once.
  llvm::Error err = check(cudaEventRecord(*event, from), "cudaEventRecord");
  if (!err)
    err = check(cudaStreamWaitEvent(to, *event, 0), "cudaStreamWaitEvent");
  events->giveBack(*event);
  return err;
}

llvm::Expected<std::unique_ptr<DeviceEvent>>
CudaDevice::startCopy(void *target, const void *source, uint64_t bytes,
                      cudaMemcpyKind kind, llvm::StringRef what) {
  if (auto err = order(stream, copyStream))
    return err;
  if (bytes)
    if (auto err = check(
            cudaMemcpyAsync(target, source, bytes, kind, copyStream), what))
      return err;
  auto done = events->take();
  if (!done)
    return done.takeError();
  auto event = std::make_unique<CudaDeviceEvent>(events, *done);
  if (auto err = check(cudaEventRecord(*done, copyStream), "cudaEventRecord"))
    return err;
  return std::unique_ptr<DeviceEvent>(std::move(event));
}

llvm::Expected<std::unique_ptr<DeviceEvent>>
CudaDevice::startCopyToHost(void *target, const void *source, uint64_t bytes) {
  return startCopy(target, source, bytes, cudaMemcpyDeviceToHost,
                   "cudaMemcpyAsync (device to host, the copy stream)");
}

llvm::Expected<std::unique_ptr<DeviceEvent>>
CudaDevice::startCopyToDevice(void *target, const void *source,
                              uint64_t bytes) {
  return startCopy(target, source, bytes, cudaMemcpyHostToDevice,
                   "cudaMemcpyAsync (host to device, the copy stream)");
}

llvm::Error CudaDevice::waitEvent(const DeviceEvent &event) {
  const auto *cudaEvent = dynamic_cast<const CudaDeviceEvent *>(&event);
  assert(cudaEvent && "an event this device made");
  if (!cudaEvent)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the CUDA device was asked to wait for an "
                                   "event another device made");
  return check(cudaStreamWaitEvent(stream, cudaEvent->get(), 0),
               "cudaStreamWaitEvent");
}

llvm::Error CudaDevice::fillZero(void *target, uint64_t bytes) {
  if (!bytes)
    return llvm::Error::success();
  return check(cudaMemsetAsync(target, 0, bytes, stream), "cudaMemsetAsync");
}

/// A node's CUDA kernel as prepareCudaKernel made it.
class CudaDeviceKernel final : public PreparedKernel {
public:
  CudaDeviceKernel(const Node &node, CudaPreparedKernel kernel)
      : PreparedKernel(node), kernel(std::move(kernel)) {}

  const CudaPreparedKernel &getKernel() const { return kernel; }

private:
  CudaPreparedKernel kernel;
};

llvm::Expected<std::unique_ptr<PreparedKernel>>
CudaDevice::prepare(const Node &node, const KernelPreparation &preparation) {
  auto kernel = prepareCudaKernel(node, preparation, context);
  if (!kernel)
    return kernel.takeError();
  return std::make_unique<CudaDeviceKernel>(node, std::move(*kernel));
}

llvm::Error CudaDevice::runNode(const PreparedKernel &kernel,
                                const NodeLaunch &launch) {
  stepStarted = true;
  context.step = launch.step;
  context.launchId = static_cast<int32_t>(launchedNodes.size());
  launchedNodes.push_back(launch.node);
  if (llvm::Error err = runCudaKernel(
          static_cast<const CudaDeviceKernel &>(kernel).getKernel(), launch,
          context))
    return err;
  // Catches launch-configuration errors the launchers did not see.
  cudaError_t status = cudaPeekAtLastError();
  if (status != cudaSuccess)
    return cudaCallError(*launch.node, "kernel launch", status);
  return llvm::Error::success();
}

llvm::Error CudaDevice::joinCapture(cudaStream_t side) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (auto err =
          check(cudaStreamIsCapturing(side, &status), "cudaStreamIsCapturing"))
    return err;
  // A side stream that never waited for the compute stream is not in the
  // capture and has nothing to join.
  if (status != cudaStreamCaptureStatusActive)
    return llvm::Error::success();
  return order(side, stream);
}

llvm::Error CudaDevice::beginCapture() {
  assert(!capturing && stepCounter && stepHost && "one capture at a time");
  // Thread-local: another thread's CUDA calls do not disturb the capture,
  // and a call of this thread that would synchronize fails instead of
  // silently running outside the graph.
  if (auto err = check(
          cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
          "cudaStreamBeginCapture"))
    return err;
  capturing = true;
  context.stepOnDevice = stepCounter;
  // The graph's first node: each launch copies the step it runs.
  return check(cudaMemcpyAsync(stepCounter, stepHost, sizeof(uint64_t),
                               cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync (the step counter)");
}

llvm::Expected<cudaGraph_t> CudaDevice::endCapture() {
  assert(capturing && "a capture to end");
  llvm::Error joined = joinCapture(copyStream);
  if (!joined)
    joined = joinCapture(commStream);
  cudaGraph_t graph = nullptr;
  cudaError_t status = cudaStreamEndCapture(stream, &graph);
  capturing = false;
  context.stepOnDevice = nullptr;
  capturedNodes.swap(launchedNodes);
  launchedNodes.clear();
  if (joined) {
    if (graph)
      (void)cudaGraphDestroy(graph);
    return joined;
  }
  if (status != cudaSuccess) {
    if (graph)
      (void)cudaGraphDestroy(graph);
    return callError("cudaStreamEndCapture", status);
  }
  return graph;
}

void CudaDevice::abandonCapture() {
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream, &graph);
  if (graph)
    (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  capturing = false;
  context.stepOnDevice = nullptr;
  launchedNodes.clear();
}

llvm::Error CudaDevice::launchGraph(cudaGraphExec_t graph, uint64_t step) {
  // The previous launch has finished (each step ends synchronized), so the
  // word is free to change.
  *stepHost = step;
  launchedNodes = capturedNodes;
  return check(cudaGraphLaunch(graph, stream), "cudaGraphLaunch");
}

llvm::Error CudaDevice::synchronize() {
  if (capturing) {
    // Nothing captured runs yet: join the side streams (so the capture
    // ends joined) and wait for nothing.
    if (auto err = joinCapture(copyStream))
      return err;
    return joinCapture(commStream);
  }
  cudaError_t status = cudaStreamSynchronize(stream);
  // Side-stream work is joined into the compute stream by events, but a
  // copy nobody waited for would still be running.
  for (cudaStream_t side : {copyStream, commStream})
    if (status == cudaSuccess && side)
      status = cudaStreamSynchronize(side);
  if (status != cudaSuccess) {
    std::string last = launchedNodes.empty() ? std::string("none")
                                             : launchedNodes.back()->describe();
    launchedNodes.clear();
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("cudaStreamSynchronize failed: {0} ({1}); the last "
                      "node launched was {2}",
                      cudaGetErrorString(status), cudaGetErrorName(status),
                      last));
  }
  // A collective whose peer failed (or a network error) is reported here.
  if (communicator)
    if (llvm::Error err = communicator->checkAsyncError(
            launchedNodes.empty() ? nullptr : launchedNodes.back())) {
      launchedNodes.clear();
      return err;
    }
  KernelFaultRecord fault;
  status = readKernelFault(fault, stream);
  std::vector<const Node *> nodes;
  nodes.swap(launchedNodes);
  if (status != cudaSuccess)
    return callError("reading the kernel fault word", status);
  if (fault.code == 0)
    return llvm::Error::success();
  std::string where =
      fault.launchId >= 0 && static_cast<size_t>(fault.launchId) < nodes.size()
          ? nodes[fault.launchId]->describe()
          : std::string("unknown");
  const char *what =
      fault.code == static_cast<int32_t>(KernelFault::LabelOutOfRange)
          ? "a label is out of range [0, classes)"
      : fault.code == static_cast<int32_t>(KernelFault::OutputShapeMismatch)
          ? "the operand values give another output shape than the planned "
            "one (a data-dependent count, length or depth)"
      : fault.code == static_cast<int32_t>(KernelFault::InvalidOperandValue)
          ? "an operand value is invalid (a zero Range delta or shapes that "
            "do not broadcast)"
          : "an index is out of range";
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("CUDA kernel: {0} (node {1})", what, where));
}

/// Bytes the interpreter allocates for \p module's persistent values (graph
/// inputs, initializers, graph outputs), each rounded to kBufferAlignment.
uint64_t persistentBytes(const Module &module) {
  const Graph &graph = module.getGraph();
  uint64_t bytes = 0;
  llvm::SmallPtrSet<const Value *, 32> seen;
  auto add = [&](const Value *value) {
    if (value && seen.insert(value).second)
      bytes += alignBuffer(value->getType().getSizeInBytes());
  };
  for (const auto &input : graph.getInputs())
    add(input.get());
  for (const auto &init : graph.getInitializers())
    add(init.get());
  for (const Node &node : graph.getNodes())
    for (const Value *result : node.getResults())
      if (result && result->isGraphOutput())
        add(result);
  return bytes;
}

/// The plan interpreter over a CudaDevice, with step times from CUDA
/// events: getLastStepMilliseconds is the device time between an event
/// recorded on the stream before the step's first launch and one recorded
/// after its final synchronization, not the host's wall time. With
/// ExecutorOptions::cudaGraph the second step is captured and every later
/// one replays it (the device's beginCapture/launchGraph). Everything else
/// is the interpreter's.
class CudaExecutable final : public Executable {
public:
  /// \p freeBeforeBytes: cudaMemGetInfo's free bytes before anything of
  /// the executable was allocated.
  CudaExecutable(std::unique_ptr<Executable> inner, CudaDevice &device,
                 cudaEvent_t start, cudaEvent_t stop, uint64_t freeBeforeBytes,
                 bool cudaGraph)
      : inner(std::move(inner)), device(device), start(start), stop(stop),
        cudaGraph(cudaGraph) {
    measured.freeBeforeBytes = freeBeforeBytes;
    measured.eager = device.getPool() != nullptr;
  }
  ~CudaExecutable() override {
    if (graph)
      (void)cudaGraphExecDestroy(graph);
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
  }

  const Module &getModule() const override { return inner->getModule(); }
  llvm::Error setInput(const Value *input, const TensorData &data) override {
    return inner->setInput(input, data);
  }
  llvm::Error writeValue(const Value *value, const TensorData &data) override {
    return inner->writeValue(value, data);
  }
  llvm::Expected<TensorData> readValue(const Value *value) const override {
    return inner->readValue(value);
  }
  llvm::Error runStep(uint64_t step) override;
  llvm::Expected<TensorData>
  readGradient(const ParamInfo &param) const override {
    return inner->readGradient(param);
  }
  MemoryReport getMemoryReport() const override {
    return inner->getMemoryReport();
  }
  void resetPeak() override;
  double getLastStepMilliseconds() const override { return lastStepMs; }
  uint64_t getArenaBytes() const override { return inner->getArenaBytes(); }
  uint64_t getHostArenaBytes() const override {
    return inner->getHostArenaBytes();
  }
  uint64_t getUnplannedScratchBytes() const override {
    return inner->getUnplannedScratchBytes();
  }
  std::vector<OpProfile> getProfile() const override {
    return inner->getProfile();
  }
  std::vector<NodeTiming> getLastStepNodeTimings() const override {
    return inner->getLastStepNodeTimings();
  }

  /// The device's figures since prepare or the last resetPeak.
  const CudaMemoryMeasurement &getMeasurement() const { return measured; }

private:
  /// Reads the pool's high-water marks and cudaMemGetInfo after a step.
  llvm::Error measureMemory();
  /// Runs step \p step's work: the interpreter's, or the captured graph.
  llvm::Error enqueueStep(uint64_t step);
  /// Captures step \p step through the interpreter and instantiates it.
  llvm::Error captureStep(uint64_t step);

  std::unique_ptr<Executable> inner;
  CudaDevice &device;
  cudaEvent_t start;
  cudaEvent_t stop;
  double lastStepMs = 0;
  CudaMemoryMeasurement measured;
  /// ExecutorOptions::cudaGraph.
  bool cudaGraph = false;
  /// Steps run so far (the first is the uncaptured warm-up).
  uint64_t stepsRun = 0;
  /// The instantiated capture (null before the second step).
  cudaGraphExec_t graph = nullptr;
};

void CudaExecutable::resetPeak() {
  inner->resetPeak();
  measured.poolUsedHighBytes = measured.poolReservedHighBytes = 0;
  measured.deviceUsedBytes = 0;
  measured.lowestFreeBytes = 0;
  measured.stepsMeasured = 0;
  // Setting a high-water mark to 0 restarts it from the current bytes.
  if (cudaMemPool_t pool = device.getPool()) {
    uint64_t zero = 0;
    (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
    (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero);
  }
}

llvm::Error CudaExecutable::measureMemory() {
  if (cudaMemPool_t pool = device.getPool()) {
    measured.eager = true;
    uint64_t used = 0, reserved = 0;
    if (auto err = check(
            cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used),
            "cudaMemPoolGetAttribute (UsedMemHigh)"))
      return err;
    if (auto err = check(cudaMemPoolGetAttribute(
                             pool, cudaMemPoolAttrReservedMemHigh, &reserved),
                         "cudaMemPoolGetAttribute (ReservedMemHigh)"))
      return err;
    measured.poolUsedHighBytes = std::max(measured.poolUsedHighBytes, used);
    measured.poolReservedHighBytes =
        std::max(measured.poolReservedHighBytes, reserved);
  }
  size_t freeBytes = 0, totalBytes = 0;
  if (auto err =
          check(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo"))
    return err;
  measured.deviceUsedBytes =
      std::max<uint64_t>(measured.deviceUsedBytes, totalBytes - freeBytes);
  measured.lowestFreeBytes =
      measured.stepsMeasured
          ? std::min<uint64_t>(measured.lowestFreeBytes, freeBytes)
          : freeBytes;
  ++measured.stepsMeasured;
  measured.countedPeakBytes = inner->getMemoryReport().peakBytes;
  measured.deviceAllocations = device.getAllocationCount();
  return llvm::Error::success();
}

llvm::Error CudaExecutable::captureStep(uint64_t step) {
  if (auto err = device.beginCapture())
    return err;
  // The interpreter enqueues the step's launches and copies, none of which
  // runs yet; its closing synchronize only joins the side streams.
  if (auto err = inner->runStep(step)) {
    device.abandonCapture();
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--cuda-graph: capturing the step failed: " +
                                       llvm::toString(std::move(err)));
  }
  auto captured = device.endCapture();
  if (!captured)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--cuda-graph: capturing the step failed: " +
                                       llvm::toString(captured.takeError()));
  cudaError_t status = cudaGraphInstantiate(&graph, *captured, 0);
  (void)cudaGraphDestroy(*captured);
  if (status != cudaSuccess) {
    graph = nullptr;
    return callError("cudaGraphInstantiate (--cuda-graph)", status);
  }
  return llvm::Error::success();
}

llvm::Error CudaExecutable::enqueueStep(uint64_t step) {
  // The first step runs uncaptured: it makes the cuBLASLt and cuDNN plans
  // and loads the kernels' code, none of which a graph may do.
  if (!cudaGraph || stepsRun == 0)
    return inner->runStep(step);
  assert(graph && "runStep captured the graph before it started timing");
  if (auto err = device.launchGraph(graph, step))
    return err;
  return device.synchronize();
}

llvm::Error CudaExecutable::runStep(uint64_t step) {
  // Captured (on the host; nothing runs) before the step's time starts.
  if (cudaGraph && stepsRun != 0 && !graph)
    if (auto err = captureStep(step))
      return err;
  if (auto err =
          check(cudaEventRecord(start, device.getStream()), "cudaEventRecord"))
    return err;
  // The interpreter (or, replaying, the executable) synchronizes the
  // streams before it returns.
  if (auto err = enqueueStep(step))
    return err;
  ++stepsRun;
  if (auto err =
          check(cudaEventRecord(stop, device.getStream()), "cudaEventRecord"))
    return err;
  if (auto err = check(cudaEventSynchronize(stop), "cudaEventSynchronize"))
    return err;
  float milliseconds = 0;
  if (auto err = check(cudaEventElapsedTime(&milliseconds, start, stop),
                       "cudaEventElapsedTime"))
    return err;
  lastStepMs = milliseconds;
  return measureMemory();
}

} // namespace

std::optional<CudaMemoryMeasurement>
gmopt::getCudaMemoryMeasurement(const Executable &executable) {
  if (const auto *cuda = dynamic_cast<const CudaExecutable *>(&executable))
    return cuda->getMeasurement();
  return std::nullopt;
}

llvm::Expected<std::unique_ptr<Executable>>
gmopt::prepareCudaExecutable(const Module &module,
                             const ExecutorOptions &options,
                             const CudaDeviceOptions &cudaOptions) {
  // Refused before anything is allocated, naming the node or option.
  if (options.cudaGraph)
    if (llvm::Error err = checkCudaGraphCapturable(module, options, "cuda"))
      return err;
  auto info = probeCudaDevice();
  if (!info)
    return info.takeError();
  const CollectiveBootstrap &bootstrap = cudaOptions.bootstrap;
  // Data-parallel ranks on one machine take one GPU each.
  if (bootstrap.worldSize > 1 && bootstrap.localRank > 0) {
    int count = 0;
    if (auto err = check(cudaGetDeviceCount(&count), "cudaGetDeviceCount"))
      return err;
    int ordinal = bootstrap.localRank % std::max(count, 1);
    if (ordinal != info->ordinal) {
      cudaDeviceProp properties;
      if (auto err = check(cudaGetDeviceProperties(&properties, ordinal),
                           "cudaGetDeviceProperties"))
        return err;
      info->ordinal = ordinal;
      info->name = properties.name;
      info->computeMajor = properties.major;
      info->computeMinor = properties.minor;
      info->totalMemoryBytes = properties.totalGlobalMem;
    }
  }
  if (auto err = check(cudaSetDevice(info->ordinal), "cudaSetDevice"))
    return err;
  // Collectives need the ranks' communicator (every rank makes it here,
  // before any step); a one-rank run without NCCL copies instead.
  std::unique_ptr<NcclCommunicator> communicator;
  if (hasCollectives(module)) {
    for (const Node &node : module.getGraph().getNodes())
      if (isCudaCollective(node))
        if (llvm::Error err = checkCollectiveWorld(node, bootstrap))
          return err;
    auto made = NcclCommunicator::create(bootstrap, info->ordinal);
    if (made)
      communicator = std::move(*made);
    else if (bootstrap.worldSize > 1)
      return made.takeError();
    else
      llvm::consumeError(made.takeError());
  }
  // Refuse what cannot fit before allocating anything: never a half-run.
  size_t freeBytes = 0, totalBytes = 0;
  if (auto err =
          check(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo"))
    return err;
  uint64_t planned = persistentBytes(module);
  if (options.mode == AllocationMode::Planned)
    planned += module.plan.arenaBytes;
  if (auto err = checkPlannedBytesFit(planned, freeBytes, info->name))
    return err;
  auto device =
      std::make_unique<CudaDevice>(*info, cudaOptions, std::move(communicator));
  CudaDevice &deviceRef = *device;
  auto inner = createPlanInterpreter(module, options, std::move(device),
                                     getCudaKernelWorkspaceBytes);
  if (!inner)
    return inner.takeError();
  cudaEvent_t start = nullptr, stop = nullptr;
  if (auto err = check(cudaEventCreate(&start), "cudaEventCreate"))
    return err;
  if (auto err = check(cudaEventCreate(&stop), "cudaEventCreate")) {
    (void)cudaEventDestroy(start);
    return err;
  }
  return std::make_unique<CudaExecutable>(std::move(*inner), deviceRef, start,
                                          stop, freeBytes, options.cudaGraph);
}
