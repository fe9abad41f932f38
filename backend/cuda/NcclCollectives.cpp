//===- NcclCollectives.cpp - gmopt's collectives on CUDA over NCCL --------===//
//
// NcclCollectives.h's functions and the CUDA kernel-table entries of the
// gmopt collectives. The bootstrap's id agreement, the world-size check,
// the error messages, the kernel checks and the workspace sizes are plain
// host code, built in every configuration (the unit tests run them
// anywhere). The communicator is compiled with the toolkit and NCCL's
// header (GMOPT_HAVE_CUDA, GMOPT_HAVE_NCCL): NCCL's entry points are looked
// up in libnccl.so.2 with dlopen/dlsym the first time a communicator is
// made, so nothing links against NCCL and gmopt starts where it is absent.
// The kernel-table entries that use them are in CudaCollectiveDispatch.cpp.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/NcclCollectives.h"

#include "ir/Collectives.h"
#include "ir/IR.h"
#include "ir/Module.h"
#include "ir/Plan.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#ifdef GMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if defined(GMOPT_HAVE_CUDA) && defined(GMOPT_HAVE_NCCL)
#include <nccl.h>

#include <dlfcn.h>

#include <cstring>
#include <mutex>
#endif

using namespace gmopt;

namespace {
llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

bool isReducibleFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}
} // namespace

