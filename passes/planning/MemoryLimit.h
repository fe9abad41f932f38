//===- MemoryLimit.h - Memory limits as users write them --------*- C++ -*-===//
//
// A planned-peak limit: bytes (1073741824, 512MiB, 2GB, 24GiB) or a
// percentage of a reference peak (60%), as recompute{memory-limit=...} and
// gmopt-compile --memory-limit take it; and bytes printed for people.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PLANNING_MEMORYLIMIT_H
#define GMOPT_PASSES_PLANNING_MEMORYLIMIT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace gmopt {

/// A memory limit: bytes, or a fraction of a reference.
struct MemoryLimit {
  std::optional<uint64_t> bytes;
  double fraction = 1;
  uint64_t resolve(uint64_t reference) const;
};

/// Parses \p text; errors start with \p what (e.g. "--memory-limit").
llvm::Expected<MemoryLimit> parseMemoryLimit(llvm::StringRef text,
                                             llvm::StringRef what);

/// \p bytes for messages: the exact count and GiB to three decimals,
/// e.g. "1610612736 bytes (1.500 GiB)".
std::string formatBytes(uint64_t bytes);

} // namespace gmopt

#endif // GMOPT_PASSES_PLANNING_MEMORYLIMIT_H
