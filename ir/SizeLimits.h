//===- SizeLimits.h - Largest tensors and plans gmopt accepts ---*- C++ -*-===//
//
// gmopt bounds the sizes it computes so that no arithmetic on a
// user-controlled shape can overflow: one tensor holds at most
// kMaxTensorBytes, the values of one memory plan add up to at most
// kMaxTotalBytes. Every entry point checks them at the earliest place it
// knows a shape (ONNX and text import, `--dim` binding, `.gm` loading, the
// verifier after each pass, the planners themselves), and reports the
// value that breaks them in one line. TensorType::getNumElements and
// getSizeInBytes saturate at UINT64_MAX instead of wrapping, so a size
// computed from an unchecked shape still reads as too large. Tensors that
// gmopt itself fills (synthetic inputs, zeros, copies) are allocated
// without throwing, so the system running out of memory is an error too.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_SIZELIMITS_H
#define GMOPT_IR_SIZELIMITS_H

#include "ir/Attribute.h"
#include "ir/Plan.h"
#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace gmopt {

class Module;

/// The largest tensor gmopt accepts: its byte size, and so its element
/// count and every static extent, is at most 2^50 (1 PiB). Zero extents do
/// not count (an empty tensor must still have bounded other dimensions), so
/// the product of any subset of a valid shape's extents fits too, and a few
/// bytes per element of kernel scratch on top stays far inside int64_t.
constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 50;
/// kMaxTensorBytes as text, for messages.
constexpr llvm::StringLiteral kMaxTensorBytesText = "2^50 bytes";
/// The largest sum of tensor sizes a memory plan adds up (all values of a
/// graph): 2^62 bytes. The planners refuse graphs beyond it, so offsets,
/// live-byte sums and figures never overflow 64 bits.
constexpr uint64_t kMaxTotalBytes = uint64_t(1) << 62;
/// kMaxTotalBytes as text, for messages.
constexpr llvm::StringLiteral kMaxTotalBytesText = "2^62 bytes";

/// Whether \p message reports a shape or plan beyond these limits. Every
/// such error gmopt makes names the limit it breaks (kMaxTensorBytesText or
/// kMaxTotalBytesText), and the text survives the prefixes (file, pass)
/// that tools put in front of a message; so a caller that probes growing
/// shapes (gmopt-compile --max-batch) can tell "too large to represent"
/// from any other failure after the error has become text.
bool isSizeLimitMessage(llvm::StringRef message);

/// Adds \p bytes, aligned as the planners align buffers, to the running
/// plan total \p total; an error once it passes kMaxTotalBytes (each
/// \p bytes is a checked tensor size, so the sum cannot wrap first).
llvm::Error addToPlanTotal(uint64_t &total, uint64_t bytes);

/// True when the static part of \p type fits kMaxTensorBytes: the product
/// of its non-zero static extents times the element size (at least one
/// byte) is at most kMaxTensorBytes. Symbolic and unknown dimensions do not
/// count (they are checked once bound); unranked types fit.
bool fitsSizeLimit(const TensorType &type);

/// Success when \p type fitsSizeLimit(); otherwise the one-line error
/// `WHAT has type T, larger than gmopt's limit of 2^50 bytes per tensor`
/// (\p what names the value, e.g. "graph input 'x'").
llvm::Error checkTensorSize(const TensorType &type, const llvm::Twine &what);

/// Checks that \p workspace asks for at most kMaxTensorBytes for every node
/// of \p module (an estimate that saturated reads as UINT64_MAX); the error
/// names the node and the request.
llvm::Error checkWorkspaceSizes(const Module &module,
                                const WorkspaceModel &workspace);

/// A new tensor of static \p type whose bytes \p fill writes. The storage
/// comes from malloc, never from a throwing allocation (LLVM's new-handler
/// aborts the process), so a size the system cannot provide is the error
/// `out of memory allocating N bytes for TYPE`; a type beyond
/// kMaxTensorBytes is refused before allocating.
llvm::Expected<TensorData> allocateTensorData(
    const TensorType &type,
    llvm::function_ref<void(llvm::MutableArrayRef<uint8_t>)> fill);

} // namespace gmopt

#endif // GMOPT_IR_SIZELIMITS_H
