//===- ExternalDataReport.h - External weights left unread -----*- C++ -*-===//
//
// gmopt-compile and gmopt-opt import external-data initializers and tensor
// attributes (Constant nodes' values) without reading them
// (ir/Attribute.h's lazy TensorData), so a model compiles with its weight
// files absent. This file lists what was left unread - name,
// bytes, file and offset, and whether the file is there - as the note the
// tools print on stderr and as the `external_data` object of
// gmopt-compile's --report-json.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_EXTERNALDATAREPORT_H
#define GMOPT_TOOLS_DRIVER_EXTERNALDATAREPORT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class Module;

/// One external tensor whose bytes were never read.
struct UnreadExternalTensor {
  /// The value's name (a Constant node's value: its result's; another
  /// node's tensor attribute: the attribute's).
  std::string name;
  /// The node whose attribute the tensor is; empty for an initializer or
  /// an input's default.
  std::string node;
  /// Its size in bytes.
  uint64_t bytes = 0;
  /// The file it lives in (the source directory joined with the location).
  std::string path;
  /// Its offset in the file.
  uint64_t offset = 0;
  /// Whether the file exists now.
  bool filePresent = false;
};

/// The external initializers (and external defaults of graph inputs), then
/// the external tensor attributes (Constant nodes' values), of \p module
/// whose bytes were not read, in graph order.
std::vector<UnreadExternalTensor> findUnreadExternalData(const Module &module);

/// Prints `TOOL: note: N external-data tensors (B bytes) were not read...`
/// and one line per tensor (at most \p maxLines, then a count of the
/// rest) to \p os; prints nothing when \p tensors is empty.
void printUnreadExternalDataNote(llvm::raw_ostream &os, llvm::StringRef tool,
                                 llvm::ArrayRef<UnreadExternalTensor> tensors,
                                 unsigned maxLines = 20);

/// The JSON form: {"unread_tensors": N, "unread_bytes": B, "missing_files":
/// M, "tensors": [{"name", "bytes", "file", "offset", "file_present",
/// "node" (tensor attributes only)}]}.
llvm::json::Object
unreadExternalDataJson(llvm::ArrayRef<UnreadExternalTensor> tensors);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_EXTERNALDATAREPORT_H
