//===- CollectiveKernels.h - CPU kernels of the collectives -----*- C++ -*-===//
//
// Registration hook of the collectives' CPU kernels (gmopt.AllReduce over
// MPI), kept apart from KernelSupport.h's list of kernel families so the
// optional MPI support touches no header every kernel includes.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_COLLECTIVEKERNELS_H
#define GMOPT_BACKEND_CPU_COLLECTIVEKERNELS_H

namespace gmopt {
namespace cpu {

class KernelTable;

/// Registers gmopt.AllReduce's kernel and its workspace (the packed bucket).
void registerCollectiveKernels(KernelTable &table);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_COLLECTIVEKERNELS_H
