//===- TcpWorldTest.cpp - gmopt's TCP data-parallel world -----------------===//
//
// TcpWorld (backend/cpu/TcpWorld.h) with its ranks as threads of this
// process on the loopback interface: the rendezvous, the all-reduce (every
// rank gets the rank-order sum, bit-identical), the all-gather, and the
// faults - a rank that never arrives is named by rank 0 within the timeout,
// an abort reaches the others with its reason, and a rank claiming another
// world size is refused at the rendezvous.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/TcpWorld.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// A loopback port that was free a moment ago.
unsigned freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof address),
            0);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

/// Runs \p body(rank, world) on \p ranks threads, each with its own world
/// (nullptr and the error text in \p errors[rank] when it did not form).
void runRanks(int ranks, double timeout,
              const std::function<void(int, TcpWorld &)> &body,
              std::vector<std::string> &errors,
              const std::function<int(int)> &worldSizeOf = nullptr) {
  unsigned port = freePort();
  errors.assign(size_t(ranks), "");
  std::vector<std::thread> threads;
  for (int rank = 0; rank != ranks; ++rank)
    threads.emplace_back([&, rank] {
      TcpWorldConfig config;
      config.rank = rank;
      config.worldSize = worldSizeOf ? worldSizeOf(rank) : ranks;
      config.masterAddress = "127.0.0.1";
      config.masterPort = port;
      config.timeoutSeconds = timeout;
      auto world = TcpWorld::connect(config);
      if (!world) {
        errors[size_t(rank)] = llvm::toString(world.takeError());
        return;
      }
      body(rank, **world);
    });
  for (std::thread &thread : threads)
    thread.join();
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

TEST(TcpWorldTest, AllReduceGivesEveryRankTheSum) {
  constexpr int kRanks = 3;
  std::vector<std::vector<float>> data(kRanks);
  std::vector<std::string> failures(kRanks), errors;
  runRanks(
      kRanks, 30,
      [&](int rank, TcpWorld &world) {
        EXPECT_EQ(world.getRank(), rank);
        EXPECT_EQ(world.getWorldSize(), kRanks);
        // Large enough that the sends need several polls.
        std::vector<float> values(300000);
        for (size_t k = 0; k != values.size(); ++k)
          values[k] = float(rank + 1) * 0.1f + float(k % 7);
        if (llvm::Error err =
                world.allReduceSumF32(values.data(), values.size(), "test"))
          failures[size_t(rank)] = llvm::toString(std::move(err));
        data[size_t(rank)] = std::move(values);
      },
      errors);
  for (int rank = 0; rank != kRanks; ++rank) {
    ASSERT_EQ(errors[size_t(rank)], "");
    ASSERT_EQ(failures[size_t(rank)], "");
  }
  for (size_t k = 0; k < data[0].size(); k += 9973) {
    float expected = 0.1f + float(k % 7);
    expected += 0.2f + float(k % 7);
    expected += 0.3f + float(k % 7);
    EXPECT_EQ(data[0][k], expected) << k;
  }
  EXPECT_EQ(data[1], data[0]);
  EXPECT_EQ(data[2], data[0]);
}

TEST(TcpWorldTest, AllGatherConcatenatesInRankOrder) {
  std::vector<std::vector<uint64_t>> gathered(2);
  std::vector<std::string> errors;
  runRanks(
      2, 30,
      [&](int rank, TcpWorld &world) {
        auto all = world.allGatherU64(
            {uint64_t(10 + rank), uint64_t(20 + rank)}, "gather");
        ASSERT_TRUE(bool(all)) << llvm::toString(all.takeError());
        gathered[size_t(rank)] = *all;
      },
      errors);
  std::vector<uint64_t> expected{10, 20, 11, 21};
  EXPECT_EQ(gathered[0], expected);
  EXPECT_EQ(gathered[1], expected);
}

TEST(TcpWorldTest, RankZeroNamesTheRankThatDoesNotArrive) {
  std::vector<std::string> failures(2), errors;
  std::promise<void> rankZeroGaveUp;
  std::shared_future<void> gaveUp = rankZeroGaveUp.get_future().share();
  runRanks(
      2, 0.5,
      [&](int rank, TcpWorld &world) {
        if (rank == 1) {
          // Enters the collective only after rank 0 gave up and aborted.
          gaveUp.wait();
          float value = 0;
          llvm::Error err = world.allReduceSumF32(&value, 1, "late");
          failures[1] = err ? llvm::toString(std::move(err)) : "";
          return;
        }
        float value = 1;
        auto start = std::chrono::steady_clock::now();
        llvm::Error err = world.allReduceSumF32(&value, 1, "the all-reduce");
        double waited = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count();
        failures[0] = err ? llvm::toString(std::move(err)) : "";
        EXPECT_GE(waited, 0.5);
        world.abort(failures[0]);
        rankZeroGaveUp.set_value();
      },
      errors);
  EXPECT_TRUE(
      contains(failures[0], "rank 1 did not reach the all-reduce within 0.5 s"))
      << failures[0];
  // Rank 1 then meets rank 0's abort, with the reason.
  EXPECT_TRUE(contains(failures[1], "rank 0 stopped the run")) << failures[1];
  EXPECT_TRUE(contains(failures[1], "rank 1 did not reach")) << failures[1];
}

TEST(TcpWorldTest, AnAbortReachesRankZeroWithItsReason) {
  std::vector<std::string> failures(2), errors;
  runRanks(
      2, 30,
      [&](int rank, TcpWorld &world) {
        if (rank == 1) {
          world.abort("cannot read the inputs");
          return;
        }
        float value = 1;
        llvm::Error err = world.allReduceSumF32(&value, 1, "step 1");
        failures[0] = err ? llvm::toString(std::move(err)) : "";
        // A broken world fails at once.
        llvm::Error again = world.allReduceSumF32(&value, 1, "step 2");
        failures[1] = again ? llvm::toString(std::move(again)) : "";
      },
      errors);
  EXPECT_TRUE(contains(failures[0], "rank 1 failed: cannot read the inputs"))
      << failures[0];
  EXPECT_TRUE(contains(failures[1], "failed earlier")) << failures[1];
}

TEST(TcpWorldTest, MismatchedWorldSizesAreRefusedAtTheRendezvous) {
  std::vector<std::string> errors;
  runRanks(
      2, 30, [&](int, TcpWorld &) { ADD_FAILURE() << "world formed"; }, errors,
      [](int rank) { return rank == 0 ? 2 : 3; });
  EXPECT_TRUE(contains(errors[0], "rank 1 has WORLD_SIZE=3 but rank 0 has 2"))
      << errors[0];
  EXPECT_TRUE(contains(errors[1], "rank 0 refused the world")) << errors[1];
}

TEST(TcpWorldTest, AMissingRankIsNamedAtTheRendezvous) {
  TcpWorldConfig config;
  config.rank = 0;
  config.worldSize = 3;
  config.masterAddress = "127.0.0.1";
  config.masterPort = freePort();
  config.timeoutSeconds = 0.3;
  auto world = TcpWorld::connect(config);
  ASSERT_FALSE(bool(world));
  std::string message = llvm::toString(world.takeError());
  EXPECT_TRUE(contains(message, "ranks 1, 2 did not join rank 0")) << message;
}

TEST(TcpWorldTest, ARankOutsideTheWorldIsAnError) {
  TcpWorldConfig config;
  config.rank = 2;
  config.worldSize = 2;
  auto world = TcpWorld::connect(config);
  ASSERT_FALSE(bool(world));
  EXPECT_TRUE(contains(llvm::toString(world.takeError()),
                       "RANK=2 is not below WORLD_SIZE=2"));
}

} // namespace
