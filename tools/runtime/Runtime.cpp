//===- Runtime.cpp - Training a compiled module: gmopt-run's library ------===//
//
// Implements Runtime.h's errors, backend selection and model loading
// (`.gm` or ONNX with dimension inference from the inputs), and the helpers
// of RuntimeSupport.h. The rest of gmopt-run's library is split by
// responsibility: input binding and synthetic data (RuntimeInputs.cpp), the
// training loop (RuntimeTraining.cpp), and the comparisons with references
// (RuntimeReference.cpp).
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/Runtime.h"

#include "tools/driver/ToolSupport.h"
#include "tools/runtime/RuntimeSupport.h"

#include "backend/cpu/Mpi.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudaGraphCapture.h"
#include "ir/OpRegistry.h"
#include "ir/Optimizer.h"
#include "ir/OptimizerOps.h"
#include "ir/SizeLimits.h"
#include "ir/ops/ShapeValue.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/OnnxTensor.h"
#include "passes/PassManager.h"
#include "passes/transforms/TieWeights.h"
#include "tools/driver/PassManagerCLOptions.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>

using namespace gmopt;
using namespace gmopt::runtime;

char NumericalError::ID = 0;

void NumericalError::log(llvm::raw_ostream &os) const { os << message; }

std::error_code NumericalError::convertToErrorCode() const {
  return llvm::inconvertibleErrorCode();
}

int gmopt::exitCodeFor(const llvm::Error &err) {
  return err.isA<NumericalError>() ? kNumericalFailureExitCode
                                   : kInputErrorExitCode;
}

namespace gmopt {
namespace runtime {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Prefixes \p err with `PATH: ` unless it already starts so.
llvm::Error withFile(llvm::StringRef path, llvm::Error err) {
  std::string message = llvm::toString(std::move(err));
  if (llvm::StringRef(message).starts_with((path + ":").str()))
    return makeError(message);
  return makeError(path + ": " + message);
}

std::string quoted(const Value *value) {
  return "'" + value->getName().str() + "'";
}

/// A new tensor of \p type with every byte \p byte (allocated without
/// throwing, like fillTensor).
llvm::Expected<TensorData> filledTensor(const TensorType &type, uint8_t byte) {
  return allocateTensorData(type, [&](llvm::MutableArrayRef<uint8_t> bytes) {
    std::memset(bytes.data(), byte, bytes.size());
  });
}

/// A tensor of \p type (f32 or i64, as the optimizer's learning rate and
/// step are) with every element \p value.
TensorData valueTensor(const TensorType &type, double value) {
  llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
  size_t n = type.getNumElements();
  if (type.getDType() == DType::I64)
    return TensorData::fromValues<int64_t>(
        DType::I64, shape,
        std::vector<int64_t>(n, static_cast<int64_t>(value)));
  assert(type.getDType() == DType::F32 && "learning rates are f32");
  return TensorData::fromValues<float>(
      DType::F32, shape, std::vector<float>(n, static_cast<float>(value)));
}

} // namespace runtime
} // namespace gmopt

