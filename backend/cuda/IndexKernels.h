//===- IndexKernels.h - Launchers of the CUDA indexing kernels --*- C++ -*-===//
//
// The launchers IndexKernels.cu implements for CudaIndexDispatch.cpp:
// GatherElements / GatherND (any element size), the element and ND scatters
// that ScatterElements, ScatterND, GatherElementsGrad and GatherNDGrad run
// on an output already holding data (or zeros), Trilu, OneHot and Range.
// Same conventions as CudaKernels.h: raw device pointers, enqueue on the
// stream, return the launch status, never allocate or synchronize; a bad
// index raises the device fault (KernelFault::IndexOutOfRange) and touches
// nothing.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_INDEXKERNELS_H
#define GMOPT_BACKEND_CUDA_INDEXKERNELS_H

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/IndexMath.h"

namespace gmopt {
namespace cuda {

/// out[i] = data[elementOffset(g, i, indices[i])] for the \p count indices.
cudaError_t launchGatherElements(const void *data, const void *indices,
                                 bool indices32, void *out, int64_t count,
                                 const ElementIndexing &g, int64_t elementBytes,
                                 cudaStream_t stream);
/// out[elementOffset(g, i, indices[i])] op= updates[i] for the \p count
/// indices, atomically where \p op reduces (Add, Mul, Max, Min). \p storage
/// F32, F64, I64 or I32; F16 / BF16 with Add (combined in fp32, rounded per
/// update). With ScatterOp::None any storage (a plain store).
cudaError_t launchScatterElements(const void *indices, bool indices32,
                                  const void *updates, void *out, int64_t count,
                                  const ElementIndexing &g, Storage storage,
                                  ScatterOp op, cudaStream_t stream);
/// out[t * block + j] = data[ndBlockOffset(g, t, tuple t) + j].
cudaError_t launchGatherND(const void *data, const void *indices,
                           bool indices32, void *out, const NDIndexing &g,
                           int64_t elementBytes, cudaStream_t stream);
/// out[ndBlockOffset(g, t, tuple t) + j] op= updates[t * block + j], as
/// launchScatterElements.
cudaError_t launchScatterND(const void *indices, bool indices32,
                            const void *updates, void *out, const NDIndexing &g,
                            Storage storage, ScatterOp op, cudaStream_t stream);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_INDEXKERNELS_H
