//===- Runtime.cpp - Training a compiled module: gmopt-run's library ------===//
//
// Implements Runtime.h: model loading (`.gm` or ONNX with dimension
// inference from the inputs), input binding with the documented order of
// sources, synthetic data from a splitmix64/Box-Muller stream keyed by the
// seed and each input's name (so it does not depend on the input order or
// the C++ library), label/index range derivation, the training loop, and
// the comparisons with references.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Runtime.h"

#include "tools/driver/ToolSupport.h"

#include "backend/cuda/CudaDevice.h"
#include "ir/FileIO.h"
#include "ir/GmFile.h"
#include "ir/Onnx.h"
#include "ir/OnnxTensor.h"
#include "ir/OpRegistry.h"
#include "ir/Optimizer.h"
#include "ir/OptimizerOps.h"
#include "ir/SizeLimits.h"
#include "ir/ops/ShapeValue.h"
#include "passes/PassManager.h"
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
#include <ctime>
#include <cmath>
#include <cstring>
#include <limits>

using namespace gmopt;

char NumericalError::ID = 0;

void NumericalError::log(llvm::raw_ostream &os) const { os << message; }

std::error_code NumericalError::convertToErrorCode() const {
  return llvm::inconvertibleErrorCode();
}

int gmopt::exitCodeFor(const llvm::Error &err) {
  return err.isA<NumericalError>() ? kNumericalFailureExitCode
                                   : kInputErrorExitCode;
}

