//===- ReplayMain.cpp - Runs a fuzz target over files, without libFuzzer --===//
//
// Outside the fuzz build (GMOPT_FUZZ off) each target of tests/fuzz/ is
// linked with this main instead of libFuzzer's, so ctest replays the
// committed corpus tests/fuzz/corpus/<target>/ in the regular and the
// sanitizer builds: every seed and every reproducer added there stays a
// regression test. Arguments are files or directories (their regular files,
// not recursively); each file is one input. A target that finds a bug
// aborts, which fails the test; otherwise this prints how many inputs ran.
//
//===----------------------------------------------------------------------===//

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

/// The files \p path names: itself, or the regular files in it, sorted.
bool collectInputs(llvm::StringRef path, std::vector<std::string> &inputs) {
  if (!llvm::sys::fs::is_directory(path)) {
    inputs.push_back(path.str());
    return true;
  }
  std::error_code ec;
  std::vector<std::string> found;
  for (llvm::sys::fs::directory_iterator it(path, ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::sys::fs::is_regular_file(it->path()))
      found.push_back(it->path());
  if (ec) {
    llvm::errs() << path << ": cannot list: " << ec.message() << '\n';
    return false;
  }
  std::sort(found.begin(), found.end());
  inputs.insert(inputs.end(), found.begin(), found.end());
  return true;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i)
    if (!collectInputs(argv[i], inputs))
      return 1;
  if (inputs.empty()) {
    llvm::errs() << "usage: " << argv[0] << " FILE-OR-DIR...\n";
    return 1;
  }
  for (const std::string &input : inputs) {
    auto buffer = llvm::MemoryBuffer::getFile(input, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer) {
      llvm::errs() << input << ": cannot read: " << buffer.getError().message()
                   << '\n';
      return 1;
    }
    // Like libFuzzer, hand the target a copy it owns exactly, so reads past
    // the end stay visible to AddressSanitizer.
    llvm::StringRef bytes = (*buffer)->getBuffer();
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(copy.data(), copy.size());
  }
  llvm::outs() << "replayed " << inputs.size() << " inputs\n";
  return 0;
}
