//===- TestSupport.h - Helpers shared by the unit tests ---------*- C++ -*-===//
//
// Small helpers several unit-test files need: a temporary directory removed
// with everything in it at the end of the test (with ways to name, write
// and list its files), and the message of an llvm::Error or a failed
// llvm::Expected, failing the test when there is none.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_TESTSUPPORT_H
#define GMOPT_TESTS_UNIT_TESTSUPPORT_H

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <set>
#include <string>

namespace gmopt {
namespace test {

/// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
public:
  /// Creates a unique directory whose name starts with \p prefix.
  explicit TempDir(llvm::StringRef prefix = "gmopt-test") {
    std::error_code ec = llvm::sys::fs::createUniqueDirectory(prefix, path);
    EXPECT_FALSE(ec) << ec.message();
  }
  ~TempDir() { (void)llvm::sys::fs::remove_directories(path); }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  /// The path of \p name in the directory.
  std::string file(llvm::StringRef name) const {
    llvm::SmallString<256> joined(path);
    llvm::sys::path::append(joined, name);
    return std::string(joined);
  }
  /// Writes \p bytes to \p name in the directory.
  void write(llvm::StringRef name, llvm::StringRef bytes) const {
    std::error_code ec;
    llvm::raw_fd_ostream os(file(name), ec);
    ASSERT_FALSE(ec) << ec.message();
    os << bytes;
  }
  /// The names in the directory.
  std::set<std::string> list() const {
    std::set<std::string> names;
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(path, ec), end; it != end && !ec;
         it.increment(ec))
      names.insert(llvm::sys::path::filename(it->path()).str());
    return names;
  }

  llvm::SmallString<256> path;
};

/// The message of \p err (fails the test on success).
inline std::string errorOf(llvm::Error err) {
  if (!err) {
    ADD_FAILURE() << "expected an error";
    return "";
  }
  return llvm::toString(std::move(err));
}

/// The message of a failed \p result (fails the test on success).
template <typename T> std::string errorOf(llvm::Expected<T> result) {
  if (result) {
    ADD_FAILURE() << "expected an error";
    return "";
  }
  return llvm::toString(result.takeError());
}

} // namespace test
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_TESTSUPPORT_H