namespace {

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

/// 64-bit FNV-1a: a hash that is the same in every process and build.
uint64_t stableHash(llvm::StringRef text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

constexpr double kPi = 3.14159265358979323846;

/// A small deterministic random stream (splitmix64), independent of the
/// standard library's distributions so that values are the same everywhere.
class RandomStream {
public:
  explicit RandomStream(uint64_t seed) : state(seed) {}

  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  /// Standard normal (Box-Muller).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2 * kPi * u2);
  }
  /// Uniform integer in [lo, hi).
  int64_t integer(int64_t lo, int64_t hi) {
    uint64_t span = static_cast<uint64_t>(hi - lo);
    return lo + static_cast<int64_t>(next() % span);
  }

private:
  uint64_t state;
};

/// Writes \p values (converted) into a new tensor of \p type. The storage
/// is allocated without throwing (allocateTensorData), so a size the
/// system cannot provide is an error, as for the arena.
template <typename Fn>
llvm::Expected<TensorData> fillTensor(const TensorType &type, Fn element) {
  uint64_t n = type.getNumElements();
  auto fillAs = [&](auto typed) {
    using T = decltype(typed);
    return allocateTensorData(type, [&](llvm::MutableArrayRef<uint8_t> bytes) {
      assert(bytes.size() == n * sizeof(T) && "storage of the wrong size");
      for (uint64_t i = 0; i != n; ++i) {
        T value = static_cast<T>(element(i));
        std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
      }
    });
  };
  switch (type.getDType()) {
  case DType::F32:
    return fillAs(float());
  case DType::F64:
    return fillAs(double());
  case DType::I64:
    return fillAs(int64_t());
  case DType::I32:
    return fillAs(int32_t());
  case DType::Bool:
  case DType::U8:
    return fillAs(uint8_t());
  default:
    return makeError("cannot make synthetic values of element type " +
                     dtypeName(type.getDType()));
  }
}

bool isViewNode(const Node &node) {
  const OpSchema *schema = OpRegistry::instance().lookup(node);
  return schema && schema->hasTrait(TraitView);
}

/// Static extent of dimension \p axis of \p value, or -1.
int64_t staticExtent(const Value *value, int64_t axis) {
  if (!value)
    return -1;
  const TensorType &type = value->getType();
  if (!type.hasRank() || axis < 0 || axis >= int64_t(type.getRank()) ||
      !type.getDim(axis).isStatic())
    return -1;
  return type.getDim(axis).getExtent();
}

/// The constraint one use (operand \p index of \p node) puts on an integer.
std::optional<IndexRange> rangeOfUse(const Node &node, unsigned index) {
  auto classLabels = [&](const Value *scores) -> std::optional<IndexRange> {
    int64_t classes = staticExtent(scores, 1);
    if (classes <= 0)
      return std::nullopt;
    IndexRange range;
    range.lowest = 0;
    range.end = classes;
    range.role = "labels";
    if (const Attribute *ignore = node.getAttr("ignore_index"))
      if (ignore->getKind() == Attribute::Kind::Int)
        range.ignoreIndex = ignore->getInt();
    return range;
  };
  llvm::StringRef op = node.getOpType();
  bool standard = node.getDomain() == kOnnxDomain;
  bool microsoft = node.getDomain() == kMsDomain;
  if (index == 1 && ((standard && (op == "SoftmaxCrossEntropyLoss" ||
                                   op == "NegativeLogLikelihoodLoss")) ||
                     (microsoft && op == "SoftmaxCrossEntropyLossInternal")))
    return classLabels(node.getOperand(0));
  if (index == 2 && microsoft &&
      (op == "SoftmaxCrossEntropyLossGrad" ||
       op == "SoftmaxCrossEntropyLossInternalGrad"))
    return classLabels(node.getOperand(1));
  if (index == 1 && standard && (op == "Gather" || op == "GatherElements")) {
    const Value *data = node.getOperand(0);
    if (!data || !data->getType().hasRank())
      return std::nullopt;
    int64_t rank = data->getType().getRank();
    int64_t axis = node.getIntAttr("axis", 0);
    if (axis < 0)
      axis += rank;
    int64_t extent = staticExtent(data, axis);
    if (extent <= 0)
      return std::nullopt;
    IndexRange range;
    range.lowest = -extent;
    range.end = extent;
    range.syntheticLowest = 0;
    range.role = "index";
    return range;
  }
  return std::nullopt;
}

void collectRanges(const Value *value, std::optional<IndexRange> &result,
                   unsigned depth) {
  if (depth > 16)
    return;
  for (const OpOperand &use : value->getUses()) {
    const Node *user = use.getOwner();
    if (!user)
      continue;
    // Views and casts keep the values: follow them to the real consumer.
    if (use.getIndex() == 0 && user->getNumResults() && user->getResult(0) &&
        (isViewNode(*user) || user->isa(kOnnxDomain, "Cast"))) {
      collectRanges(user->getResult(0), result, depth + 1);
      continue;
    }
    std::optional<IndexRange> range = rangeOfUse(*user, use.getIndex());
    if (!range)
      continue;
    if (!result) {
      result = range;
      continue;
    }
    result->lowest = std::max(result->lowest, range->lowest);
    result->end = std::min(result->end, range->end);
    result->syntheticLowest = std::max(
        {result->syntheticLowest, range->syntheticLowest, result->lowest});
    if (!result->ignoreIndex)
      result->ignoreIndex = range->ignoreIndex;
    if (range->role == "labels")
      result->role = "labels";
  }
}

/// Collects into \p constants the constant each use of \p value (through
/// views and casts) compares it with, when every use is an Equal against a
/// constant scalar; false as soon as one use is anything else.
bool collectComparedConstants(const Value *value,
                              llvm::SmallVectorImpl<int64_t> &constants,
                              unsigned depth) {
  if (depth > 16)
    return false;
  for (const OpOperand &use : value->getUses()) {
    const Node *user = use.getOwner();
    if (!user)
      return false;
    if (use.getIndex() == 0 && user->getNumResults() && user->getResult(0) &&
        (isViewNode(*user) || user->isa(kOnnxDomain, "Cast"))) {
      if (!collectComparedConstants(user->getResult(0), constants, depth + 1))
        return false;
      continue;
    }
    if (!user->isa(kOnnxDomain, "Equal") || user->getNumOperands() != 2)
      return false;
    const Value *other = user->getOperand(1 - use.getIndex());
    std::optional<std::vector<int64_t>> values =
        other ? ops::getIntValues(*other) : std::nullopt;
    if (!values || values->size() != 1)
      return false;
    constants.push_back(values->front());
  }
  return !constants.empty();
}

/// The values synthetic data for integer input \p input draws when the
/// graph only ever asks whether it equals some constants (a padding mask
/// compared with 0): [smallest constant, largest + 2), which holds every
/// constant and one value equal to none, so both outcomes of each
/// comparison occur. nullopt for any other use.
std::optional<std::pair<int64_t, int64_t>>
deriveComparedRange(const Value *input) {
  llvm::SmallVector<int64_t, 4> constants;
  if (!collectComparedConstants(input, constants, 0))
    return std::nullopt;
  int64_t lowest = *llvm::min_element(constants);
  int64_t highest = *llvm::max_element(constants);
  // The span highest + 2 - lowest must fit an int64_t (RandomStream::integer).
  if (highest > std::numeric_limits<int64_t>::max() - 2 ||
      (lowest < 0 && highest > std::numeric_limits<int64_t>::max() - 2 + lowest))
    return std::nullopt;
  return std::make_pair(lowest, highest + 2);
}

/// Checks every element of integer tensor \p data against \p range.
llvm::Error checkIndexValues(const TensorData &data, const IndexRange &range,
                             const Value *input) {
  uint64_t n = data.getNumElements();
  for (uint64_t i = 0; i != n; ++i) {
    int64_t v = data.getIntElement(i);
    if ((v >= range.lowest && v < range.end) ||
        (range.ignoreIndex && v == *range.ignoreIndex))
      continue;
    return makeError(llvm::formatv("{0} value {1} out of range [{2}, {3}) in "
                                   "input {4}",
                                   range.role, v, range.lowest, range.end,
                                   quoted(input)));
  }
  return llvm::Error::success();
}

/// True for rank-1 parameter names that are normalization gains.
bool looksLikeGain(llvm::StringRef name) {
  return name.ends_with("weight") || name.ends_with("gamma") ||
         name.ends_with("scale");
}

/// Seeded initial value of parameter \p param.
llvm::Expected<TensorData> initialParameter(const Value *param, uint64_t seed) {
  const TensorType &type = param->getType();
  RandomStream random(seed ^ stableHash(param->getName()) ^ 0x5eedull);
  if (type.hasRank() && type.getRank() >= 2) {
    llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
    int64_t receptive = 1;
    for (size_t i = 2; i < shape.size(); ++i)
      receptive *= shape[i];
    double fanOut = double(shape[0]) * receptive;
    double fanIn = double(shape[1]) * receptive;
    double limit = fanIn + fanOut > 0 ? std::sqrt(6.0 / (fanIn + fanOut)) : 0;
    return fillTensor(
        type, [&](uint64_t) { return (2 * random.uniform() - 1) * limit; });
  }
  double fill =
      type.hasRank() && type.getRank() == 1 && looksLikeGain(param->getName())
          ? 1.0
          : 0.0;
  return fillTensor(type, [&](uint64_t) { return fill; });
}

/// Seeded synthetic value of data input \p input.
llvm::Expected<TensorData> syntheticData(const Value *input, uint64_t seed) {
  const TensorType &type = input->getType();
  RandomStream random(seed ^ stableHash(input->getName()));
  // Allocation failures name the input.
  auto named =
      [&](llvm::Expected<TensorData> data) -> llvm::Expected<TensorData> {
    if (!data)
      return makeError("input " + quoted(input) + ": " +
                       llvm::toString(data.takeError()));
    return data;
  };
  DType dtype = type.getDType();
  if (isFloatingPoint(dtype))
    return named(fillTensor(type, [&](uint64_t) { return random.normal(); }));
  if (dtype == DType::Bool)
    return named(fillTensor(type, [&](uint64_t) { return random.next() & 1; }));
  std::optional<IndexRange> range = deriveIndexRange(input);
  if (!range) {
    if (std::optional<std::pair<int64_t, int64_t>> compared =
            deriveComparedRange(input))
      return named(fillTensor(type, [&](uint64_t) {
        return random.integer(compared->first, compared->second);
      }));
    return makeError("cannot derive the valid range of integer input " +
                     quoted(input) +
                     " from the graph (it is not a loss's labels, a Gather's "
                     "indices or only compared with constants); supply it "
                     "with --inputs");
  }
  if (range->end <= range->syntheticLowest)
    return makeError("integer input " + quoted(input) +
                     " has an empty valid range");
  return named(fillTensor(type, [&](uint64_t) {
    return random.integer(range->syntheticLowest, range->end);
  }));
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
    // that the toolkit was absent at build time). With a device present the
    // CUDA executor is still missing, which is also an error here.
    auto device = probeCudaDevice();
    if (!device)
      return device.takeError();
    return makeError("CUDA device '" + device->name +
                     "' found, but this build has no CUDA executor yet");
  }
  case BackendKind::Auto: {
    auto device = probeCudaDevice();
    if (!device) {
      llvm::consumeError(device.takeError());
      notice = "no CUDA device; using the CPU backend";
    } else {
      notice = "CUDA device '" + device->name +
               "' found, but this build has no CUDA executor yet; using the "
               "CPU backend";
    }
    return BackendKind::Cpu;
  }
  }
  llvm_unreachable("unknown backend");
}

