//===- HostTensorData.h - HostTensor and the IR's TensorData ----*- C++ -*-===//
//
// Conversions between the public API's HostTensor and the IR's TensorData,
// for the runtime's implementation (not part of the public API).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_RUNTIME_HOSTTENSORDATA_H
#define GMOPT_TOOLS_RUNTIME_HOSTTENSORDATA_H

#include "tools/runtime/TrainingSession.h"

#include "backend/Executor.h"
#include "ir/Attribute.h"
#include "ir/Module.h"

namespace gmopt {

/// A TensorData viewing \p tensor's bytes (no copy; it keeps the tensor's
/// owner alive).
TensorData toTensorData(const HostTensor &tensor);

/// A HostTensor owning a copy of \p data's bytes (an external tensor is
/// loaded first).
llvm::Expected<HostTensor> toHostTensor(const TensorData &data);

/// The values \p names of \p module's graph, as \p exe last computed them,
/// in host tensors; an unknown name is an error saying \p model has no such
/// output ("the eval model", "the compiled step").
llvm::Expected<std::vector<HostTensor>>
readHostOutputs(const Module &module, const Executable &exe,
                llvm::ArrayRef<std::string> names, llvm::StringRef model);

} // namespace gmopt

#endif // GMOPT_TOOLS_RUNTIME_HOSTTENSORDATA_H