bool gmopt::isNcclBuilt() {
#if defined(GMOPT_HAVE_CUDA) && defined(GMOPT_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

llvm::Expected<std::vector<uint8_t>> gmopt::agreeOnUniqueId(
    const CollectiveBootstrap &bootstrap, size_t idBytes,
    llvm::function_ref<llvm::Expected<std::vector<uint8_t>>()> makeId) {
  if (bootstrap.worldSize < 1 || bootstrap.rank < 0 ||
      bootstrap.rank >= bootstrap.worldSize)
    return fail(llvm::formatv("NCCL bootstrap ({0}): rank {1} is outside a "
                              "world of {2}",
                              bootstrap.source, bootstrap.rank,
                              bootstrap.worldSize));
  if (bootstrap.worldSize > 1 && !bootstrap.broadcastFromRankZero)
    return fail(llvm::formatv("NCCL bootstrap ({0}): {1} ranks but no way to "
                              "send rank 0's unique id to the others",
                              bootstrap.source, bootstrap.worldSize));
  std::vector<uint8_t> id(idBytes, 0);
  if (bootstrap.rank == 0) {
    auto made = makeId();
    if (!made)
      return made.takeError();
    if (made->size() != idBytes)
      return fail(llvm::formatv("NCCL bootstrap: the unique id has {0} bytes, "
                                "expected {1}",
                                made->size(), idBytes));
    id = std::move(*made);
  }
  if (bootstrap.worldSize > 1)
    if (llvm::Error err = bootstrap.broadcastFromRankZero(id))
      return fail(llvm::formatv("NCCL bootstrap ({0}): broadcasting the "
                                "unique id from rank 0 failed: {1}",
                                bootstrap.source,
                                llvm::toString(std::move(err))));
  return id;
}

llvm::Error gmopt::checkCollectiveWorld(const Node &node,
                                        const CollectiveBootstrap &bootstrap) {
  int64_t ranks = getCollectiveRanks(node);
  if (ranks == bootstrap.worldSize)
    return llvm::Error::success();
  return fail(llvm::formatv(
      "{0} was compiled for {1} data-parallel ranks but this CUDA run has {2} "
      "({3}); launch it with `mpirun -np {1} gmopt-run ...`",
      node.describe(), ranks, bootstrap.worldSize, bootstrap.source));
}

bool gmopt::isCudaCollective(const Node &node) {
  if (node.getDomain() != kGmoptDomain)
    return false;
  llvm::StringRef op = node.getOpType();
  return op == kAllReduceOp || op == kAllReduceStartOp ||
         op == kAllReduceWaitOp || op == kReduceScatterOp ||
         op == kAllGatherOp || op == kShardOp;
}

bool gmopt::hasCollectives(const Module &module) {
  for (const Node &node : module.getGraph().getNodes())
    if (isCudaCollective(node))
      return true;
  return false;
}

llvm::Error gmopt::ncclCallError(llvm::StringRef call, int result,
                                 llvm::StringRef text, llvm::StringRef detail,
                                 const Node *node) {
  std::string message =
      llvm::formatv("{0} failed: {1} (ncclResult {2})", call, text, result);
  if (!detail.empty())
    message += ": " + detail.str();
  if (node)
    message += " (node " + node->describe() + ")";
  return fail(message);
}

namespace {
/// Errors of the CUDA kernel checks, in the kernel table's words.
llvm::Error collectiveError(const Node &node, const llvm::Twine &message) {
  return fail("CUDA kernel for '" + node.getOp().str() + "': " + message +
              " (node " + node.describe() + ")");
}

/// \p node's collective attributes (getCollectiveAttrs), or its error in
/// the kernel table's words.
llvm::Expected<CollectiveAttrs> decodeAttrs(const Node &node) {
  auto attrs = getCollectiveAttrs(node);
  if (!attrs)
    return collectiveError(node, llvm::toString(attrs.takeError()));
  return attrs;
}

/// Whether this build can exchange data over \p ranks ranks.
llvm::Error checkRanks(const Node &node, llvm::StringRef what, int64_t ranks) {
  if (ranks > 1 && !isNcclBuilt())
    return collectiveError(
        node, llvm::formatv(
                  "{0} over {1} ranks needs NCCL, and gmopt was built without "
                  "NCCL (no nccl.h at configure time; install NCCL's headers "
                  "and reconfigure, or run with --backend=cpu over MPI)",
                  what, ranks));
  return llvm::Error::success();
}

/// The elements of the fp32 bucket operands [first, end) of \p node.
llvm::Expected<int64_t> floatBucketElements(const Node &node, unsigned first) {
  if (node.getNumOperands() <= first)
    return collectiveError(node, "the bucket has no tensor");
  int64_t elements = 0;
  for (unsigned i = first, e = node.getNumOperands(); i != e; ++i) {
    const Value *operand = node.getOperand(i);
    if (!operand)
      return collectiveError(node, llvm::formatv("operand {0} is absent", i));
    if (operand->getType().getDType() != DType::F32)
      return collectiveError(
          node, "element type " + dtypeName(operand->getType().getDType()) +
                    " is not supported (the bucket is f32)");
    if (!operand->getType().hasStaticShape())
      return collectiveError(node, "shapes must be static");
    elements += operand->getType().getNumElements();
  }
  return elements;
}

/// Success when \p value is present with \p dtype and \p elements.
llvm::Error expectTensor(const Node &node, const Value *value,
                         llvm::StringRef what, DType dtype, int64_t elements) {
  if (value && value->getType().getDType() == dtype &&
      value->getType().hasStaticShape() &&
      static_cast<int64_t>(value->getType().getNumElements()) == elements)
    return llvm::Error::success();
  return collectiveError(node, llvm::formatv("{0} must be {1}[{2}]", what,
                                             dtypeName(dtype), elements));
}

/// A done flag: an absent result or a bool tensor.
llvm::Error expectFlag(const Node &node, unsigned result) {
  const Value *flag =
      result < node.getNumResults() ? node.getResult(result) : nullptr;
  if (!flag || flag->getType().getDType() == DType::Bool)
    return llvm::Error::success();
  return collectiveError(node, "the done flag must be bool");
}
} // namespace

llvm::Error gmopt::checkCudaAllReduce(const Node &node) {
  auto attrs = decodeAttrs(node);
  if (!attrs)
    return attrs.takeError();
  if (llvm::Error err = checkRanks(node, "an all-reduce", attrs->ranks))
    return err;
  if (attrs->inPlace) {
    if (auto elements = floatBucketElements(node, 0); !elements)
      return elements.takeError();
    if (node.getNumResults() > 1)
      return collectiveError(node, "an in-place all-reduce has one result, "
                                   "its done flag");
    return expectFlag(node, 0);
  }
  if (node.getNumOperands() != node.getNumResults())
    return collectiveError(node, "one result per operand expected");
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
    const Value *operand = node.getOperand(i);
    const Value *result = node.getResult(i);
    if (!operand || !result)
      return collectiveError(
          node, llvm::formatv("operand or result {0} is absent", i));
    if (!isReducibleFloat(operand->getType().getDType()))
      return collectiveError(
          node, "element type " + dtypeName(operand->getType().getDType()) +
                    " is not reduced (f32, f16, bf16)");
    if (operand->getType() != result->getType())
      return collectiveError(
          node, llvm::formatv("result {0} differs from its operand's type", i));
  }
  return llvm::Error::success();
}

namespace {
llvm::Error checkShardedShapes(const Node &node, llvm::StringRef op, bool wait,
                               bool gather, int64_t ranks);
} // namespace

