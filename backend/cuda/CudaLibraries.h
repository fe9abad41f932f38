//===- CudaLibraries.h - cuBLASLt and cuDNN loaded at run time --*- C++ -*-===//
//
// The CUDA backend calls cuBLASLt and cuDNN through forwarding functions of
// the same names (CudaLibraries.cpp) that open libcublasLt.so.<major> and
// libcudnn.so.<major> with dlopen the first time they are needed, as NCCL
// is opened. Nothing links against either library, so gmopt-run starts on a
// machine that lacks them: without cuBLASLt the CUDA backend reports itself
// unusable ("no CUDA device (...)", and --backend=auto runs on the CPU);
// without cuDNN only the convolution and batch-norm entries refuse their
// nodes. The libraries are found the way the dynamic loader finds any
// library (LD_LIBRARY_PATH, the loader cache), so a Python nvidia-* package's
// lib folder on LD_LIBRARY_PATH serves, as the bundle's launcher arranges.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDALIBRARIES_H
#define GMOPT_BACKEND_CUDA_CUDALIBRARIES_H

#include "llvm/Support/Error.h"

#include <cstddef>
#include <string>

namespace gmopt {
namespace cuda {

/// The file gmopt opens for cuBLASLt: $GMOPT_CUBLASLT_LIBRARY where set
/// (a path or a file name), else libcublasLt.so.<major>, the major version
/// of the headers gmopt was built with.
std::string getCublasLtLibraryName();

/// The file gmopt opens for cuDNN: $GMOPT_CUDNN_LIBRARY where set, else
/// libcudnn.so.<major>; empty when gmopt was built without cuDNN's headers.
std::string getCudnnLibraryName();

/// Opens cuBLASLt once per process; later calls return the first outcome.
/// The error names the file and the loader's reason. In a build without the
/// CUDA backend every function here reports that instead.
llvm::Error loadCublasLt();

/// Opens cuDNN once per process and checks that its major version is the
/// one gmopt was built against; later calls return the first outcome. The
/// error names the file and the loader's reason, or the version found.
llvm::Error loadCudnn();

/// cuBLASLt's version (major * 10000 + minor * 100 + patch) as the opened
/// library reports it through its forwarder, or why it cannot be opened.
llvm::Expected<size_t> getCublasLtVersion();

/// cuDNN's version (major * 10000 + minor * 100 + patch) as the opened
/// library reports it, or why it cannot be opened.
llvm::Expected<size_t> getCudnnVersion();

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDALIBRARIES_H