llvm::Expected<std::unique_ptr<Executable>>
gmopt::prepareExecutable(const Module &module, BackendKind backend,
                         const ExecutorOptions &options) {
  if (backend != BackendKind::Cpu)
    return makeError("the CUDA backend is not available in this build");
  return prepareCpuExecutable(module, options);
}

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

llvm::Expected<RunnableModel>
gmopt::loadRunnableModel(llvm::StringRef path,
                         const std::map<std::string, int64_t> &dims,
                         const TestDataSet *inputs, bool wantOriginal,
                         llvm::StringRef onnxPipeline,
                         const OptimizerSpec *optimizer,
                         llvm::StringRef externalDataDir) {
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
          getWorkspaceModel(WorkspaceTarget::Cpu),
          workspaceModelName(WorkspaceTarget::Cpu).str());
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
        getWorkspaceModel(WorkspaceTarget::Cpu),
        workspaceModelName(WorkspaceTarget::Cpu).str());
    if (llvm::Error err = passManager.addPipeline(
            onnxPipeline.empty() ? llvm::StringRef(kOnnxRunPipeline)
                                 : onnxPipeline))
      return err;
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

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

std::optional<IndexRange> gmopt::deriveIndexRange(const Value *input) {
  std::optional<IndexRange> range;
  collectRanges(input, range, 0);
  return range;
}

llvm::StringRef gmopt::inputOriginName(InputOrigin origin) {
  switch (origin) {
  case InputOrigin::TestData:
    return "test data";
  case InputOrigin::Weights:
    return "weights";
  case InputOrigin::GraphDefault:
    return "graph default";
  case InputOrigin::Zeros:
    return "zeros";
  case InputOrigin::DefaultTrue:
    return "true";
  case InputOrigin::Synthetic:
    return "synthetic";
  case InputOrigin::FedEachStep:
    return "fed each step";
  }
  llvm_unreachable("unknown input origin");
}