llvm::Error gmopt::checkCudaShardedCollective(const Node &node) {
  llvm::StringRef op = node.getOpType();
  auto attrs = decodeAttrs(node);
  if (!attrs)
    return attrs.takeError();
  int64_t ranks = attrs->ranks;
  bool wait = op == kAllReduceWaitOp, gather = op == kAllGatherOp;
  llvm::StringRef what = op == kReduceScatterOp ? "a reduce-scatter"
                         : gather               ? "an all-gather"
                                                : "an all-reduce";
  // The shapes first, then whether this build can talk to the ranks.
  llvm::Error shapes = checkShardedShapes(node, op, wait, gather, ranks);
  if (shapes || op == kShardOp)
    return shapes;
  return checkRanks(node, what, ranks);
}

namespace {
llvm::Error checkShardedShapes(const Node &node, llvm::StringRef op, bool wait,
                               bool gather, int64_t ranks) {
  auto elements = floatBucketElements(node, wait || gather ? 1 : 0);
  if (!elements)
    return elements.takeError();
  int64_t shard = zeroShardElements(*elements, ranks);
  const Value *result = node.getNumResults() ? node.getResult(0) : nullptr;
  if (op == kAllReduceStartOp || wait) {
    // The handle: the packed bucket, or a token for a bucket of one tensor.
    unsigned tensors = node.getNumOperands() - (wait ? 1 : 0);
    const Value *handle = wait ? node.getOperand(0) : result;
    if (tensors == 1) {
      if (!handle || handle->getType().getDType() != DType::Bool)
        return collectiveError(node, "the handle of a bucket of one tensor "
                                     "must be a bool token");
    } else if (llvm::Error err = expectTensor(node, handle, "the handle",
                                              DType::F32, *elements)) {
      return err;
    }
    return wait ? expectFlag(node, 0) : llvm::Error::success();
  }
  if (gather) {
    if (llvm::Error err = expectTensor(node, node.getOperand(0), "the shard",
                                       DType::F32, shard))
      return err;
    return expectFlag(node, 0);
  }
  return expectTensor(node, result, "the result", DType::F32, shard);
}

} // namespace

uint64_t gmopt::getCudaCollectiveWorkspaceBytes(const Node &node) {
  if (node.getDomain() != kGmoptDomain)
    return 0;
  bool gather = node.getOpType() == kAllGatherOp;
  if (!gather && node.getOpType() != kReduceScatterOp)
    return 0;
  int64_t ranks = getCollectiveRanks(node);
  if (ranks <= 1)
    return 0;
  int64_t elements = 0;
  for (unsigned i = gather ? 1 : 0, e = node.getNumOperands(); i < e; ++i) {
    const Value *operand = node.getOperand(i);
    if (!operand || !operand->getType().hasStaticShape())
      return 0;
    elements += operand->getType().getNumElements();
  }
  return alignBuffer(static_cast<uint64_t>(zeroShardElements(elements, ranks)) *
                     static_cast<uint64_t>(ranks) * sizeof(float));
}

//===----------------------------------------------------------------------===//
// The communicator
//===----------------------------------------------------------------------===//

#if defined(GMOPT_HAVE_CUDA) && defined(GMOPT_HAVE_NCCL)
namespace {

/// NCCL's entry points, from libnccl.so.2.
struct NcclApi {
  ncclResult_t (*getVersion)(int *);
  ncclResult_t (*getUniqueId)(ncclUniqueId *);
  ncclResult_t (*commInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*commDestroy)(ncclComm_t);
  ncclResult_t (*commAbort)(ncclComm_t);
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t *);
  const char *(*getErrorString)(ncclResult_t);
  const char *(*getLastError)(ncclComm_t);
  ncclResult_t (*allReduce)(const void *, void *, size_t, ncclDataType_t,
                            ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, ncclDataType_t,
                                ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*allGather)(const void *, void *, size_t, ncclDataType_t,
                            ncclComm_t, cudaStream_t);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
};