namespace {

/// Symbolic dimensions of the ONNX model at \p path bound from the shapes
/// of the tensors \p inputs supplies (explicit bindings in \p dims win and
/// are only checked later, against the input types).
llvm::Error inferDims(llvm::StringRef path, const TestDataSet &inputs,
                      std::map<std::string, int64_t> &dims) {
  auto buffer = readInputFile(path);
  if (!buffer)
    return buffer.takeError();
  onnx::ModelProto model;
  llvm::StringRef bytes = (*buffer)->getBuffer();
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return makeError(path + ": not a valid ONNX model");
  std::map<std::string, int64_t> inferred;
  std::map<std::string, std::string> inferredFrom;
  for (int i = 0; i < model.graph().input_size(); ++i) {
    const onnx::ValueInfoProto &info = model.graph().input(i);
    const NamedTensor *tensor = inputs.findInput(info.name());
    if (!tensor) {
      tensor = inputs.findInputByIndex(i);
      if (tensor && !tensor->name.empty())
        tensor = nullptr;
    }
    if (!tensor)
      continue;
    auto type = importType(info.type(), info.name());
    if (!type) {
      llvm::consumeError(type.takeError());
      continue;
    }
    const TensorType &dataType = tensor->data.getType();
    if (!type->hasRank() || type->getRank() != dataType.getRank())
      continue;
    for (unsigned d = 0; d != type->getRank(); ++d) {
      const Dim &dim = type->getDim(d);
      if (!dim.isSymbolic() || dims.count(dim.getSymbol().str()))
        continue;
      std::string symbol = dim.getSymbol().str();
      int64_t extent = dataType.getDim(d).getExtent();
      auto [it, inserted] = inferred.emplace(symbol, extent);
      if (inserted) {
        inferredFrom[symbol] = tensor->source;
      } else if (it->second != extent) {
        return makeError(tensor->source +
                         llvm::formatv(": dimension '{0}' is {1} here but {2} "
                                       "in {3}",
                                       symbol, extent, it->second,
                                       inferredFrom[symbol]));
      }
    }
  }
  dims.insert(inferred.begin(), inferred.end());
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Module>>
importForRun(llvm::StringRef path, const std::map<std::string, int64_t> &dims,
             llvm::StringRef externalDataDir) {
  OnnxImportOptions options;
  options.dimBindings = dims;
  options.externalDataDir = externalDataDir.str();
  auto module = importOnnxFile(path, options);
  if (!module)
    return withFile(path, module.takeError());
  if (llvm::Error err = checkDimsBound(**module))
    return withFile(path, std::move(err));
  return module;
}

bool hasGmMagic(llvm::StringRef path) {
  // Never open anything but a regular file (a FIFO would block); the
  // loaders report what else it is.
  if (llvm::Error err = checkRegularFile(path)) {
    llvm::consumeError(std::move(err));
    return false;
  }
  auto buffer = llvm::MemoryBuffer::getFileSlice(path, sizeof(kGmMagic), 0);
  return buffer &&
         (*buffer)->getBuffer() == llvm::StringRef(kGmMagic, sizeof(kGmMagic));
}

} // namespace

//===----------------------------------------------------------------------===//
// Backends
//===----------------------------------------------------------------------===//

llvm::StringRef gmopt::backendName(BackendKind kind) {
  switch (kind) {
  case BackendKind::Auto:
    return "auto";
  case BackendKind::Cpu:
    return "cpu";
  case BackendKind::Cuda:
    return "cuda";
  }
  llvm_unreachable("unknown backend");
}

llvm::Expected<BackendKind> gmopt::selectBackend(BackendKind requested,
                                                 std::string &notice) {
  notice.clear();
  switch (requested) {
  case BackendKind::Cpu:
    return BackendKind::Cpu;
  case BackendKind::Cuda: {
    // The probe says why there is no device ("no CUDA device (...)", or
    // that the toolkit was absent at build time).
    auto device = probeCudaDevice();
    if (!device)
      return device.takeError();
    return BackendKind::Cuda;
  }
  case BackendKind::Auto: {
    auto device = probeCudaDevice();
    if (device)
      return BackendKind::Cuda;
    std::string reason = llvm::toString(device.takeError());
    if (!llvm::StringRef(reason).starts_with("no CUDA device"))
      reason = "no CUDA device (" + reason + ")";
    notice = reason + "; using the CPU backend";
    return BackendKind::Cpu;
  }
  }
  llvm_unreachable("unknown backend");
}

CollectiveBootstrap gmopt::mpiCollectiveBootstrap() {
  CollectiveBootstrap bootstrap;
  if (!cpu::isMpiInitialized() || cpu::getMpiWorldSize() <= 1)
    return bootstrap;
  bootstrap.rank = cpu::getMpiRank();
  bootstrap.worldSize = cpu::getMpiWorldSize();
  bootstrap.source = cpu::getWorldTransportName();
  // The launcher's rank on this machine: Open MPI's, MPICH's, torchrun's.
  for (const char *variable :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char *value = std::getenv(variable)) {
      int localRank = 0;
      if (!llvm::StringRef(value).getAsInteger(10, localRank) &&
          localRank >= 0) {
        bootstrap.localRank = localRank;
        break;
      }
    }
  bootstrap.broadcastFromRankZero =
      [](llvm::MutableArrayRef<uint8_t> bytes) -> llvm::Error {
    return cpu::broadcastBytes(bytes.data(), bytes.size(), /*root=*/0);
  };
  return bootstrap;
}

llvm::Expected<std::unique_ptr<Executable>>
gmopt::prepareExecutable(const Module &module, BackendKind backend,
                         const ExecutorOptions &options, bool allowTf32) {
  // The backend and every node are checked before anything is allocated.
  if (options.cudaGraph && backend != BackendKind::Auto)
    if (llvm::Error err =
            checkCudaGraphCapturable(module, options, backendName(backend)))
      return err;
  switch (backend) {
  case BackendKind::Cpu:
    return prepareCpuExecutable(module, options);
  case BackendKind::Cuda: {
    CudaDeviceOptions cudaOptions;
    cudaOptions.allowTf32 = allowTf32;
    cudaOptions.bootstrap = mpiCollectiveBootstrap();
    return prepareCudaExecutable(module, options, cudaOptions);
  }
  case BackendKind::Auto:
    break;
  }
  return makeError("internal error: the backend was not resolved");
}

namespace {
/// The workspace model plans made at load time reserve for \p backend.
WorkspaceTarget workspaceTargetFor(BackendKind backend) {
  return backend == BackendKind::Cuda ? WorkspaceTarget::Cuda
                                      : WorkspaceTarget::Cpu;
}
} // namespace

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

llvm::Expected<RunnableModel> gmopt::loadRunnableModel(
    llvm::StringRef path, const std::map<std::string, int64_t> &dims,
    const TestDataSet *inputs, bool wantOriginal, llvm::StringRef onnxPipeline,
    const OptimizerSpec *optimizer, llvm::StringRef externalDataDir,
    BackendKind backend) {
  // Builds the optimizer into a module that has none.
  auto addOptimizer = [&](Module &module) -> llvm::Error {
    if (!optimizer || findOptimizerNode(module) ||
        !module.getSignature().hasGradients())
      return llvm::Error::success();
    auto node = buildOptimizer(module, *optimizer);
    if (!node)
      return withFile(path, node.takeError());
    return llvm::Error::success();
  };
  if (!llvm::sys::fs::exists(path))
    return makeError(
        path + ": " +
        std::make_error_code(std::errc::no_such_file_or_directory).message());
  RunnableModel model;
  model.dims = dims;
  if (hasGmMagic(path) || path.ends_with_insensitive(".gm")) {
    if (!onnxPipeline.empty())
      return makeError(path + ": --passes applies to ONNX input only; a .gm "
                              "file is already compiled");
    auto compiled = readGmFile(path, externalDataDir);
    if (!compiled)
      return withFile(path, compiled.takeError());
    model.fromGmFile = true;
    model.module = std::move(compiled->module);
    model.original = std::move(compiled->original);
    model.pipeline = compiled->pipeline;
    if (llvm::Error err = bindSymbolicDims(*model.module, dims))
      return withFile(path, std::move(err));
    if (llvm::Error err = checkDimsBound(*model.module))
      return withFile(path, std::move(err));
    model.dims = model.module->dimBindings;
    if (optimizer && !findOptimizerNode(*model.module) &&
        model.module->getSignature().hasGradients()) {
      // Compiled without an optimizer: build it and plan the module again,
      // as plan-buffers would have with the optimizer in place.
      if (llvm::Error err = addOptimizer(*model.module))
        return err;
      PassManager passManager;
      passManager.getContext().setWorkspaceModel(
          getWorkspaceModel(workspaceTargetFor(backend)),
          workspaceModelName(workspaceTargetFor(backend)).str());
      if (llvm::Error err = passManager.addPipeline("plan-buffers"))
        return err;
      if (llvm::Error err = passManager.run(*model.module))
        return withFile(path, std::move(err));
      model.pipeline += model.pipeline.empty() ? "" : ",";
      model.pipeline += "(+" + optimizer->str() + " at load),plan-buffers";
    }
    if (!wantOriginal) {
      model.original.reset();
    } else if (model.original) {
      std::map<std::string, int64_t> originalDims = model.module->dimBindings;
      for (const auto &[name, extent] : model.original->dimBindings)
        originalDims.erase(name);
      if (llvm::Error err = bindSymbolicDims(*model.original, originalDims))
        return withFile(path, std::move(err));
      if (llvm::Error err = checkDimsBound(*model.original))
        return withFile(path, std::move(err));
      if (llvm::Error err = addOptimizer(*model.original))
        return err;
    } else {
      return makeError(path + ": the .gm file holds no original model, which "
                              "--baseline needs");
    }
  } else {
    if (inputs)
      if (llvm::Error err = inferDims(path, *inputs, model.dims))
        return err;
    auto module = importForRun(path, model.dims, externalDataDir);
    if (!module)
      return module.takeError();
    model.module = std::move(*module);
    if (llvm::Error err = addOptimizer(*model.module))
      return err;
    if (wantOriginal) {
      auto original = importForRun(path, model.dims, externalDataDir);
      if (!original)
        return original.takeError();
      model.original = std::move(*original);
      if (llvm::Error err = addOptimizer(*model.original))
        return err;
    }
    PassManager passManager;
    passManager.getContext().setWorkspaceModel(
        getWorkspaceModel(workspaceTargetFor(backend)),
        workspaceModelName(workspaceTargetFor(backend)).str());
    if (llvm::Error err = passManager.addPipeline(
            onnxPipeline.empty() ? llvm::StringRef(kOnnxRunPipeline)
                                 : onnxPipeline))
      return err;
    // tie-weights compares initial values: the test data's, when given.
    if (inputs)
      installParameterValues(
          passManager, [inputs](llvm::StringRef name) -> const TensorData * {
            const NamedTensor *tensor = inputs->findInput(name);
            return tensor ? &tensor->data : nullptr;
          });
    if (llvm::Error err = passManager.run(*model.module))
      return withFile(path, std::move(err));
    model.pipeline = passManager.getPipelineString();
  }
  if (!model.module->getSignature().hasGradients())
    return makeError(path + ": no gradients found: this is not a training "
                            "graph (expected ONNX Runtime's "
                            "training_model.onnx or gradients exposed as "
                            "outputs named X_grad)");
  return model;
}
