//===- NcclCollectives.cpp - gmopt.AllReduce on CUDA over NCCL ------------===//
//
// NcclCollectives.h's functions and the CUDA kernel-table entry of
// gmopt.AllReduce. The bootstrap's id agreement, the world-size check, the
// error messages and the kernel check are plain host code, built in every
// configuration (the unit tests run them anywhere). The communicator is
// compiled with the toolkit and NCCL's header (GMOPT_HAVE_CUDA,
// GMOPT_HAVE_NCCL): NCCL's entry points are looked up in libnccl.so.2 with
// dlopen/dlsym the first time a communicator is made, so nothing links
// against NCCL and gmopt starts where it is absent. The kernel entry
// (GMOPT_HAVE_CUDA) enqueues one NCCL group per bucket on the backend's
// stream, or, for one rank without a communicator, device copies.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/NcclCollectives.h"

#include "ir/Collectives.h"
#include "ir/IR.h"
#include "ir/Module.h"

#include "llvm/Support/FormatVariadic.h"

#ifdef GMOPT_HAVE_CUDA
#include "backend/cuda/CudaDispatchSupport.h"

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
  int64_t ranks = node.getIntAttr("ranks", 1);
  if (ranks == bootstrap.worldSize)
    return llvm::Error::success();
  return fail(llvm::formatv(
      "{0} was compiled for {1} data-parallel ranks but this CUDA run has {2} "
      "({3}); launch it with `mpirun -np {1} gmopt-run ...`",
      node.describe(), ranks, bootstrap.worldSize, bootstrap.source));
}

bool gmopt::hasCollectives(const Module &module) {
  for (const Node &node : module.getGraph().getNodes())
    if (node.isa(kGmoptDomain, kAllReduceOp))
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

llvm::Error gmopt::checkCudaAllReduce(const Node &node) {
  auto nodeError = [&](const llvm::Twine &message) {
    return fail("CUDA kernel for '" + node.getOp().str() + "': " + message +
                " (node " + node.describe() + ")");
  };
  llvm::StringRef reduction = node.getStringAttr("reduction", "mean");
  if (reduction != "mean" && reduction != "sum")
    return nodeError("reduction must be mean or sum, got '" + reduction + "'");
  int64_t ranks = node.getIntAttr("ranks", 1);
  if (ranks < 1)
    return nodeError("ranks must be at least 1");
  if (node.getNumOperands() != node.getNumResults())
    return nodeError("one result per operand expected");
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
    const Value *operand = node.getOperand(i);
    const Value *result = node.getResult(i);
    if (!operand || !result)
      return nodeError(llvm::formatv("operand or result {0} is absent", i));
    if (!isReducibleFloat(operand->getType().getDType()))
      return nodeError("element type " +
                       dtypeName(operand->getType().getDType()) +
                       " is not reduced (f32, f16, bf16)");
    if (operand->getType() != result->getType())
      return nodeError(llvm::formatv("result {0} differs from its operand's "
                                     "type",
                                     i));
  }
  if (ranks > 1 && !isNcclBuilt())
    return nodeError(llvm::formatv(
        "an all-reduce over {0} ranks needs NCCL, and gmopt was built "
        "without NCCL (no nccl.h at configure time; install NCCL's headers "
        "and reconfigure, or run with --backend=cpu over MPI)",
        ranks));
  return llvm::Error::success();
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
  if (llvm::Error err = impl.check(api->getVersion(&code), "ncclGetVersion",
                                   nullptr))
    return err;
  // NCCL_VERSION: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
  communicator->version =
      code >= 10000 ? llvm::formatv("{0}.{1}.{2}", code / 10000,
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
  return communicator;
}

NcclCommunicator::~NcclCommunicator() {
  // Errors cannot be reported from a destructor; a communicator whose
  // peers failed is aborted rather than destroyed (destroy would wait).
  if (!impl || !impl->comm)
    return;
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

llvm::Error NcclCommunicator::checkAsyncError(const Node *) {
  return llvm::Error::success();
}
#endif

//===----------------------------------------------------------------------===//
// The kernel-table entry
//===----------------------------------------------------------------------===//

#ifdef GMOPT_HAVE_CUDA
namespace {
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

llvm::Error runAllReduce(CudaCall &call) {
  const Node &node = call.node;
  unsigned count = node.getNumOperands();
  bool mean = node.getStringAttr("reduction", "mean") == "mean";
  int64_t ranks = node.getIntAttr("ranks", 1);
  if (NcclCommunicator *communicator = call.ctx.communicator) {
    if (communicator->getWorldSize() != ranks)
      return nodeError(node, llvm::formatv("compiled for {0} ranks but the "
                                           "NCCL communicator has {1}",
                                           ranks, communicator->getWorldSize()));
    llvm::SmallVector<const void *, 8> operands;
    llvm::SmallVector<void *, 8> results;
    llvm::SmallVector<int64_t, 8> counts;
    for (unsigned i = 0; i != count; ++i) {
      operands.push_back(call.inPtr(i));
      results.push_back(call.outPtr(i));
      counts.push_back(call.in(i)->getType().getNumElements());
    }
    return communicator->allReduce(node, operands, results, counts,
                                   call.in(0)->getType().getDType(), mean,
                                   call.ctx.stream);
  }
  if (ranks != 1)
    return nodeError(node, llvm::formatv("an all-reduce over {0} ranks needs "
                                         "an NCCL communicator, and this run "
                                         "has none",
                                         ranks));
  // One rank without NCCL: the sum and the mean are the operand.
  for (unsigned i = 0; i != count; ++i)
    if (call.inPtr(i) != call.outPtr(i))
      if (llvm::Error err = call.check(
              cudaMemcpyAsync(call.outPtr(i), call.inPtr(i),
                              call.in(i)->getType().getSizeInBytes(),
                              cudaMemcpyDeviceToDevice, call.ctx.stream),
              "cudaMemcpyAsync (one-rank all-reduce)"))
        return err;
  return llvm::Error::success();
}

} // namespace

void cuda::dispatch::addCollectiveKernels(
    llvm::StringMap<KernelEntry> &table) {
  table[(kGmoptDomain + "::" + kAllReduceOp).str()] = {checkCudaAllReduce,
                                                       runAllReduce};
}
#endif