/// Opens NCCL once per process; the error says where it was looked for.
llvm::Expected<const NcclApi &> loadNccl() {
  static std::once_flag once;
  static NcclApi api;
  static std::string failure;
  std::call_once(once, [] {
    void *library = nullptr;
    std::string tried;
    for (const char *name : {"libnccl.so.2", "libnccl.so"}) {
      library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (library)
        break;
      const char *why = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (why ? why : name);
    }
    if (!library) {
      failure = "NCCL is not installed where gmopt can find it (" + tried +
                "): install NCCL (the CUDA toolkit's, a system package, or "
                "Python's nvidia-nccl-cu13) or add its lib folder to "
                "LD_LIBRARY_PATH";
      return;
    }
    auto symbol = [&](auto &slot, const char *name) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(
          dlsym(library, name));
      if (!slot && failure.empty())
        failure = std::string("libnccl.so.2 has no ") + name +
                  " (NCCL 2.10 or newer is needed)";
    };
    symbol(api.getVersion, "ncclGetVersion");
    symbol(api.getUniqueId, "ncclGetUniqueId");
    symbol(api.commInitRank, "ncclCommInitRank");
    symbol(api.commDestroy, "ncclCommDestroy");
    symbol(api.commAbort, "ncclCommAbort");
    symbol(api.commGetAsyncError, "ncclCommGetAsyncError");
    symbol(api.getErrorString, "ncclGetErrorString");
    symbol(api.getLastError, "ncclGetLastError");
    symbol(api.allReduce, "ncclAllReduce");
    symbol(api.reduceScatter, "ncclReduceScatter");
    symbol(api.allGather, "ncclAllGather");
    symbol(api.groupStart, "ncclGroupStart");
    symbol(api.groupEnd, "ncclGroupEnd");
    // The library stays open for the process: communicators may outlive
    // any one executable.
  });
  if (!failure.empty())
    return fail(failure);
  return api;
}

} // namespace

struct NcclCommunicator::Impl {
  const NcclApi *api = nullptr;
  ncclComm_t comm = nullptr;
  /// The overlapped all-reduces' events (they run on the device's
  /// communication stream): each start's "ready" (the compute stream
  /// reached it) and "done" (the all-reduce finished), by handle.
  struct InFlight {
    cudaEvent_t done = nullptr;
  };
  llvm::DenseMap<const void *, InFlight> inFlight;
  /// Events no start holds, for reuse.
  std::vector<cudaEvent_t> spareEvents;

  llvm::Expected<cudaEvent_t> takeEvent(const Node &node) {
    if (!spareEvents.empty()) {
      cudaEvent_t event = spareEvents.back();
      spareEvents.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    cudaError_t status =
        cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      return fail(llvm::formatv("cudaEventCreateWithFlags failed: {0} (node "
                                "{1})",
                                cudaGetErrorString(status), node.describe()));
    }
    return event;
  }

  llvm::Error check(ncclResult_t result, llvm::StringRef call,
                    const Node *node) const {
    if (result == ncclSuccess || result == ncclInProgress)
      return llvm::Error::success();
    const char *detail = api->getLastError(comm);
    return ncclCallError(call, static_cast<int>(result),
                         api->getErrorString(result), detail ? detail : "",
                         node);
  }
};

llvm::Expected<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::create(const CollectiveBootstrap &bootstrap,
                         int deviceOrdinal) {
  auto api = loadNccl();
  if (!api)
    return api.takeError();
  std::unique_ptr<NcclCommunicator> communicator(new NcclCommunicator());
  communicator->impl = std::make_unique<Impl>();
  Impl &impl = *communicator->impl;
  impl.api = &*api;
  int code = 0;
  if (llvm::Error err =
          impl.check(api->getVersion(&code), "ncclGetVersion", nullptr))
    return err;
  // NCCL_VERSION: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
  communicator->version = code >= 10000
                              ? llvm::formatv("{0}.{1}.{2}", code / 10000,
                                              code / 100 % 100, code % 100)
                                    .str()
                              : llvm::formatv("{0}.{1}.{2}", code / 1000,
                                              code / 100 % 10, code % 100)
                                    .str();
  auto id = agreeOnUniqueId(
      bootstrap, sizeof(ncclUniqueId),
      [&]() -> llvm::Expected<std::vector<uint8_t>> {
        ncclUniqueId made;
        if (llvm::Error err =
                impl.check(api->getUniqueId(&made), "ncclGetUniqueId", nullptr))
          return err;
        const auto *bytes = reinterpret_cast<const uint8_t *>(&made);
        return std::vector<uint8_t>(bytes, bytes + sizeof(made));
      });
  if (!id)
    return id.takeError();
  ncclUniqueId unique;
  std::memcpy(&unique, id->data(), sizeof(unique));
  cudaError_t status = cudaSetDevice(deviceOrdinal);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return fail(llvm::formatv("cudaSetDevice({0}) failed before "
                              "ncclCommInitRank: {1}",
                              deviceOrdinal, cudaGetErrorString(status)));
  }
  if (llvm::Error err = impl.check(
          api->commInitRank(&impl.comm, bootstrap.worldSize, unique,
                            bootstrap.rank),
          llvm::formatv("ncclCommInitRank (rank {0} of {1}, {2})",
                        bootstrap.rank, bootstrap.worldSize, bootstrap.source)
              .str(),
          nullptr)) {
    impl.comm = nullptr;
    return err;
  }
  communicator->worldSize = bootstrap.worldSize;
  communicator->rank = bootstrap.rank;
  return communicator;
}

