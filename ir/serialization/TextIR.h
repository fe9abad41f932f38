//===- TextIR.h - The textual form of a module ------------------*- C++ -*-===//
//
// gmopt's human-readable IR. It is what --print-ir-after shows and what the
// golden FileCheck tests are written in. print followed by parse is the
// identity (same graph, names, types, attributes, constant bytes, signature
// and module facts). Parse errors point at line:column.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_SERIALIZATION_TEXTIR_H
#define GMOPT_IR_SERIALIZATION_TEXTIR_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class Module;

/// Options for printing.
struct PrintOptions {
  /// Print constants of more than this many elements as a hex blob only
  /// when printing for round trip; with elideLargeConstants they are
  /// replaced by `<elided N bytes>` (not parseable, for humans).
  bool elideLargeConstants = false;
  /// Element count above which elideLargeConstants applies.
  uint64_t largeConstantElements = 16;
};

/// Prints \p module in the text form.
void printModule(const Module &module, llvm::raw_ostream &os,
                 PrintOptions options = {});

/// Parses the text form. \p bufferName is used in error messages
/// (`name:line:col: message`).
llvm::Expected<std::unique_ptr<Module>> parseModule(llvm::StringRef text,
                                                    llvm::StringRef bufferName);

} // namespace gmopt

#endif // GMOPT_IR_SERIALIZATION_TEXTIR_H
