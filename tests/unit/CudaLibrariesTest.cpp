//===- CudaLibrariesTest.cpp - cuBLASLt and cuDNN opened at run time ------===//
//
// The CUDA backend opens cuBLASLt and cuDNN with dlopen (CudaLibraries.cpp)
// instead of linking them, so the tools start where they are missing. These
// tests need no GPU: the libraries load on any machine with the toolkit
// gmopt was built with, and their version functions, called through
// gmopt's forwarders, must report the major version of the headers the
// file names were made from. A library that cannot be opened is an error
// naming the file (GMOPT_CUBLASLT_LIBRARY / GMOPT_CUDNN_LIBRARY point gmopt
// at another file), never a crash. A build without the CUDA backend must
// say so from every entry point.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaLibraries.h"

#include "backend/cuda/CudaDevice.h"

#include "llvm/ADT/StringRef.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstdlib>

using namespace gmopt;

namespace {

/// The major version in a library file name "lib<name>.so.<major>".
unsigned sonameMajor(llvm::StringRef fileName) {
  unsigned major = 0;
  EXPECT_FALSE(fileName.rsplit(".so.").second.getAsInteger(10, major))
      << fileName.str();
  return major;
}

TEST(CudaLibrariesTest, WithoutTheBackendEveryEntrySaysSo) {
  if (isCudaBackendBuilt())
    GTEST_SKIP() << "the CUDA backend is built here";
  EXPECT_TRUE(cuda::getCublasLtLibraryName().empty());
  EXPECT_NE(llvm::toString(cuda::loadCublasLt()).find("not built"),
            std::string::npos);
  EXPECT_NE(llvm::toString(cuda::loadCudnn()).find("not built"),
            std::string::npos);
  auto version = cuda::getCublasLtVersion();
  ASSERT_FALSE(version);
  EXPECT_NE(llvm::toString(version.takeError()).find("not built"),
            std::string::npos);
}

TEST(CudaLibrariesTest, CublasLtOpensAndForwards) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP() << "the CUDA backend is not built";
  std::string name = cuda::getCublasLtLibraryName();
  ASSERT_TRUE(llvm::StringRef(name).starts_with("libcublasLt.so.")) << name;
  // The toolkit the backend was built with ships the library.
  ASSERT_FALSE(cuda::loadCublasLt());
  auto version = cuda::getCublasLtVersion();
  ASSERT_TRUE(bool(version)) << llvm::toString(version.takeError());
  EXPECT_EQ(*version / 10000, sonameMajor(name));
  // Later calls give the first outcome.
  EXPECT_FALSE(cuda::loadCublasLt());
}

TEST(CudaLibrariesTest, CudnnOpensAndForwards) {
  if (!isCudaBackendBuilt() || !isCudnnBuilt())
    GTEST_SKIP() << "built without the CUDA backend or without cuDNN";
  std::string name = cuda::getCudnnLibraryName();
  ASSERT_TRUE(llvm::StringRef(name).starts_with("libcudnn.so.")) << name;
  auto version = cuda::getCudnnVersion();
  if (!version) {
    // cuDNN is optional beside the toolkit: where only its header was
    // found, the reason must name the file and the loader's complaint.
    std::string reason = llvm::toString(version.takeError());
    EXPECT_NE(reason.find(name), std::string::npos) << reason;
    GTEST_SKIP() << reason;
  }
  EXPECT_EQ(*version / 10000, sonameMajor(name));
  EXPECT_FALSE(cuda::loadCudnn());
}

/// In a fresh process (a threadsafe death test re-executes the binary, so
/// no library is open yet), points \p variable at a file that does not exist
/// and exits 0 when \p load's error names it.
template <typename LoadFn>
void expectMissingLibraryNamed(const char *variable, LoadFn load) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const char *missing = "/nonexistent/gmopt-test-library.so";
        setenv(variable, missing, /*overwrite=*/1);
        std::string reason = llvm::toString(load());
        bool named = reason.find(missing) != std::string::npos &&
                     reason.find("cannot load") != std::string::npos;
        std::fprintf(stderr, "%s\n", reason.c_str());
        std::exit(named ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "cannot load");
}

TEST(CudaLibrariesTest, AMissingCublasLtIsNamedNotFatal) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP() << "the CUDA backend is not built";
  expectMissingLibraryNamed("GMOPT_CUBLASLT_LIBRARY",
                            [] { return cuda::loadCublasLt(); });
}

TEST(CudaLibrariesTest, AMissingCudnnIsNamedNotFatal) {
  if (!isCudaBackendBuilt() || !isCudnnBuilt())
    GTEST_SKIP() << "built without the CUDA backend or without cuDNN";
  expectMissingLibraryNamed("GMOPT_CUDNN_LIBRARY",
                            [] { return cuda::loadCudnn(); });
}

} // namespace