NcclCommunicator::~NcclCommunicator() {
  // Errors cannot be reported from a destructor; a communicator whose
  // peers failed is aborted rather than destroyed (destroy would wait).
  // The device synchronized its streams before it let the communicator go.
  if (!impl || !impl->comm)
    return;
  for (auto &entry : impl->inFlight)
    impl->spareEvents.push_back(entry.second.done);
  for (cudaEvent_t event : impl->spareEvents)
    (void)cudaEventDestroy(event);
  ncclResult_t pending = ncclSuccess;
  if (impl->api->commGetAsyncError(impl->comm, &pending) == ncclSuccess &&
      pending == ncclSuccess)
    (void)impl->api->commDestroy(impl->comm);
  else
    (void)impl->api->commAbort(impl->comm);
}

llvm::Error NcclCommunicator::allReduce(const Node &node,
                                        llvm::ArrayRef<const void *> operands,
                                        llvm::ArrayRef<void *> results,
                                        llvm::ArrayRef<int64_t> counts,
                                        DType dtype, bool mean,
                                        CUstream_st *stream) {
  assert(operands.size() == results.size() &&
         operands.size() == counts.size() && "one count per operand");
  ncclDataType_t type = dtype == DType::F16    ? ncclFloat16
                        : dtype == DType::BF16 ? ncclBfloat16
                                               : ncclFloat32;
  const NcclApi &api = *impl->api;
  if (llvm::Error err = impl->check(api.groupStart(), "ncclGroupStart", &node))
    return err;
  llvm::Error failure = llvm::Error::success();
  for (size_t i = 0; i != operands.size() && !failure; ++i)
    if (counts[i])
      failure = impl->check(
          api.allReduce(operands[i], results[i], static_cast<size_t>(counts[i]),
                        type, mean ? ncclAvg : ncclSum, impl->comm, stream),
          llvm::formatv("ncclAllReduce (operand {0}, {1} elements)", i,
                        counts[i])
              .str(),
          &node);
  // The group is closed even after a failed call, so NCCL is left usable.
  llvm::Error closed = impl->check(api.groupEnd(), "ncclGroupEnd", &node);
  if (failure) {
    llvm::consumeError(std::move(closed));
    return failure;
  }
  return closed;
}

llvm::Error NcclCommunicator::reduceScatter(const Node &node, const void *send,
                                            void *recv, int64_t recvCount,
                                            bool mean, CUstream_st *stream) {
  if (!recvCount)
    return llvm::Error::success();
  return impl->check(
      impl->api->reduceScatter(send, recv, static_cast<size_t>(recvCount),
                               ncclFloat32, mean ? ncclAvg : ncclSum,
                               impl->comm, stream),
      llvm::formatv("ncclReduceScatter ({0} elements a rank)", recvCount).str(),
      &node);
}

llvm::Error NcclCommunicator::allGather(const Node &node, const void *send,
                                        void *recv, int64_t sendCount,
                                        CUstream_st *stream) {
  if (!sendCount)
    return llvm::Error::success();
  return impl->check(
      impl->api->allGather(send, recv, static_cast<size_t>(sendCount),
                           ncclFloat32, impl->comm, stream),
      llvm::formatv("ncclAllGather ({0} elements a rank)", sendCount).str(),
      &node);
}

