//===- gm_loader_fuzz.cpp - libFuzzer target for the .gm loader -----------===//
//
// Feeds arbitrary bytes to readGmBytes. Every input must either load or
// produce an llvm::Error; crashes, sanitizer reports, hangs and leaks are
// bugs. Random bytes almost never pass the magic, length and CRC checks, so
// the input is tried twice: as it is (to exercise the header checks), and
// as the payload of a valid header with its computed CRC (to reach the
// protobuf parser, the embedded ONNX import and the name and plan checks).
// What loads must also write again (a failure there aborts). External
// data is resolved next to a file name in a directory that does not exist,
// so inputs cannot read files.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"
#include "ir/serialization/GmFile.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace {

constexpr const char *kFuzzFile = "/nonexistent/gmopt-fuzz/fuzz.gm";

void load(llvm::StringRef bytes) {
  llvm::Expected<gmopt::CompiledModule> loaded =
      gmopt::readGmBytes(bytes, kFuzzFile);
  if (!loaded) {
    llvm::consumeError(loaded.takeError());
    return;
  }
  // A file that loads is consistent, so writing it again must succeed.
  llvm::Expected<std::string> written =
      gmopt::writeGmBytes(*loaded->module, *loaded->original, loaded->pipeline);
  if (!written) {
    llvm::errs() << "loaded but cannot be written again: "
                 << llvm::toString(written.takeError()) << '\n';
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  load(bytes);
  load(gmopt::wrapGmPayload(bytes));
  return 0;
}
