//===- DebugOutput.cpp - gmopt's own --debug / --debug-only switch --------===//
//
// State behind GMOPT_DEBUG: whether everything is traced (--debug) and the
// set of DEBUG_TYPEs selected with --debug-only. Kept in plain globals so the
// fast path (debugging off) is a single load.
//
//===----------------------------------------------------------------------===//

#include "passes/DebugOutput.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;

bool gmopt::debugEnabled = false;

namespace {
bool debugAll = false;

llvm::StringSet<> &selectedTypes() {
  static llvm::StringSet<> types;
  return types;
}

void updateEnabled() { debugEnabled = debugAll || !selectedTypes().empty(); }
} // namespace

void gmopt::setDebugAll(bool enable) {
  debugAll = enable;
  updateEnabled();
}

void gmopt::setDebugTypes(llvm::ArrayRef<std::string> types) {
  selectedTypes().clear();
  for (const std::string &type : types)
    if (!type.empty())
      selectedTypes().insert(type);
  updateEnabled();
}

bool gmopt::isDebugTypeEnabled(llvm::StringRef type) {
  return debugAll || selectedTypes().contains(type);
}

llvm::raw_ostream &gmopt::dbgs() { return llvm::errs(); }
