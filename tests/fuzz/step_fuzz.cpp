//===- step_fuzz.cpp - libFuzzer target for a training step on the CPU ----===//
//
// Runs one step of small fuzzed graphs on the CPU backend: load an ONNX
// model or a text-IR module (FuzzInput.h: the first byte picks the loader,
// the next eight bind symbolic dimensions; selector bit 4 runs the default
// pipeline first, so the step uses plan-buffers' plan instead of the
// trivial one), give every graph input seeded synthetic values as gmopt-run
// does without --inputs (zeros where gmopt-run would ask for --inputs), and
// run a step in planned and in eager mode on one thread. Graphs beyond
// small bounds (kMaxTensorElements per value, kMaxTotalElements over all
// values, kMaxNodes) are skipped unrun, so a step takes milliseconds. Every
// failure must be an llvm::Error; crashes, sanitizer reports, hangs and
// leaks are bugs. When both modes run, their graph outputs must be bitwise
// equal (an abort otherwise): where values are placed must not change what
// a step computes. Nothing reads or writes a file.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"
#include "passes/DefaultPipeline.h"
#include "passes/PassManager.h"
#include "tools/driver/Runtime.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

using namespace gmopt;

namespace {

/// Largest element count of one value.
constexpr uint64_t kMaxTensorElements = uint64_t(1) << 14;
/// Largest element count of all values together.
constexpr uint64_t kMaxTotalElements = uint64_t(1) << 17;
/// Most nodes a graph may have.
constexpr size_t kMaxNodes = 512;
/// Selector flag: run the default pipeline before the step.
constexpr uint8_t kRunPipelineFlag = 1;

/// The element count of \p value if it is static and at most
/// kMaxTensorElements; nullopt otherwise (computed without overflow).
std::optional<uint64_t> boundedElements(const Value *value) {
  const TensorType &type = value->getType();
  if (!type.hasStaticShape())
    return std::nullopt;
  uint64_t elements = 1;
  for (const Dim &dim : type.getDims()) {
    uint64_t extent = uint64_t(dim.getExtent());
    if (extent == 0)
      return 0;
    if (extent > kMaxTensorElements || elements > kMaxTensorElements / extent)
      return std::nullopt;
    elements *= extent;
  }
  return elements;
}

/// True if every value of \p module is static and the graph is within the
/// bounds above.
bool isSmall(const Module &module) {
  const Graph &graph = module.getGraph();
  uint64_t total = 0;
  auto add = [&](const Value *value) {
    if (!value)
      return true;
    std::optional<uint64_t> elements = boundedElements(value);
    if (!elements)
      return false;
    total += *elements;
    return total <= kMaxTotalElements;
  };
  for (const auto &input : graph.getInputs())
    if (!add(input.get()))
      return false;
  for (const auto &initializer : graph.getInitializers())
    if (!add(initializer.get()))
      return false;
  size_t nodes = 0;
  for (const Node &node : graph.getNodes()) {
    if (++nodes > kMaxNodes)
      return false;
    for (const Value *result : node.getResults())
      if (!add(result))
        return false;
  }
  return true;
}

/// Every graph input of \p module bound to zero bytes.
std::vector<BoundInput> zeroInputs(const Module &module) {
  std::vector<BoundInput> inputs;
  for (const auto &input : module.getGraph().getInputs()) {
    BoundInput binding;
    binding.input = input.get();
    binding.data =
        TensorData(input->getType(),
                   std::vector<uint8_t>(input->getType().getSizeInBytes(), 0));
    binding.origin = InputOrigin::Zeros;
    inputs.push_back(std::move(binding));
  }
  return inputs;
}

/// The graph outputs after one step in \p mode; nullopt if the backend
/// refused the graph (an llvm::Error, which is fine).
std::optional<std::vector<TensorData>>
runStep(const Module &module, llvm::ArrayRef<BoundInput> inputs,
        AllocationMode mode) {
  ExecutorOptions options;
  options.mode = mode;
  options.threads = 1;
  auto executable = prepareCpuExecutable(module, options);
  if (!executable) {
    llvm::consumeError(executable.takeError());
    return std::nullopt;
  }
  for (const BoundInput &binding : inputs)
    if (llvm::Error err =
            (*executable)->setInput(binding.input, binding.data)) {
      // bindInputs made each value of exactly its input's type.
      llvm::errs() << "step_fuzz: a bound input does not fit: "
                   << llvm::toString(std::move(err)) << '\n';
      std::abort();
    }
  if (llvm::Error err = (*executable)->runStep(0)) {
    llvm::consumeError(std::move(err));
    return std::nullopt;
  }
  std::vector<TensorData> outputs;
  for (const Value *output : module.getGraph().getOutputs()) {
    auto value = (*executable)->readValue(output);
    if (!value) {
      llvm::errs() << "step_fuzz: graph output '" << output->getName()
                   << "' cannot be read after a step: "
                   << llvm::toString(value.takeError()) << '\n';
      std::abort();
    }
    outputs.push_back(std::move(*value));
  }
  return outputs;
}

void step(const fuzz::FuzzInput &input) {
  llvm::Expected<std::unique_ptr<Module>> module = fuzz::loadFuzzModule(input);
  if (!module) {
    llvm::consumeError(module.takeError());
    return;
  }
  if (!isSmall(**module))
    return;
  if (input.flags & kRunPipelineFlag) {
    PassManager passManager;
    if (llvm::Error err = passManager.addPipeline(kDefaultPipeline)) {
      llvm::errs() << "step_fuzz: the default pipeline does not parse: "
                   << llvm::toString(std::move(err)) << '\n';
      std::abort();
    }
    if (llvm::Error err = passManager.run(**module)) {
      llvm::consumeError(std::move(err));
      return;
    }
    // Rewrites may add values; keep the step small.
    if (!isSmall(**module))
      return;
  }

  InputSources sources;
  sources.seed = 1;
  llvm::Expected<std::vector<BoundInput>> inputs =
      bindInputs(**module, sources);
  if (!inputs) {
    // gmopt-run would ask for --inputs here (an integer input whose range
    // the graph does not imply); zeros still reach the kernels.
    llvm::consumeError(inputs.takeError());
    inputs = zeroInputs(**module);
  }
  std::optional<std::vector<TensorData>> planned =
      runStep(**module, *inputs, AllocationMode::Planned);
  std::optional<std::vector<TensorData>> eager =
      runStep(**module, *inputs, AllocationMode::Eager);
  if (!planned || !eager)
    return;
  for (size_t i = 0, e = planned->size(); i != e; ++i) {
    if ((*planned)[i] == (*eager)[i])
      continue;
    llvm::errs() << "step_fuzz: graph output " << i << " ('"
                 << (*module)->getGraph().getOutputs()[i]->getName()
                 << "') differs between planned and eager mode\n";
    printModule(**module, llvm::errs());
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (std::optional<fuzz::FuzzInput> input = fuzz::decodeFuzzInput(data, size))
    step(*input);
  return 0;
}
