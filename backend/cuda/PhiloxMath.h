//===- PhiloxMath.h - The CUDA names of gmopt's Philox stream ---*- C++ -*-===//
//
// gmopt's Philox stream is backend/Philox.h, one `__host__ __device__`
// implementation for both backends. This header only brings its names into
// gmopt::cuda, where the CUDA dropout kernels (DropoutKernels.cu,
// BiasDropoutMath.h) and their host tests (CudaElementwiseMathTest.cpp,
// CudaLossTest.cpp) spell them cuda::PhiloxStreamKey and so on.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_PHILOXMATH_H
#define GMOPT_BACKEND_CUDA_PHILOXMATH_H

#include "backend/Philox.h"

namespace gmopt {
namespace cuda {

using gmopt::dropoutKeeps;
using gmopt::makePhiloxStreamKey;
using gmopt::philoxBlock;
using gmopt::PhiloxStreamKey;
using gmopt::philoxUnitFloat;
using gmopt::PhiloxWords;

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_PHILOXMATH_H