llvm::Expected<std::vector<BoundInput>>
gmopt::bindInputs(const Module &module, const InputSources &sources) {
  const TrainingSignature &signature = module.getSignature();
  llvm::SmallPtrSet<const Value *, 16> params, accumulators, optimizerState;
  // The moments and the step count are state (restored from a checkpoint);
  // the learning rate and the update signal are fed by trainModule every
  // step.
  for (const ParamInfo &param : signature.getParams()) {
    params.insert(param.param);
    if (param.accumulator)
      accumulators.insert(param.accumulator);
    optimizerState.insert(param.optimizerState.begin(),
                          param.optimizerState.end());
  }
  if (const Value *step = signature.getStepSlot(StepSlot::StepCount))
    optimizerState.insert(step);
  llvm::SmallPtrSet<const Value *, 4> fedEachStep;
  if (const Value *rate = signature.getStepSlot(StepSlot::LearningRate))
    fedEachStep.insert(rate);
  if (const Node *optimizer = findOptimizerNode(module)) {
    OptimizerOperands layout(*optimizer);
    if (layout.isWellFormed() && layout.getUpdateSignal())
      fedEachStep.insert(layout.getUpdateSignal());
  }
  const Graph &graph = module.getGraph();
  std::vector<BoundInput> bound;
  for (size_t position = 0; position != graph.getInputs().size(); ++position) {
    const Value *input = graph.getInputs()[position].get();
    const TensorType &type = input->getType();
    if (!type.hasStaticShape())
      return makeError("input " + quoted(input) + " has type " + type.str() +
                       ", which is not static; bind its dimensions with --dim");
    const NamedTensor *fromTestData = nullptr;
    if (sources.testData) {
      fromTestData = sources.testData->findInput(input->getName());
      if (!fromTestData) {
        const NamedTensor *byIndex =
            sources.testData->findInputByIndex(int64_t(position));
        if (byIndex && byIndex->name.empty())
          fromTestData = byIndex;
      }
    }
    BoundInput binding;
    binding.input = input;
    auto useTensor = [&](const NamedTensor &tensor,
                         InputOrigin origin) -> llvm::Error {
      if (tensor.data.getType() != type)
        return makeError(
            tensor.source + ": input " + quoted(input) + " expects " +
            type.str() + " but the " +
            (origin == InputOrigin::Weights ? "weights file" : "file") +
            " holds " + tensor.data.getType().str());
      binding.data = tensor.data;
      binding.origin = origin;
      return llvm::Error::success();
    };

    if (params.count(input)) {
      const NamedTensor *fromWeights =
          sources.weights ? sources.weights->lookup(input->getName()) : nullptr;
      if (fromWeights) {
        if (llvm::Error err = useTensor(*fromWeights, InputOrigin::Weights))
          return err;
      } else if (sources.weights && !sources.allowMissingWeights) {
        return makeError(sources.weights->path + ": no value for parameter " +
                         quoted(input) +
                         " (pass --allow-missing-weights to initialize it)");
      } else if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else if (input->hasData()) {
        // An external default is mapped now (not before: a --weights value
        // makes it unneeded); a missing file is an error naming it.
        if (llvm::Error err = input->getData().load())
          return makeError("parameter " + quoted(input) + ": " +
                           llvm::toString(std::move(err)));
        binding.data = input->getData();
        binding.origin = InputOrigin::GraphDefault;
      } else {
        auto data = initialParameter(input, sources.seed);
        if (!data)
          return makeError("parameter " + quoted(input) + ": " +
                           llvm::toString(data.takeError()));
        binding.data = std::move(*data);
        binding.origin = InputOrigin::Synthetic;
      }
    } else if (accumulators.count(input)) {
      if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else {
        auto zeros = filledTensor(type, 0);
        if (!zeros)
          return makeError("input " + quoted(input) + ": " +
                           llvm::toString(zeros.takeError()));
        binding.data = std::move(*zeros);
        binding.origin = InputOrigin::Zeros;
      }
    } else if (optimizerState.count(input)) {
      const NamedTensor *fromWeights =
          sources.weights ? sources.weights->lookup(input->getName()) : nullptr;
      if (fromWeights) {
        if (llvm::Error err = useTensor(*fromWeights, InputOrigin::Weights))
          return err;
      } else if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else {
        auto zeros = filledTensor(type, 0);
        if (!zeros)
          return makeError("input " + quoted(input) + ": " +
                           llvm::toString(zeros.takeError()));
        binding.data = std::move(*zeros);
        binding.origin = InputOrigin::Zeros;
      }
    } else if (fedEachStep.count(input)) {
      auto zeros = filledTensor(type, 0);
      if (!zeros)
        return makeError("input " + quoted(input) + ": " +
                         llvm::toString(zeros.takeError()));
      binding.data = std::move(*zeros);
      binding.origin = InputOrigin::FedEachStep;
    } else if (input == signature.getLazyResetGrad()) {
      if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else {
        auto ones = filledTensor(type, 1);
        if (!ones)
          return makeError("input " + quoted(input) + ": " +
                           llvm::toString(ones.takeError()));
        binding.data = std::move(*ones);
        binding.origin = InputOrigin::DefaultTrue;
      }
    } else {
      if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else if (input->hasData()) {
        if (llvm::Error err = input->getData().load())
          return makeError("input " + quoted(input) + ": " +
                           llvm::toString(std::move(err)));
        binding.data = input->getData();
        binding.origin = InputOrigin::GraphDefault;
      } else if (sources.testData) {
        // Given test data, a missing tensor is a mistake (a misspelt name,
        // a forgotten file), never a reason to train on noise.
        return makeError(llvm::formatv(
            "data input {0} has no tensor in --inputs {1} (expected an "
            "input_K.pb holding a tensor named {0}, or an unnamed "
            "input_{2}.pb; synthetic data is only used without --inputs)",
            quoted(input), sources.testData->directory, position));
      } else {
        auto data = syntheticData(input, sources.seed);
        if (!data)
          return data.takeError();
        binding.data = std::move(*data);
        binding.origin = InputOrigin::Synthetic;
      }
      // Labels and indices are checked before anything runs: a kernel would
      // only report the first bad one, deep inside the step.
      DType dtype = type.getDType();
      if (isInteger(dtype) && binding.origin != InputOrigin::Synthetic)
        if (std::optional<IndexRange> range = deriveIndexRange(input))
          if (llvm::Error err = checkIndexValues(binding.data, *range, input))
            return fromTestData ? withFile(fromTestData->source, std::move(err))
                                : std::move(err);
    }
    bound.push_back(std::move(binding));
  }
  return bound;
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

double TrainingResult::medianStepMilliseconds() const {
  if (microStepMilliseconds.empty())
    return 0;
  std::vector<double> sorted = microStepMilliseconds;
  llvm::sort(sorted);
  size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

namespace {

/// Multiplies every element of \p data (f32 or f64) by \p factor; false,
/// leaving it unchanged, for other element types.
template <typename T> void scaleElements(std::vector<uint8_t> &bytes,
                                         double factor) {
  for (size_t offset = 0; offset + sizeof(T) <= bytes.size();
       offset += sizeof(T)) {
    T element;
    std::memcpy(&element, bytes.data() + offset, sizeof(T));
    element = static_cast<T>(element * factor);
    std::memcpy(bytes.data() + offset, &element, sizeof(T));
  }
}

bool scaleFloats(TensorData &data, double factor) {
  DType dtype = data.getType().getDType();
  if (dtype != DType::F32 && dtype != DType::F64)
    return false;
  std::vector<uint8_t> bytes(data.getBytes().begin(), data.getBytes().end());
  if (dtype == DType::F32)
    scaleElements<float>(bytes, factor);
  else
    scaleElements<double>(bytes, factor);
  data = TensorData(data.getType(), std::move(bytes));
  return true;
}

} // namespace

llvm::Expected<AccumulationPlan> gmopt::planAccumulation(const Module &module,
                                                         unsigned microSteps) {
  const TrainingSignature &signature = module.getSignature();
  AccumulationPlan plan;
  for (const ParamInfo &param : signature.getParams()) {
    if (!param.trainable || !param.accumulator)
      continue;
    if (!signature.getLazyResetGrad())
      plan.buffersToZero.push_back(param.accumulator);
    const Node *node = param.accumulateNode;
    if (node && node->isa(kMsDomain, "InPlaceAccumulator")) {
      const Value *sum = node->getResult(0);
      if (!sum || !sum->isGraphOutput())
        return makeError("the accumulated gradient of " + quoted(param.param) +
                         " (the result of InPlaceAccumulator " +
                         node->describe() + ") is not a graph output");
      plan.feedBack.emplace_back(sum, param.accumulator);
    }
  }
  if (microSteps <= 1)
    return plan;
  // The mean over micro-batches: the loss-gradient seed is scaled by 1/K,
  // so every gradient (linear in the seed) is the mean-reduced gradient of
  // the concatenated batch.
  const Value *seed = signature.getLossGradSeed();
  if (seed && (seed->isInitializer() || seed->isGraphInput()) &&
      seed->hasData() && seed->getType().hasStaticShape()) {
    TensorData scaled = seed->getData();
    if (scaleFloats(scaled, 1.0 / microSteps)) {
      plan.scaledSeed = std::move(scaled);
      return plan;
    }
  }
  return makeError(
      "--accumulate " + llvm::Twine(microSteps) +
      " averages gradients by scaling the loss-gradient seed, but this "
      "graph has no constant f32/f64 seed (a value named `<loss>_grad`)");
}

llvm::Expected<TrainingResult>
gmopt::trainModule(const Module &module, llvm::ArrayRef<BoundInput> inputs,
                   const TrainingOptions &options, llvm::raw_ostream *log) {
  const TrainingSignature &signature = module.getSignature();
  const Value *loss = signature.getLoss();
  if (!loss || !loss->isGraphOutput())
    return makeError("the training graph's loss is not a graph output");
  if (!isFloatingPoint(loss->getType().getDType()) ||
      !loss->getType().hasStaticShape() ||
      loss->getType().getNumElements() != 1)
    return makeError("the loss " + quoted(loss) + " is " +
                     loss->getType().str() + ", not a float scalar");
  if (options.steps == 0 || options.accumulate == 0)
    return makeError("--steps and --accumulate must be at least 1");
  const Value *lazyReset = signature.getLazyResetGrad();
  if (options.accumulate > 1) {
    for (const ParamInfo &param : signature.getParams())
      if (param.trainable && !param.accumulator)
        return makeError("--accumulate needs gradient accumulation buffers; "
                         "parameter " +
                         quoted(param.param) + " has none");
  }

  // The in-graph optimizer's step inputs and flag.
  const Node *optimizer = findOptimizerNode(module);
  const Value *rateInput = nullptr, *stepInput = nullptr,
              *signalInput = nullptr, *flag = nullptr;
  if (optimizer) {
    // The learning rate and step count the runtime feeds are the
    // signature's; the optimizer must read those.
    OptimizerOperands layout(*optimizer);
    rateInput = signature.getStepSlot(StepSlot::LearningRate);
    stepInput = layout.getStep()
                    ? signature.getStepSlot(StepSlot::StepCount)
                    : nullptr;
    signalInput = layout.getUpdateSignal();
    flag = optimizer->getResult(0);
    for (auto [read, slot] :
         {std::pair{layout.getLearningRate(), StepSlot::LearningRate},
          std::pair{layout.getStep(), StepSlot::StepCount}})
      if (read && read != signature.getStepSlot(slot))
        return makeError("the optimizer " + optimizer->describe() +
                         " reads " + quoted(read) +
                         ", which is not the training signature's " +
                         stepSlotName(slot).str() + " input the runtime feeds");
    if (signalInput && !signalInput->isGraphInput())
      return makeError("the optimizer " + optimizer->describe() +
                       " reads " + quoted(signalInput) +
                       ", which is not a graph input the runtime can feed");
    if (!signalInput && options.accumulate > 1)
      return makeError("--accumulate needs the optimizer's update signal "
                       "input (" +
                       optimizer->describe() + " has none)");
    if (!signalInput && !options.update)
      return makeError("the optimizer " + optimizer->describe() +
                       " has no update signal input, so its update cannot "
                       "be skipped");
    if (!flag || !flag->isGraphOutput())
      return makeError("the optimizer's flag is not a graph output");
  }

  auto executable =
      prepareExecutable(module, options.backend, options.executor);
  if (!executable)
    return executable.takeError();
  Executable &exe = **executable;
  int64_t updatesBefore = 0;
  for (const BoundInput &binding : inputs) {
    if (llvm::Error err = exe.setInput(binding.input, binding.data))
      return err;
    if (binding.input == stepInput)
      updatesBefore =
          static_cast<int64_t>(binding.data.getFloatElement(0));
  }
  TensorData resetTrue, resetFalse, signalTrue, signalFalse, rate;
  if (lazyReset) {
    auto trueValue = filledTensor(lazyReset->getType(), 1);
    if (!trueValue)
      return trueValue.takeError();
    auto falseValue = filledTensor(lazyReset->getType(), 0);
    if (!falseValue)
      return falseValue.takeError();
    resetTrue = std::move(*trueValue);
    resetFalse = std::move(*falseValue);
  }
  if (signalInput) {
    auto trueValue = filledTensor(signalInput->getType(), 1);
    if (!trueValue)
      return trueValue.takeError();
    auto falseValue = filledTensor(signalInput->getType(), 0);
    if (!falseValue)
      return falseValue.takeError();
    signalTrue = std::move(*trueValue);
    signalFalse = std::move(*falseValue);
  }
  if (rateInput)
    rate = valueTensor(rateInput->getType(), options.learningRate);
  auto stepTensor = [&](int64_t value) {
    return valueTensor(stepInput->getType(), static_cast<double>(value));
  };
  auto accumulation = planAccumulation(module, options.accumulate);
  if (!accumulation)
    return accumulation.takeError();
  if (accumulation->scaledSeed)
    if (llvm::Error err = exe.writeValue(signature.getLossGradSeed(),
                                         *accumulation->scaledSeed))
      return err;
  // Zeros for the accumulation buffers the runtime clears before each step
  // (graphs without lazy_reset_grad), allocated once.
  std::vector<TensorData> zeroBuffers;
  for (const Value *buffer : accumulation->buffersToZero) {
    auto zeros = filledTensor(buffer->getType(), 0);
    if (!zeros)
      return zeros.takeError();
    zeroBuffers.push_back(std::move(*zeros));
  }

  TrainingResult result;
  result.lossName = loss->getName().str();
  uint64_t microStep = 0;
  int64_t updates = updatesBefore;
  for (unsigned step = 1; step <= options.steps; ++step) {
    if (rateInput)
      if (llvm::Error err = exe.setInput(rateInput, rate))
        return err;
    if (stepInput)
      if (llvm::Error err = exe.setInput(stepInput, stepTensor(updates + 1)))
        return err;
    double lossSum = 0;
    for (unsigned micro = 0; micro != options.accumulate; ++micro) {
      if (lazyReset)
        if (llvm::Error err =
                exe.setInput(lazyReset, micro == 0 ? resetTrue : resetFalse))
          return err;
      bool last = micro + 1 == options.accumulate;
      if (signalInput)
        if (llvm::Error err = exe.setInput(
                signalInput, last && options.update ? signalTrue : signalFalse))
          return err;
      // Without lazy_reset_grad the runtime starts each step from zero.
      if (micro == 0)
        for (size_t i = 0; i != zeroBuffers.size(); ++i)
          if (llvm::Error err = exe.setInput(accumulation->buffersToZero[i],
                                             zeroBuffers[i]))
            return err;
      if (!options.batches.empty())
        for (const BoundInput &binding :
             options.batches[microStep % options.batches.size()])
          if (llvm::Error err = exe.setInput(binding.input, binding.data))
            return err;
      std::clock_t cpuStart = std::clock();
      if (llvm::Error err = exe.runStep(microStep++))
        return err;
      result.microStepCpuMilliseconds.push_back(
          1e3 * static_cast<double>(std::clock() - cpuStart) / CLOCKS_PER_SEC);
      // InPlaceAccumulator (V1) returns the sum; it becomes the buffer.
      for (const auto &[sum, buffer] : accumulation->feedBack) {
        auto value = exe.readValue(sum);
        if (!value)
          return value.takeError();
        if (llvm::Error err = exe.setInput(buffer, *value))
          return err;
      }
      result.microStepMilliseconds.push_back(exe.getLastStepMilliseconds());
      auto lossValue = exe.readValue(loss);
      if (!lossValue)
        return lossValue.takeError();
      double value = lossValue->getFloatElement(0);
      if (!std::isfinite(value)) {
        std::string where = llvm::formatv("step {0}", step);
        if (options.accumulate > 1)
          where += llvm::formatv(" (micro-step {0} of {1})", micro + 1,
                                 options.accumulate);
        return llvm::make_error<NumericalError>(
            "loss is " +
            std::string(std::isnan(value) ? "NaN"
                        : value > 0       ? "+inf"
                                          : "-inf") +
            " at " + where);
      }
      lossSum += value;
      if (microStep == 1)
        result.firstLoss = *lossValue;
    }
    // The gradients of the step: the accumulation buffers (the in-graph
    // optimizer reads them and leaves them as they are).
    auto readGradients =
        [&](std::vector<std::pair<std::string, TensorData>> &into)
        -> llvm::Error {
      into.clear();
      for (const ParamInfo &param : signature.getParams()) {
        if (!param.trainable)
          continue;
        auto gradient = exe.readGradient(param);
        if (!gradient)
          return gradient.takeError();
        into.emplace_back(param.param->getName().str(), std::move(*gradient));
      }
      return llvm::Error::success();
    };
    if (step == 1)
      if (llvm::Error err = readGradients(result.firstGradients))
        return err;
    if (step == options.steps)
      if (llvm::Error err = readGradients(result.lastGradients))
        return err;
    if (flag) {
      auto updated = exe.readValue(flag);
      if (!updated)
        return updated.takeError();
      if (updated->getFloatElement(0) != 0)
        ++updates;
    }
    // Between steps the step count holds the updates done, as a
    // checkpoint saves it.
    if (stepInput)
      if (llvm::Error err = exe.setInput(stepInput, stepTensor(updates)))
        return err;
    result.losses.push_back(lossSum / options.accumulate);
    if (log) {
      *log << llvm::formatv("step {0}: loss {1:f6} ({2:f3} ms", step,
                            result.losses.back(),
                            result.microStepMilliseconds.back());
      if (options.accumulate > 1)
        *log << llvm::formatv(" per micro-step, {0} micro-steps",
                              options.accumulate);
      *log << ")\n";
    }
  }
  result.updates = static_cast<uint64_t>(updates - updatesBefore);

  // The persistent state: parameters, then optimizer state and the step.
  auto keep = [&](const Value *value) -> llvm::Error {
    auto data = exe.readValue(value);
    if (!data)
      return data.takeError();
    NamedTensor tensor;
    tensor.name = value->getName().str();
    tensor.source = "final state";
    tensor.data = std::move(*data);
    result.finalState.push_back(std::move(tensor));
    return llvm::Error::success();
  };
  for (const ParamInfo &param : signature.getParams())
    if (llvm::Error err = keep(param.param))
      return err;
  for (const ParamInfo &param : signature.getParams())
    for (const Value *state : param.optimizerState)
      if (llvm::Error err = keep(state))
        return err;
  if (stepInput)
    if (llvm::Error err = keep(stepInput))
      return err;

  result.memory = exe.getMemoryReport();
  result.arenaBytes = exe.getArenaBytes();
  result.unplannedScratchBytes = exe.getUnplannedScratchBytes();
  result.profile = exe.getProfile();
  return result;
}

//===----------------------------------------------------------------------===//
// Comparisons
//===----------------------------------------------------------------------===//

TensorComparison gmopt::compareTensors(llvm::StringRef name,
                                       const TensorData &got,
                                       const TensorData &reference,
                                       const Tolerance &tolerance) {
  TensorComparison comparison;
  comparison.name = name.str();
  const TensorType &gotType = got.getType(), &refType = reference.getType();
  if (!isFloatingPoint(gotType.getDType()) ||
      !isFloatingPoint(refType.getDType()) || !gotType.hasStaticShape() ||
      !refType.hasStaticShape() ||
      gotType.getStaticShape() != refType.getStaticShape()) {
    comparison.problem =
        "got " + gotType.str() + " but the reference is " + refType.str();
    comparison.maxAbsError = comparison.maxRelError =
        std::numeric_limits<double>::infinity();
    return comparison;
  }
  uint64_t n = got.getNumElements();
  bool finite = true;
  for (uint64_t i = 0; i != n; ++i) {
    double g = got.getFloatElement(i), r = reference.getFloatElement(i);
    if (!std::isfinite(g) || !std::isfinite(r)) {
      finite = false;
      continue;
    }
    comparison.maxAbsError = std::max(comparison.maxAbsError, std::abs(g - r));
    comparison.referenceMagnitude =
        std::max(comparison.referenceMagnitude, std::abs(r));
  }
  if (comparison.referenceMagnitude > 0)
    comparison.maxRelError =
        comparison.maxAbsError / comparison.referenceMagnitude;
  else
    comparison.maxRelError = comparison.maxAbsError > 0
                                 ? std::numeric_limits<double>::infinity()
                                 : 0;
  if (!finite) {
    comparison.problem = "non-finite values";
    comparison.maxAbsError = comparison.maxRelError =
        std::numeric_limits<double>::quiet_NaN();
    return comparison;
  }
  comparison.ok =
      comparison.maxAbsError <=
      std::max(tolerance.rtol * comparison.referenceMagnitude, tolerance.atol);
  return comparison;
}

llvm::Expected<std::vector<TensorComparison>>
gmopt::compareWithReference(const TrainingResult &result,
                            const TestDataSet &expected,
                            const Tolerance &tolerance) {
  std::vector<TensorComparison> comparisons;
  const NamedTensor *lossReference = expected.findOutput(result.lossName);
  if (!lossReference)
    lossReference = expected.findOutputByIndex(0);
  if (!lossReference)
    return makeError(expected.directory +
                     ": no reference loss (expected an "
                     "output named '" +
                     result.lossName + "' or output_0.pb)");
  comparisons.push_back(
      compareTensors("loss", result.firstLoss, lossReference->data, tolerance));
  for (const auto &[param, gradient] : result.firstGradients) {
    std::string name = param + "_grad";
    const NamedTensor *reference = expected.findOutput(name);
    if (!reference)
      return makeError(expected.directory +
                       ": no reference for the gradient of '" + param +
                       "' (expected an output named '" + name + "')");
    comparisons.push_back(
        compareTensors(name, gradient, reference->data, tolerance));
  }
  return comparisons;
}

namespace {

/// Reads the AdamW `hyperparameters` object of a loss-reference file.
llvm::Error readAdamWHyperparameters(llvm::StringRef path,
                                     const llvm::json::Object *object,
                                     OptimizerSpec &spec) {
  if (!object)
    return makeError(path + ": an AdamW reference needs \"hyperparameters\"");
  auto number = [&](llvm::StringRef key) -> llvm::Expected<double> {
    std::optional<double> value = object->getNumber(key);
    if (!value)
      return makeError(path + ": missing or invalid hyperparameters." + key);
    return *value;
  };
  struct FloatField {
    const char *key;
    float *field;
  } floats[] = {{"alpha", &spec.alpha},
                {"beta", &spec.beta},
                {"epsilon", &spec.epsilon},
                {"weight_decay", &spec.weightDecay}};
  for (const FloatField &f : floats) {
    auto value = number(f.key);
    if (!value)
      return value.takeError();
    *f.field = static_cast<float>(*value);
  }
  struct IntField {
    const char *key;
    int64_t *field;
  } ints[] = {{"correct_bias", &spec.correctBias},
              {"adam_mode", &spec.adamMode}};
  for (const IntField &f : ints) {
    auto value = number(f.key);
    if (!value)
      return value.takeError();
    *f.field = static_cast<int64_t>(*value);
  }
  if (llvm::Error err = spec.validate())
    return makeError(path + ": " + llvm::toString(std::move(err)));
  return llvm::Error::success();
}

/// Reads `final_parameters` (directory relative to \p path).
llvm::Error readFinalParameters(llvm::StringRef path,
                                const llvm::json::Object &object,
                                LossReference &reference) {
  std::optional<llvm::StringRef> directory = object.getString("directory");
  const llvm::json::Array *params = object.getArray("params");
  if (!directory || !params)
    return makeError(path + ": final_parameters needs \"directory\" and "
                            "\"params\"");
  llvm::SmallString<256> base = llvm::sys::path::parent_path(path);
  llvm::sys::path::append(base, *directory);
  for (const llvm::json::Value &entry : *params) {
    const llvm::json::Object *param = entry.getAsObject();
    std::optional<llvm::StringRef> name =
        param ? param->getString("name") : std::nullopt;
    std::optional<llvm::StringRef> file =
        param ? param->getString("file") : std::nullopt;
    const llvm::json::Array *shape = param ? param->getArray("shape") : nullptr;
    std::optional<int64_t> stride =
        param ? param->getInteger("stride") : std::nullopt;
    if (!name || !file || !shape || !stride || *stride < 1)
      return makeError(path + ": every final_parameters.params entry needs "
                              "name, file, shape and a stride >= 1");
    LossReference::FinalParameter final;
    final.name = name->str();
    final.stride = *stride;
    for (const llvm::json::Value &dim : *shape) {
      std::optional<int64_t> extent = dim.getAsInteger();
      if (!extent || *extent < 0)
        return makeError(path + ": invalid shape of final parameter " +
                         final.name);
      final.shape.push_back(*extent);
    }
    llvm::SmallString<256> tensorPath = base;
    llvm::sys::path::append(tensorPath, *file);
    auto tensor = readTensorFile(tensorPath);
    if (!tensor)
      return tensor.takeError();
    final.values = std::move(tensor->data);
    reference.finalParameters.push_back(std::move(final));
  }
  return llvm::Error::success();
}

} // namespace

llvm::Expected<LossReference>
gmopt::readLossReference(llvm::StringRef path) {
  auto buffer = readInputFile(path);
  if (!buffer)
    return buffer.takeError();
  auto json = llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return makeError(path +
                     ": invalid JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *object = json->getAsObject();
  if (!object)
    return makeError(path + ": expected a JSON object");
  LossReference reference;
  std::optional<double> rate = object->getNumber("learning_rate");
  if (!rate || !(*rate > 0))
    return makeError(path + ": missing or invalid \"learning_rate\"");
  reference.learningRate = *rate;
  const llvm::json::Array *losses = object->getArray("losses");
  if (!losses || losses->empty())
    return makeError(path + ": missing or empty \"losses\" array");
  for (const llvm::json::Value &loss : *losses) {
    std::optional<double> value = loss.getAsNumber();
    if (!value)
      return makeError(path + ": \"losses\" must hold numbers");
    reference.losses.push_back(*value);
  }
  // sgd_losses.json predates the key: no optimizer means plain SGD.
  std::optional<llvm::StringRef> optimizer = object->getString("optimizer");
  if (!optimizer || optimizer->equals_insensitive("sgd")) {
    reference.optimizer.kind = OptimizerKind::SGD;
  } else if (optimizer->equals_insensitive("adamw")) {
    reference.optimizer.kind = OptimizerKind::AdamW;
    if (llvm::Error err = readAdamWHyperparameters(
            path, object->getObject("hyperparameters"), reference.optimizer))
      return err;
  } else {
    return makeError(path + ": unknown optimizer '" + *optimizer +
                     "' (expected AdamW or SGD)");
  }
  if (const llvm::json::Object *final = object->getObject("final_parameters"))
    if (llvm::Error err = readFinalParameters(path, *final, reference))
      return err;
  return reference;
}

llvm::Expected<std::vector<TensorComparison>>
gmopt::compareFinalParameters(const TrainingResult &result,
                              const LossReference &reference,
                              const Tolerance &tolerance) {
  std::vector<TensorComparison> comparisons;
  for (const LossReference::FinalParameter &param : reference.finalParameters) {
    const NamedTensor *got = nullptr;
    for (const NamedTensor &tensor : result.finalState)
      if (tensor.name == param.name)
        got = &tensor;
    if (!got)
      return makeError("the reference's final parameter '" + param.name +
                       "' is not a parameter of the module");
    llvm::SmallVector<int64_t, 4> shape = got->data.getType().getStaticShape();
    if (llvm::ArrayRef<int64_t>(shape) != llvm::ArrayRef<int64_t>(param.shape))
      return makeError("final parameter '" + param.name + "' has shape " +
                       got->data.getType().str() +
                       ", not the reference's");
    uint64_t count = param.values.getType().getNumElements();
    uint64_t total = got->data.getType().getNumElements();
    std::vector<float> sampled;
    for (uint64_t k = 0; k != count; ++k) {
      uint64_t index = k * static_cast<uint64_t>(param.stride);
      if (index >= total)
        return makeError("final parameter '" + param.name +
                         "': the reference holds more elements than the "
                         "stride allows");
      sampled.push_back(static_cast<float>(got->data.getFloatElement(index)));
    }
    TensorData gotSample = TensorData::fromValues<float>(
        DType::F32, {static_cast<int64_t>(count)}, sampled);
    TensorData refSample = TensorData::fromValues<float>(
        DType::F32, {static_cast<int64_t>(count)},
        [&] {
          std::vector<float> values;
          for (uint64_t k = 0; k != count; ++k)
            values.push_back(
                static_cast<float>(param.values.getFloatElement(k)));
          return values;
        }());
    comparisons.push_back(
        compareTensors("final " + param.name, gotSample, refSample, tolerance));
  }
  return comparisons;
}

std::vector<TensorComparison>
gmopt::compareLossCurve(llvm::ArrayRef<double> losses,
                        const LossReference &reference,
                        const Tolerance &tolerance) {
  std::vector<TensorComparison> comparisons;
  size_t n = std::min(losses.size(), reference.losses.size());
  for (size_t k = 0; k != n; ++k) {
    float got = static_cast<float>(losses[k]);
    float expected = static_cast<float>(reference.losses[k]);
    comparisons.push_back(compareTensors(
        llvm::formatv("loss[{0}]", k).str(),
        TensorData::fromValues<float>(DType::F32, {}, {got}),
        TensorData::fromValues<float>(DType::F32, {}, {expected}), tolerance));
  }
  return comparisons;
}

double gmopt::maxGradientRelativeDifference(const TrainingResult &a,
                                            const TrainingResult &b) {
  double worst = 0;
  for (const auto &[name, gradient] : a.firstGradients) {
    for (const auto &[otherName, other] : b.firstGradients) {
      if (name != otherName)
        continue;
      TensorComparison comparison =
          compareTensors(name, gradient, other, Tolerance());
      double difference = comparison.maxRelError;
      if (std::isnan(difference))
        difference = std::numeric_limits<double>::infinity();
      worst = std::max(worst, difference);
    }
  }
  return worst;
}
