//===- BackendStep.h - One step of a module on the CPU or CUDA --*- C++ -*-===//
//
// What the CUDA parity tests do for each case: prepare a module on the CPU
// or the CUDA backend, bind the graph inputs in order, run one step and read
// every graph output back (and, for ops that write their operands in place,
// every graph input after the step), so the two backends' results can be
// compared.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_BACKENDSTEP_H
#define GMOPT_TESTS_UNIT_BACKENDSTEP_H

#include "backend/Executor.h"
#include "backend/cuda/CudaDevice.h"
#include "ir/Module.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace gmopt {
namespace test {

/// The graph outputs of one step of \p module on the CUDA backend
/// (\p onCuda) or the CPU backend, with \p inputs bound to the graph's
/// inputs in order. \p options default to an eager, one-thread run. With
/// \p readInputsBack, every graph input's value after the step follows the
/// outputs (what an optimizer or accumulator wrote in place).
inline llvm::Expected<std::vector<TensorData>> runBackendStep(
    const Module &module, llvm::ArrayRef<TensorData> inputs, bool onCuda,
    ExecutorOptions options =
        [] {
          ExecutorOptions eager;
          eager.mode = AllocationMode::Eager;
          eager.threads = 1;
          return eager;
        }(),
    bool readInputsBack = false) {
  auto exe = onCuda ? prepareCudaExecutable(module, options)
                    : prepareCpuExecutable(module, options);
  if (!exe)
    return exe.takeError();
  const Graph &graph = module.getGraph();
  if (inputs.size() > graph.getInputs().size())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "more inputs than the graph has");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (llvm::Error err =
            (*exe)->setInput(graph.getInputs()[i].get(), inputs[i]))
      return err;
  if (llvm::Error err = (*exe)->runStep(0))
    return err;
  std::vector<TensorData> outputs;
  for (const Value *output : graph.getOutputs()) {
    auto value = (*exe)->readValue(output);
    if (!value)
      return value.takeError();
    outputs.push_back(std::move(*value));
  }
  if (readInputsBack)
    for (const auto &input : graph.getInputs()) {
      auto value = (*exe)->readValue(input.get());
      if (!value)
        return value.takeError();
      outputs.push_back(std::move(*value));
    }
  return outputs;
}

} // namespace test
} // namespace gmopt

/// Skips the calling test, with the probe's reason, when there is no usable
/// CUDA device.
#define GMOPT_SKIP_WITHOUT_CUDA_DEVICE()                                       \
  do {                                                                         \
    auto device = ::gmopt::probeCudaDevice();                                  \
    if (!device)                                                               \
      GTEST_SKIP() << "needs a CUDA device: "                                  \
                   << llvm::toString(device.takeError());                      \
  } while (false)

#endif // GMOPT_TESTS_UNIT_BACKENDSTEP_H
