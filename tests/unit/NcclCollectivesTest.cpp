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
#include "ir/serialization/TextIR.h"
#include "tests/unit/BackendStep.h"
#include "tests/unit/TestPaths.h"
#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "gtest/gtest.h"

#include <cmath>
#include <iostream>
#include <map>

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

/// Every collective the CUDA backend runs, with a bucket of two tensors
/// (27 + 5 = 32 floats: 11 a rank over 3, one of padding) and of one.
constexpr llvm::StringLiteral kSharded = R"(
module attributes {opsets = {"" = 17, "gmopt" = 1}} {
  graph @g(%a: f32[27], %b: f32[5], %s: f32[11], %h: bf16[4]) {
    %inplace = gmopt.AllReduce(%a, %b) {in_place = 1, ranks = 3} : bool[1] name "inplace"
    %handle = gmopt.AllReduceStart(%a, %b) {ranks = 3} : f32[32] name "start"
    %done = gmopt.AllReduceWait(%handle, %a, %b) {ranks = 3} : bool[1] name "wait"
    %token = gmopt.AllReduceStart(%b) {reduction = "sum", ranks = 1} : bool[1] name "start1"
    %done1 = gmopt.AllReduceWait(%token, %b) {reduction = "sum", ranks = 1} : bool[1] name "wait1"
    %mine = gmopt.ReduceScatter(%a, %b) {ranks = 3} : f32[11] name "scatter"
    %part = gmopt.Shard(%a, %b) {ranks = 3} : f32[11] name "shard"
    %gathered = gmopt.AllGather(%s, %a, %b) {ranks = 3} : bool[1] name "gather"
    %whole = gmopt.ReduceScatter(%a, %b) {ranks = 1} : f32[32] name "scatter1"
    %bad = gmopt.AllReduce(%h) {in_place = 1, ranks = 1} : bool[1] name "bf16inplace"
    return %inplace, %done, %done1, %mine, %part, %gathered, %whole, %bad
  }
}
)";

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
  auto id = agreeOnUniqueId(single, 128,
                            [&]() -> llvm::Expected<std::vector<uint8_t>> {
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
  auto first = agreeOnUniqueId(rank0, 128, [] {
    return llvm::Expected<std::vector<uint8_t>>(idOf(42));
  });
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  bool rank1Made = false;
  auto second = agreeOnUniqueId(rank1, 128,
                                [&]() -> llvm::Expected<std::vector<uint8_t>> {
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
    EXPECT_NE(message.find("built without NCCL"), std::string::npos) << message;
  if (isCudaBackendBuilt()) {
    // The kernel table has the op (the same check, through checkCudaNode).
    EXPECT_TRUE(hasCudaKernelFor(kGmoptDomain, kAllReduceOp));
    EXPECT_EQ(errorText(checkCudaNode(*one)), "");
  }
}

TEST(NcclCollectivesTest, CudaKernelChecksOfZeroAndOverlapCollectives) {
  auto module = parseModule(kSharded, "sharded.gmir");
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  for (const char *name : {"inplace", "start", "wait", "start1", "wait1",
                           "scatter", "shard", "gather", "scatter1"}) {
    const Node *node = nodeNamed(**module, name);
    ASSERT_TRUE(node) << name;
    EXPECT_TRUE(isCudaCollective(*node)) << name;
    std::string message = errorText(node->getOpType() == kAllReduceOp
                                        ? checkCudaAllReduce(*node)
                                        : checkCudaShardedCollective(*node));
    // gmopt.Shard is local: it needs no NCCL.
    if (isNcclBuilt() || node->getIntAttr("ranks", 1) == 1 ||
        node->getOpType() == kShardOp)
      EXPECT_EQ(message, "") << name;
    else
      EXPECT_NE(message.find("built without NCCL"), std::string::npos)
          << message;
    if (isCudaBackendBuilt()) {
      EXPECT_TRUE(hasCudaKernelFor(kGmoptDomain, node->getOpType()));
      if (isNcclBuilt()) {
        EXPECT_EQ(errorText(checkCudaNode(*node)), "") << name;
      }
    }
  }
  // An in-place bucket is f32 (the CPU's, too).
  std::string message =
      errorText(checkCudaAllReduce(*nodeNamed(**module, "bf16inplace")));
  EXPECT_NE(message.find("bf16 is not supported"), std::string::npos)
      << message;
  // The planned workspace is the padded flat bucket over several ranks;
  // one rank packs into its result and needs none, and the all-reduces
  // reduce where the tensors are.
  EXPECT_EQ(getCudaCollectiveWorkspaceBytes(*nodeNamed(**module, "scatter")),
            alignBuffer(33 * sizeof(float)));
  EXPECT_EQ(getCudaCollectiveWorkspaceBytes(*nodeNamed(**module, "gather")),
            alignBuffer(33 * sizeof(float)));
  for (const char *name : {"scatter1", "shard", "inplace", "start", "wait"})
    EXPECT_EQ(getCudaCollectiveWorkspaceBytes(*nodeNamed(**module, name)), 0u)
        << name;
  if (isCudaBackendBuilt()) {
    EXPECT_EQ(getCudaKernelWorkspaceBytes(*nodeNamed(**module, "scatter")),
              alignBuffer(33 * sizeof(float)));
  }
}

TEST(NcclCollectivesTest, CudaKernelChecksRefuseMisshapenCollectives) {
  auto module = parseModule(R"(
module attributes {opsets = {"" = 17, "gmopt" = 1}} {
  graph @g(%a: f32[27], %b: f32[5], %s: f32[10], %t: f32[11]) {
    %handle = gmopt.AllReduceStart(%a, %b) {ranks = 1} : f32[31] name "shorthandle"
    %token = gmopt.AllReduceStart(%a, %b) {ranks = 1} : bool[1] name "tokenfortwo"
    %mine = gmopt.ReduceScatter(%a, %b) {ranks = 3} : f32[10] name "shortshard"
    %gathered = gmopt.AllGather(%s, %a, %b) {ranks = 3} : bool[1] name "shortgather"
    %max = gmopt.ReduceScatter(%a, %b) {reduction = "max", ranks = 3} : f32[11] name "max"
    %flag = gmopt.AllGather(%t, %a, %b) {ranks = 3} : f32[1] name "floatflag"
    return %handle, %token, %mine, %gathered, %max, %flag
  }
}
)",
                            "misshapen.gmir");
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  std::map<std::string, std::string> expected = {
      {"shorthandle", "the handle must be f32[32]"},
      {"tokenfortwo", "the handle must be f32[32]"},
      {"shortshard", "the result must be f32[11]"},
      {"shortgather", "the shard must be f32[11]"},
      {"max", "reduction must be mean or sum, got 'max'"},
      {"floatflag", "the done flag must be bool"}};
  for (const auto &[name, text] : expected) {
    const Node *node = nodeNamed(**module, name);
    ASSERT_TRUE(node) << name;
    std::string message = errorText(checkCudaShardedCollective(*node));
    EXPECT_NE(message.find(text), std::string::npos) << name << ": " << message;
    EXPECT_NE(message.find(node->describe()), std::string::npos) << message;
  }
}

TEST(NcclCollectivesTest, DataParallelAndZeroGraphsHaveCudaKernels) {
  if (!isCudaBackendBuilt() || !isNcclBuilt())
    GTEST_SKIP() << "needs the CUDA backend built with NCCL";
  // What `gmopt-compile --ranks 2 [--zero S] [--overlap]` makes of the MLP
  // with AdamW: every node, the collectives included, has a CUDA kernel.
  OptimizerSpec adamW;
  adamW.kind = OptimizerKind::AdamW;
  std::string dir = testdataDir() + "/mlp";
  for (const char *pipeline :
       {"data-parallel{ranks=2,bucket-bytes=1KiB},canonicalize,schedule,"
        "plan-buffers",
        "data-parallel{ranks=2,bucket-bytes=1KiB,overlap=true},canonicalize,"
        "schedule,plan-buffers",
        "zero-shard{stage=1,ranks=2,bucket-bytes=1KiB},canonicalize,schedule,"
        "plan-buffers",
        "zero-shard{stage=2,ranks=2,bucket-bytes=1KiB},canonicalize,schedule,"
        "plan-buffers"}) {
    auto model =
        loadRunnableModel(dir + "/training_model.onnx", {{"batch", 8}}, nullptr,
                          false, pipeline, &adamW, "", BackendKind::Cuda);
    ASSERT_TRUE(bool(model))
        << pipeline << ": " << llvm::toString(model.takeError());
    unsigned collectives = 0;
    for (const Node &node : model->module->getGraph().getNodes()) {
      collectives += isCudaCollective(node);
      if (llvm::Error err = checkCudaNode(node))
        ADD_FAILURE() << pipeline << ": " << llvm::toString(std::move(err));
    }
    EXPECT_GE(collectives, 2u) << pipeline;
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
  for (const char *pipeline :
       {"data-parallel{ranks=2,bucket-bytes=1MiB},canonicalize,fold-transpose,"
        "schedule,plan-buffers",
        "data-parallel{ranks=2,bucket-bytes=1KiB,overlap=true},canonicalize,"
        "fold-transpose,schedule,plan-buffers"}) {
    SCOPED_TRACE(pipeline);
    std::vector<TrainingResult> results;
    for (BackendKind backend : {BackendKind::Cpu, BackendKind::Cuda}) {
      auto model =
          loadRunnableModel(dir + "/training_model.onnx", {{"batch", 8}},
                            nullptr, false, pipeline, nullptr, "", backend);
      ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
      unsigned collectives = 0;
      // The start/wait pair's shapes do not depend on the world size, so the
      // overlapped buckets can be set to one rank as well.
      for (Node &node : model->module->getGraph().getNodes())
        if (isCudaCollective(node)) {
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
}

TEST(NcclGpuTest, OneRankZeroCollectivesMatchTheCpu) {
  // ZeRO's collectives over one rank, where the bucket is the only shard:
  // on CUDA with NCCL they run NCCL's in-place reduce-scatter and
  // all-gather of one rank, without it only the packing copies; either way
  // the results equal the CPU kernels'. The all-gather writes intermediate
  // values in place, which the readers after it see.
  auto module = parseModule(R"(
module attributes {opsets = {"" = 17, "gmopt" = 1}} {
  graph @g(%a: f32[27], %b: f32[5], %s: f32[32]) {
    %whole = gmopt.ReduceScatter(%a, %b) {ranks = 1} : f32[32] name "scatter"
    %part = gmopt.Shard(%b, %a) {ranks = 1} : f32[32] name "shard"
    %wa = Neg(%a) : f32[27]
    %wb = Neg(%b) : f32[5]
    %done = gmopt.AllGather(%s, %wa, %wb) {ranks = 1} : bool[1] name "gather"
    %ra = Abs(%wa) : f32[27]
    %rb = Abs(%wb) : f32[5]
    return %whole, %part, %ra, %rb, %done
  }
}
)",
                            "zero1.gmir");
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  std::vector<float> a(27), b(5), shard(32);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = 0.25f * float(i) - 3.0f;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = 10.0f + float(i);
  for (size_t i = 0; i < shard.size(); ++i)
    shard[i] = -1.5f * float(i);
  std::vector<TensorData> inputs = {
      TensorData::fromValues<float>(DType::F32, {27}, a),
      TensorData::fromValues<float>(DType::F32, {5}, b),
      TensorData::fromValues<float>(DType::F32, {32}, shard)};
  std::vector<TensorData> outputs[2];
  auto device = probeCudaDevice();
  int backends = device ? 2 : 1;
  for (int onCuda = 0; onCuda < backends; ++onCuda) {
    auto results = test::runBackendStep(**module, inputs, onCuda);
    ASSERT_TRUE(bool(results)) << llvm::toString(results.takeError());
    outputs[onCuda] = std::move(*results);
  }
  ASSERT_EQ(outputs[0].size(), 5u);
  // The CPU's are what ir/Collectives.h says: the flat bucket, and the
  // gathered shard unpacked into the parameters.
  EXPECT_FLOAT_EQ(float(outputs[0][0].getFloatElement(27)), b[0]);
  EXPECT_FLOAT_EQ(float(outputs[0][1].getFloatElement(5)), a[0]);
  EXPECT_FLOAT_EQ(float(outputs[0][3].getFloatElement(1)), 1.5f * 28.0f);
  if (!device)
    GTEST_SKIP() << "the CPU half passed; the CUDA half needs a CUDA device: "
                 << llvm::toString(device.takeError());
  for (size_t i = 0; i < outputs[0].size(); ++i)
    EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << "output " << i;
}
