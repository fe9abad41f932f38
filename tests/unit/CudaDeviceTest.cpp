//===- CudaDeviceTest.cpp - Unit tests of CUDA device probing -------------===//
//
// On a machine without a GPU (CI) probing must fail cleanly with "no CUDA
// device"; without the toolkit it must say the backend is not built; with a
// GPU it must describe the device. Never a crash.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDevice.h"

#include "gtest/gtest.h"

using namespace gmopt;

TEST(CudaDeviceTest, ProbeSucceedsOrSaysWhy) {
  auto device = probeCudaDevice();
  if (device) {
    EXPECT_TRUE(isCudaBackendBuilt());
    EXPECT_FALSE(device->name.empty());
    EXPECT_GT(device->totalMemoryBytes, 0u);
    EXPECT_GE(device->computeMajor, 3);
    return;
  }
  std::string message = llvm::toString(device.takeError());
  if (isCudaBackendBuilt())
    EXPECT_EQ(message.rfind("no CUDA device", 0), 0u) << message;
  else
    EXPECT_NE(message.find("not built"), std::string::npos) << message;
}

TEST(CudaDeviceTest, RepeatedProbesAgree) {
  auto first = probeCudaDevice();
  auto second = probeCudaDevice();
  EXPECT_EQ(bool(first), bool(second));
  if (!first)
    llvm::consumeError(first.takeError());
  if (!second)
    llvm::consumeError(second.takeError());
}
