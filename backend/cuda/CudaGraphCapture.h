//===- CudaGraphCapture.h - Whether a step can be a CUDA graph --*- C++ -*-===//
//
// `gmopt-run --cuda-graph` (ExecutorOptions::cudaGraph) captures one planned
// training step on the CUDA device into a CUDA graph and replays it: the
// arena fixes every address, so a replay is one cudaGraphLaunch instead of
// one launch per node. A graph replays exactly what was captured, so
// whatever varies from step to step must be read on the device: the
// optimizers read the learning rate and step count from their tensors,
// the random kernels read the step from a device counter the graph updates
// first. What cannot be captured is refused before anything is allocated,
// with the reason and the node: this decision is plain host code, built in
// every configuration and tested without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDAGRAPHCAPTURE_H
#define GMOPT_BACKEND_CUDA_CUDAGRAPHCAPTURE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace gmopt {

class Module;
class Node;
struct ExecutorOptions;

/// Success when \p node's CUDA kernel can be captured into a CUDA graph and
/// replayed at later steps; else the reason, naming the node: a random op
/// whose kernel keys its stream with the host's step (only Dropout,
/// BitmaskDropout and BiasDropout read it on the device), or a collective
/// over several ranks in a build without NCCL (it would talk to the other
/// ranks from the host, over MPI or TCP).
llvm::Error checkCudaGraphNode(const Node &node);

/// Success when \p options on the backend named \p backend (`cuda`, `cpu`)
/// allow a CUDA graph, whatever the module; else the first reason they do
/// not: another backend ("--cuda-graph needs the CUDA backend"), eager mode
/// (each step allocates on the host's schedule), profiling or a trace (they
/// synchronize the host after every kernel). The driver asks it before it
/// loads a model.
llvm::Error checkCudaGraphOptions(const ExecutorOptions &options,
                                  llvm::StringRef backend);

/// Success when a step of \p module, prepared with \p options on the
/// backend named \p backend, can run as a CUDA graph; else the first
/// reason it cannot: checkCudaGraphOptions's, or a node checkCudaGraphNode
/// refuses.
llvm::Error checkCudaGraphCapturable(const Module &module,
                                     const ExecutorOptions &options,
                                     llvm::StringRef backend);

} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDAGRAPHCAPTURE_H
