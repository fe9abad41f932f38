//===- NcclCollectivesTest.cpp - gmopt.AllReduce on CUDA over NCCL --------===//
//
// Without a GPU: the unique-id agreement of a CollectiveBootstrap (rank 0
// makes the id, the broadcast carries it; a second rank simulated by a
// broadcast that delivers rank 0's bytes), its error cases, the world-size
// check and the NCCL error message naming the call and the node, the CUDA
// kernel check of gmopt.AllReduce, and the driver's bootstrap outside
// mpirun (a single process). With a GPU (skipped elsewhere, with the
// reason): a one-rank NCCL communicator, and the MLP compiled with the
// data-parallel all-reduces (set to one rank) trained on CUDA over NCCL
// equals the CPU run — gpu-check.sh's 1-GPU NCCL smoke test.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/NcclCollectives.h"

#include "backend/cuda/CudaDevice.h"
#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/TextIR.h"
#include "tests/unit/TestPaths.h"
#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "gtest/gtest.h"

#include <cmath>
#include <iostream>

using namespace gmopt;

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GMOPT_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define GMOPT_TEST_SANITIZED 1
#endif

namespace {

/// NCCL keeps allocations (its bootstrap's) until exit, which
/// LeakSanitizer reads as leaks: the sanitized build leaves it alone, as
/// it leaves MPI out.
constexpr bool kSanitized =
#ifdef GMOPT_TEST_SANITIZED
    true;
#else
    false;
#endif

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

std::vector<uint8_t> idOf(uint8_t seed, size_t bytes = 128) {
  std::vector<uint8_t> id(bytes);
  for (size_t i = 0; i != bytes; ++i)
    id[i] = static_cast<uint8_t>(seed + i);
  return id;
}

constexpr llvm::StringLiteral kBucket = R"(
module attributes {opsets = {"" = 17, "gmopt" = 1}} {
  graph @g(%a: f32[8], %b: bf16[4], %i: i64[3]) {
    %ra, %rb = gmopt.AllReduce(%a, %b) {reduction = "sum", ranks = 2} : (f32[8], bf16[4]) name "bucket"
    %one = gmopt.AllReduce(%a) {ranks = 1} : f32[8] name "one"
    return %ra, %rb, %one
  }
}
)";

std::unique_ptr<Module> parseBucket() {
  auto module = parseModule(kBucket, "bucket.gmir");
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

const Node *nodeNamed(const Module &module, llvm::StringRef name) {
  for (const Node &node : module.getGraph().getNodes())
    if (node.getName() == name)
      return &node;
  return nullptr;
}

} // namespace

TEST(NcclBootstrapTest, ASingleProcessMakesItsOwnId) {
  CollectiveBootstrap single;
  unsigned made = 0;
  auto id = agreeOnUniqueId(single, 128, [&]() -> llvm::Expected<std::vector<uint8_t>> {
    ++made;
    return idOf(7);
  });
  ASSERT_TRUE(bool(id)) << llvm::toString(id.takeError());
  EXPECT_EQ(*id, idOf(7));
  EXPECT_EQ(made, 1u);
}

TEST(NcclBootstrapTest, RankZerosIdReachesTheOtherRanks) {
  // Two ranks over a fake transport: rank 0's broadcast records what it
  // sends; rank 1's delivers it. Rank 1 never makes an id.
  std::vector<uint8_t> wire;
  CollectiveBootstrap rank0;
  rank0.worldSize = 2;
  rank0.source = "a test transport";
  rank0.broadcastFromRankZero = [&](llvm::MutableArrayRef<uint8_t> bytes) {
    wire.assign(bytes.begin(), bytes.end());
    return llvm::Error::success();
  };
  CollectiveBootstrap rank1 = rank0;
  rank1.rank = 1;
  rank1.broadcastFromRankZero = [&](llvm::MutableArrayRef<uint8_t> bytes) {
    EXPECT_EQ(bytes.size(), wire.size());
    std::copy(wire.begin(), wire.end(), bytes.begin());
    return llvm::Error::success();
  };
  auto first = agreeOnUniqueId(rank0, 128, [] { return llvm::Expected<std::vector<uint8_t>>(idOf(42)); });
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  bool rank1Made = false;
  auto second = agreeOnUniqueId(rank1, 128, [&]() -> llvm::Expected<std::vector<uint8_t>> {
    rank1Made = true;
    return idOf(99);
  });
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  EXPECT_FALSE(rank1Made);
  EXPECT_EQ(*first, idOf(42));
  EXPECT_EQ(*second, *first);
}