llvm::Error NcclCommunicator::startAllReduce(const Node &node, const void *key,
                                             llvm::ArrayRef<void *> buffers,
                                             llvm::ArrayRef<int64_t> counts,
                                             bool mean, CUstream_st *stream,
                                             CUstream_st *commStream) {
  auto cudaFailure = [&](cudaError_t status, llvm::StringRef call) {
    (void)cudaGetLastError();
    return fail(llvm::formatv("{0} failed: {1} (node {2})", call,
                              cudaGetErrorString(status), node.describe()));
  };
  if (impl->inFlight.count(key))
    return fail("an all-reduce is already in flight under this handle (node " +
                node.describe() + ")");
  if (!commStream || commStream == stream)
    return fail("the overlapped all-reduce needs a communication stream of "
                "its own (node " +
                node.describe() + ")");
  auto ready = impl->takeEvent(node);
  if (!ready)
    return ready.takeError();
  auto done = impl->takeEvent(node);
  if (!done) {
    impl->spareEvents.push_back(*ready);
    return done.takeError();
  }
  auto giveBack = [&](cudaError_t status, llvm::StringRef call) {
    impl->spareEvents.push_back(*ready);
    impl->spareEvents.push_back(*done);
    return cudaFailure(status, call);
  };
  if (cudaError_t status = cudaEventRecord(*ready, stream))
    return giveBack(status, "cudaEventRecord");
  if (cudaError_t status = cudaStreamWaitEvent(commStream, *ready, 0))
    return giveBack(status, "cudaStreamWaitEvent");
  // The wait captured the event's state, so it may be recorded again by
  // the next start: back to the spares.
  impl->spareEvents.push_back(*ready);
  llvm::SmallVector<const void *, 8> operands(buffers.begin(), buffers.end());
  if (llvm::Error err = allReduce(node, operands, buffers, counts, DType::F32,
                                  mean, commStream)) {
    impl->spareEvents.push_back(*done);
    return err;
  }
  if (cudaError_t status = cudaEventRecord(*done, commStream)) {
    impl->spareEvents.push_back(*done);
    return cudaFailure(status, "cudaEventRecord");
  }
  impl->inFlight[key] = Impl::InFlight{*done};
  return llvm::Error::success();
}

llvm::Error NcclCommunicator::waitAllReduce(const Node &node, const void *key,
                                            CUstream_st *stream) {
  auto it = impl->inFlight.find(key);
  if (it == impl->inFlight.end())
    return fail("no all-reduce was started under this handle (node " +
                node.describe() + ")");
  cudaEvent_t done = it->second.done;
  impl->inFlight.erase(it);
  impl->spareEvents.push_back(done);
  if (cudaError_t status = cudaStreamWaitEvent(stream, done, 0)) {
    (void)cudaGetLastError();
    return fail(llvm::formatv("cudaStreamWaitEvent failed: {0} (node {1})",
                              cudaGetErrorString(status), node.describe()));
  }
  return llvm::Error::success();
}

size_t NcclCommunicator::getInFlightCount() const {
  return impl->inFlight.size();
}

llvm::Error NcclCommunicator::checkAsyncError(const Node *node) {
  ncclResult_t pending = ncclSuccess;
  if (llvm::Error err =
          impl->check(impl->api->commGetAsyncError(impl->comm, &pending),
                      "ncclCommGetAsyncError", node))
    return err;
  return impl->check(pending, "an NCCL collective (asynchronous error)", node);
}

#else // no NCCL

struct NcclCommunicator::Impl {};

llvm::Expected<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::create(const CollectiveBootstrap &, int) {
  return fail("gmopt was built without NCCL (no CUDA toolkit or no nccl.h at "
              "configure time)");
}

NcclCommunicator::~NcclCommunicator() = default;

llvm::Error NcclCommunicator::allReduce(const Node &node,
                                        llvm::ArrayRef<const void *>,
                                        llvm::ArrayRef<void *>,
                                        llvm::ArrayRef<int64_t>, DType, bool,
                                        CUstream_st *) {
  return fail("gmopt was built without NCCL (node " + node.describe() + ")");
}

llvm::Error NcclCommunicator::reduceScatter(const Node &node, const void *,
                                            void *, int64_t, bool,
                                            CUstream_st *) {
  return fail("gmopt was built without NCCL (node " + node.describe() + ")");
}

llvm::Error NcclCommunicator::allGather(const Node &node, const void *, void *,
                                        int64_t, CUstream_st *) {
  return fail("gmopt was built without NCCL (node " + node.describe() + ")");
}

llvm::Error NcclCommunicator::startAllReduce(const Node &node, const void *,
                                             llvm::ArrayRef<void *>,
                                             llvm::ArrayRef<int64_t>, bool,
                                             CUstream_st *, CUstream_st *) {
  return fail("gmopt was built without NCCL (node " + node.describe() + ")");
}

llvm::Error NcclCommunicator::waitAllReduce(const Node &node, const void *,
                                            CUstream_st *) {
  return fail("gmopt was built without NCCL (node " + node.describe() + ")");
}

size_t NcclCommunicator::getInFlightCount() const { return 0; }

llvm::Error NcclCommunicator::checkAsyncError(const Node *) {
  return llvm::Error::success();
}
#endif
