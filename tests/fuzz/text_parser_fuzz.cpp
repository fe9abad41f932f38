//===- text_parser_fuzz.cpp - libFuzzer target for the text IR parser -----===//
//
// Feeds arbitrary bytes to parseModule. Any input must either fail with an
// llvm::Error or produce a module; crashes, sanitizer reports and timeouts
// are bugs. For every module that parses, the target also checks the
// round-trip contract: its printed form must parse again and print to the
// same text (print . parse . print == print).
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"
#include "ir/serialization/TextIR.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>
#include <string>

static std::string printToString(const gmopt::Module &module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  gmopt::printModule(module, os);
  return os.str();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef input(reinterpret_cast<const char *>(data), size);
  auto module = gmopt::parseModule(input, "fuzz.gmir");
  if (!module) {
    llvm::consumeError(module.takeError());
    return 0;
  }
  std::string printed = printToString(**module);
  auto reparsed = gmopt::parseModule(printed, "printed.gmir");
  if (!reparsed) {
    llvm::errs() << "printed module does not parse: "
                 << llvm::toString(reparsed.takeError()) << "\n"
                 << printed;
    std::abort();
  }
  std::string reprinted = printToString(**reparsed);
  if (reprinted != printed) {
    llvm::errs() << "print . parse . print differs from print:\n"
                 << printed << "---\n"
                 << reprinted;
    std::abort();
  }
  return 0;
}