TEST(NcclBootstrapTest, BadBootstrapsAreErrors) {
  auto make = [] { return llvm::Expected<std::vector<uint8_t>>(idOf(1)); };
  CollectiveBootstrap noBroadcast;
  noBroadcast.worldSize = 4;
  noBroadcast.source = "MPI";
  std::string message =
      errorText(agreeOnUniqueId(noBroadcast, 128, make).takeError());
  EXPECT_NE(message.find("NCCL bootstrap (MPI): 4 ranks but no way"),
            std::string::npos)
      << message;

  CollectiveBootstrap outside;
  outside.rank = 3;
  outside.worldSize = 2;
  message = errorText(agreeOnUniqueId(outside, 128, make).takeError());
  EXPECT_NE(message.find("rank 3 is outside a world of 2"), std::string::npos)
      << message;

  CollectiveBootstrap single;
  message = errorText(agreeOnUniqueId(single, 64, make).takeError());
  EXPECT_NE(message.find("has 128 bytes, expected 64"), std::string::npos)
      << message;

  CollectiveBootstrap failing;
  failing.worldSize = 2;
  failing.rank = 1;
  failing.source = "MPI";
  failing.broadcastFromRankZero = [](llvm::MutableArrayRef<uint8_t>) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "MPI: MPI_Bcast failed: peer gone");
  };
  message = errorText(agreeOnUniqueId(failing, 128, make).takeError());
  EXPECT_NE(message.find("broadcasting the unique id from rank 0 failed: MPI: "
                         "MPI_Bcast failed: peer gone"),
            std::string::npos)
      << message;

  // Rank 0's own failure to make an id comes back as it is.
  auto broken = [] {
    return llvm::Expected<std::vector<uint8_t>>(llvm::createStringError(
        llvm::inconvertibleErrorCode(), "ncclGetUniqueId failed"));
  };
  EXPECT_EQ(errorText(agreeOnUniqueId(single, 128, broken).takeError()),
            "ncclGetUniqueId failed");
}

TEST(NcclBootstrapTest, OutsideMpirunTheDriverIsASingleProcess) {
  CollectiveBootstrap bootstrap = mpiCollectiveBootstrap();
  EXPECT_EQ(bootstrap.rank, 0);
  EXPECT_EQ(bootstrap.worldSize, 1);
  EXPECT_FALSE(bool(bootstrap.broadcastFromRankZero));
  CudaDeviceOptions options;
  EXPECT_EQ(options.bootstrap.worldSize, 1);
}

