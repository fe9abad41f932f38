//===- DebugOutput.h - gmopt's --debug and --debug-only ---------*- C++ -*-===//
//
// LLVM_DEBUG needs an LLVM built with assertions for its --debug-only flag;
// Debian's LLVM is a release build, so gmopt wires the same facility itself.
// A pass defines DEBUG_TYPE after its includes and writes traces with
// GMOPT_DEBUG(dbgs() << ...); the tools turn them on with --debug (all
// types) or --debug-only=TYPE[,TYPE...]. The check is one load of a global
// flag when debugging is off, and the traces are available in every build
// type so a release gmopt can still explain itself.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_DEBUGOUTPUT_H
#define GMOPT_PASSES_DEBUGOUTPUT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// True when any debug output is enabled (--debug or --debug-only).
extern bool debugEnabled;

/// Enables debug output of every type (--debug), or disables all of it.
void setDebugAll(bool enable);
/// Enables debug output for exactly \p types (--debug-only); an empty list
/// disables debug output unless --debug is also set.
void setDebugTypes(llvm::ArrayRef<std::string> types);
/// True if traces of \p type should be printed.
bool isDebugTypeEnabled(llvm::StringRef type);
/// The stream debug traces go to (stderr).
llvm::raw_ostream &dbgs();

} // namespace gmopt

/// Runs \p X (a statement, usually `dbgs() << ...`) when debug output of the
/// enclosing file's DEBUG_TYPE is enabled.
#define GMOPT_DEBUG(X)                                                         \
  do {                                                                         \
    if (::gmopt::debugEnabled && ::gmopt::isDebugTypeEnabled(DEBUG_TYPE)) {    \
      X;                                                                       \
    }                                                                          \
  } while (false)

#endif // GMOPT_PASSES_DEBUGOUTPUT_H
