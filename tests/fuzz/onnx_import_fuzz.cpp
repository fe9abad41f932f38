//===- onnx_import_fuzz.cpp - libFuzzer target for ONNX import ------------===//
//
// Feeds arbitrary bytes to importOnnxBytes. Every input must either import
// or produce an llvm::Error; crashes, sanitizer reports, hangs and leaks are
// bugs. External data is resolved against a directory that does not exist,
// so fuzz inputs cannot read files.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"
#include "ir/serialization/Onnx.h"

#include "onnx/onnx_pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gmopt::OnnxImportOptions options;
  options.externalDataDir = "/nonexistent/gmopt-fuzz";
  llvm::Expected<std::unique_ptr<gmopt::Module>> module =
      gmopt::importOnnxBytes(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "fuzz.onnx", options);
  if (!module) {
    llvm::consumeError(module.takeError());
    return 0;
  }
  // What imports must also export.
  auto exported = gmopt::exportOnnxModel(**module);
  if (!exported)
    llvm::consumeError(exported.takeError());
  return 0;
}
