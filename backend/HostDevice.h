//===- HostDevice.h - Functions for both host and CUDA device ---*- C++ -*-===//
//
// GMOPT_HD marks the per-element arithmetic the CPU kernels and the CUDA
// kernels share (backend/Philox.h, backend/WindowMath.h): `__host__
// __device__` inline functions under nvcc, plain inline ones in every other
// build, so the headers need no CUDA toolkit. backend/cuda/ElementwiseMath.h
// spells the same definition.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_HOSTDEVICE_H
#define GMOPT_BACKEND_HOSTDEVICE_H

#ifndef GMOPT_HD
#if defined(__CUDACC__)
#define GMOPT_HD __host__ __device__ __forceinline__
#else
#define GMOPT_HD inline
#endif
#endif

#endif // GMOPT_BACKEND_HOSTDEVICE_H