TEST(NcclCollectivesTest, WorldSizeMustMatchTheCompiledRanks) {
  std::unique_ptr<Module> module = parseBucket();
  ASSERT_TRUE(module);
  EXPECT_TRUE(hasCollectives(*module));
  const Node *bucket = nodeNamed(*module, "bucket");
  const Node *one = nodeNamed(*module, "one");
  ASSERT_TRUE(bucket && one);
  CollectiveBootstrap single;
  EXPECT_EQ(errorText(checkCollectiveWorld(*one, single)), "");
  std::string message = errorText(checkCollectiveWorld(*bucket, single));
  EXPECT_NE(message.find("compiled for 2 data-parallel ranks but this CUDA "
                         "run has 1 (a single process)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("bucket"), std::string::npos) << message;
  EXPECT_NE(message.find("mpirun -np 2"), std::string::npos) << message;
  CollectiveBootstrap two;
  two.worldSize = 2;
  EXPECT_EQ(errorText(checkCollectiveWorld(*bucket, two)), "");
}

TEST(NcclCollectivesTest, NcclErrorsNameTheCallAndTheNode) {
  std::unique_ptr<Module> module = parseBucket();
  ASSERT_TRUE(module);
  const Node *bucket = nodeNamed(*module, "bucket");
  ASSERT_TRUE(bucket);
  std::string message = errorText(ncclCallError(
      "ncclAllReduce (operand 1, 4 elements)", 6, "remote process exited",
      "peer 1 closed the connection", bucket));
  EXPECT_EQ(message.rfind("ncclAllReduce (operand 1, 4 elements) failed: "
                          "remote process exited (ncclResult 6): peer 1 "
                          "closed the connection (node ",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find(bucket->describe()), std::string::npos) << message;
  EXPECT_EQ(errorText(ncclCallError("ncclGetUniqueId", 2, "system error", "",
                                    nullptr)),
            "ncclGetUniqueId failed: system error (ncclResult 2)");
}

TEST(NcclCollectivesTest, CudaKernelCheckOfTheAllReduce) {
  std::unique_ptr<Module> module = parseBucket();
  ASSERT_TRUE(module);
  const Node *bucket = nodeNamed(*module, "bucket");
  const Node *one = nodeNamed(*module, "one");
  ASSERT_TRUE(bucket && one);
  // f32 and bf16 operands; several ranks need NCCL in the build.
  EXPECT_EQ(errorText(checkCudaAllReduce(*one)), "");
  std::string message = errorText(checkCudaAllReduce(*bucket));
  if (isNcclBuilt())
    EXPECT_EQ(message, "");
  else
    EXPECT_NE(message.find("built without NCCL"), std::string::npos)
        << message;
  if (isCudaBackendBuilt()) {
    // The kernel table has the op (the same check, through checkCudaNode).
    EXPECT_TRUE(hasCudaKernelFor(kGmoptDomain, kAllReduceOp));
    EXPECT_EQ(errorText(checkCudaNode(*one)), "");
  }
}

TEST(NcclCollectivesTest, WithoutNcclCreatingACommunicatorSaysWhy) {
  if (isNcclBuilt())
    GTEST_SKIP() << "built with NCCL (the GPU test makes a communicator)";
  auto communicator = NcclCommunicator::create(CollectiveBootstrap(), 0);
  ASSERT_FALSE(bool(communicator));
  std::string message = llvm::toString(communicator.takeError());
  EXPECT_NE(message.find("built without NCCL"), std::string::npos) << message;
}

TEST(NcclCollectivesTest, WithoutAGpuCreatingACommunicatorFailsCleanly) {
  if (kSanitized)
    GTEST_SKIP() << "NCCL's start-up allocations read as leaks under the "
                    "sanitizers";
  auto device = probeCudaDevice();
  if (device || !isNcclBuilt()) {
    if (!device)
      llvm::consumeError(device.takeError());
    GTEST_SKIP() << "needs a build with NCCL on a machine without a GPU";
  }
  llvm::consumeError(device.takeError());
  // Either libnccl.so.2 is not found (the message says where to get it) or
  // an NCCL or CUDA call fails, named; never a crash.
  auto communicator = NcclCommunicator::create(CollectiveBootstrap(), 0);
  ASSERT_FALSE(bool(communicator));
  std::string message = llvm::toString(communicator.takeError());
  EXPECT_TRUE(message.find("NCCL is not installed") != std::string::npos ||
              message.find(" failed") != std::string::npos)
      << message;
  std::cout << "without a GPU: " << message << "\n";
}

//===----------------------------------------------------------------------===//
// On a GPU
//===----------------------------------------------------------------------===//

TEST(NcclGpuTest, OneRankCommunicatorAndTheMlpMatchTheCpu) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device: "
                 << llvm::toString(device.takeError());
  if (!isNcclBuilt())
    GTEST_SKIP() << "gmopt was built without NCCL";
  // NCCL itself: a one-rank communicator on the first GPU.
  auto communicator = NcclCommunicator::create(CollectiveBootstrap(), 0);
  if (!communicator)
    GTEST_SKIP() << "NCCL is not usable here: "
                 << llvm::toString(communicator.takeError());
  std::cout << "NCCL " << (*communicator)->getVersion() << " on "
            << device->name << "\n";
  communicator->reset();

  // The MLP with its gradients all-reduced in two buckets, placed for two
  // ranks and set to one: on CUDA the buckets go through the one-rank NCCL
  // communicator, on the CPU they are the identity; three SGD steps agree.
  std::string dir = testdataDir() + "/mlp";
  auto data = readTestDataSet(dir + "/test_data_set_0");
  ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
  const char *pipeline = "data-parallel{ranks=2,bucket-bytes=1MiB},"
                         "canonicalize,fold-transpose,schedule,plan-buffers";
  std::vector<TrainingResult> results;
  for (BackendKind backend : {BackendKind::Cpu, BackendKind::Cuda}) {
    auto model = loadRunnableModel(dir + "/training_model.onnx",
                                   {{"batch", 8}}, nullptr, false, pipeline,
                                   nullptr, "", backend);
    ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
    unsigned collectives = 0;
    for (Node &node : model->module->getGraph().getNodes())
      if (node.isa(kGmoptDomain, kAllReduceOp)) {
        node.setAttr("ranks", Attribute::getInt(1));
        ++collectives;
      }
    ASSERT_GE(collectives, 1u);
    InputSources sources;
    sources.testData = &*data;
    auto inputs = bindInputs(*model->module, sources);
    ASSERT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
    TrainingOptions options;
    options.backend = backend;
    options.steps = 3;
    auto result = trainModule(*model->module, *inputs, options);
    ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
    results.push_back(std::move(*result));
  }
  const TrainingResult &cpu = results[0], &cuda = results[1];
  ASSERT_EQ(cpu.losses.size(), cuda.losses.size());
  for (size_t s = 0; s < cpu.losses.size(); ++s)
    EXPECT_NEAR(cuda.losses[s], cpu.losses[s],
                1e-5 + 1e-4 * std::fabs(cpu.losses[s]))
        << "step " << s + 1;
  ASSERT_EQ(cpu.lastGradients.size(), cuda.lastGradients.size());
  for (size_t i = 0; i < cpu.lastGradients.size(); ++i) {
    const TensorData &expected = cpu.lastGradients[i].second;
    const TensorData &actual = cuda.lastGradients[i].second;
    ASSERT_EQ(expected.getNumElements(), actual.getNumElements());
    for (uint64_t k = 0; k < expected.getNumElements(); ++k) {
      double e = expected.getFloatElement(k), a = actual.getFloatElement(k);
      ASSERT_NEAR(a, e, 1e-5 + 1e-4 * std::fabs(e))
          << cpu.lastGradients[i].first << " element " << k;
    }
  }
}
