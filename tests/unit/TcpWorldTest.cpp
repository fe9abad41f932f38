//===- TcpWorldTest.cpp - gmopt's TCP data-parallel world -----------------===//
//
// TcpWorld (backend/cpu/TcpWorld.h) with its ranks as threads of this
// process on the loopback interface: the rendezvous, the all-reduce (every
// rank gets the rank-order sum, bit-identical), the all-gather, and the
// faults - a rank that never arrives is named by rank 0 within the timeout,
// an abort reaches the others with its reason, and a rank claiming another
// world size is refused at the rendezvous. Then strangers on the port (raw
// sockets of this process): a silent connection, half a header or a bare
// hello claiming rank 1 neither delays nor displaces the real rank 1, a
// stalled one is dropped at its handshake deadline with a note, a rank
// with another secret is refused at once while the real one joins, and
// the rendezvous timeout names the rank that did not come, not a stranger.
// Last, the HMAC-SHA-256 under the handshake (RFC 4231's vectors), the
// world secret read from the environment, and timeouts too large for the
// clock.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/TcpWorld.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// The world secret of the tests' ranks.
constexpr const char *kSecret = "the tests' world secret, 0123456789";

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
      config.secret = kSecret;
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
  config.secret = kSecret;
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

//===----------------------------------------------------------------------===//
// Strangers on the port
//===----------------------------------------------------------------------===//

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// A rank of the tests' world at \p port.
TcpWorldConfig rankConfig(int rank, int worldSize, unsigned port,
                          double timeout) {
  TcpWorldConfig config;
  config.rank = rank;
  config.worldSize = worldSize;
  config.masterAddress = "127.0.0.1";
  config.masterPort = port;
  config.timeoutSeconds = timeout;
  config.secret = kSecret;
  return config;
}

/// How one rank's TcpWorld::connect ended.
struct Joined {
  std::unique_ptr<TcpWorld> world;
  std::string error;
  /// Seconds connect() took.
  double seconds = 0;
};

/// Runs TcpWorld::connect(\p config) on a thread of its own.
std::future<Joined> startRank(TcpWorldConfig config) {
  return std::async(std::launch::async, [config] {
    Joined joined;
    Clock::time_point start = Clock::now();
    auto world = TcpWorld::connect(config);
    joined.seconds = secondsSince(start);
    if (world)
      joined.world = std::move(*world);
    else
      joined.error = llvm::toString(world.takeError());
    return joined;
  });
}

/// Collects rank 0's notes (from its own thread).
struct Notes {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::function<void(const std::string &)> sink() {
    return [this](const std::string &line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(line);
    };
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string text;
    for (const std::string &line : lines)
      text += line + "\n";
    return text;
  }
};

/// A client that is no rank: connects to 127.0.0.1:\p port (retrying
/// until rank 0 listens, at most 10 s) and sends \p bytes. -1 on failure.
int connectStranger(unsigned port, llvm::ArrayRef<uint8_t> bytes) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(uint16_t(port));
  Clock::time_point start = Clock::now();
  while (secondsSince(start) < 10) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof address) ==
        0) {
      if (!bytes.empty() && ::send(fd, bytes.data(), bytes.size(),
                                   MSG_NOSIGNAL) != ssize_t(bytes.size())) {
        ::close(fd);
        return -1;
      }
      return fd;
    }
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

/// Seconds until rank 0 closes the stranger \p fd (whatever it sent is
/// read and ignored), or -1 if it is still open after \p limit seconds.
double secondsUntilClosed(int fd, double limit) {
  Clock::time_point start = Clock::now();
  char buffer[256];
  while (secondsSince(start) < limit) {
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, 50) <= 0)
      continue;
    ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0)
      return secondsSince(start);
  }
  return -1;
}

/// The first bytes of a gmopt message header: magic, type, sequence, size.
std::vector<uint8_t> headerBytes(uint32_t type, uint64_t payloadBytes) {
  std::vector<uint8_t> bytes(24);
  uint32_t magic = 0x676d6f70;
  uint64_t sequence = 0;
  std::memcpy(bytes.data(), &magic, 4);
  std::memcpy(bytes.data() + 4, &type, 4);
  std::memcpy(bytes.data() + 8, &sequence, 8);
  std::memcpy(bytes.data() + 16, &payloadBytes, 8);
  return bytes;
}

/// The hello of gmopt's first TCP world (no proof of any secret): RANK=1
/// of a world of \p worldSize.
std::vector<uint8_t> bareHelloClaimingRankOne(int32_t worldSize) {
  std::vector<uint8_t> bytes = headerBytes(1, 8);
  int32_t hello[2] = {1, worldSize};
  const uint8_t *at = reinterpret_cast<const uint8_t *>(hello);
  bytes.insert(bytes.end(), at, at + sizeof hello);
  return bytes;
}

/// All-reduces one float (rank r gives r + 1) over \p worlds, one thread
/// each; the sums, or the errors as text.
std::vector<std::string> allReduceRankNumbers(std::vector<TcpWorld *> worlds) {
  std::vector<std::string> results(worlds.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r != worlds.size(); ++r)
    threads.emplace_back([&, r] {
      float value = float(worlds[r]->getRank() + 1);
      llvm::Error err = worlds[r]->allReduceSumF32(&value, 1, "the check");
      results[r] =
          err ? llvm::toString(std::move(err)) : std::to_string(int(value));
    });
  for (std::thread &thread : threads)
    thread.join();
  return results;
}

/// What a stranger sends before rank 1 starts.
struct StrangerCase {
  const char *name;
  std::vector<uint8_t> bytes;
};

/// Names a case in gtest's messages.
void PrintTo(const StrangerCase &stranger, std::ostream *os) {
  *os << stranger.name;
}

class TcpWorldStrangerTest : public testing::TestWithParam<StrangerCase> {};

// The stranger connects first and holds its connection open; rank 1 then
// joins at once, not after the stranger's handshake deadline (1 s here) nor
// the rendezvous timeout (rank 0 used to serve the stranger alone until the
// timeout, then blame rank 1), and it is the real rank 1 that joins (a
// bare hello claiming rank 1 used to take its place).
TEST_P(TcpWorldStrangerTest, NeitherDelaysNorDisplacesRankOne) {
  unsigned port = freePort();
  Notes notes;
  TcpWorldConfig zeroConfig = rankConfig(0, 2, port, 4);
  zeroConfig.handshakeSeconds = 1;
  zeroConfig.note = notes.sink();
  std::future<Joined> zero = startRank(zeroConfig);
  int stranger = connectStranger(port, GetParam().bytes);
  ASSERT_GE(stranger, 0);
  std::future<Joined> one = startRank(rankConfig(1, 2, port, 4));
  Joined joinedOne = one.get(), joinedZero = zero.get();
  ASSERT_EQ(joinedZero.error, "");
  ASSERT_EQ(joinedOne.error, "");
  EXPECT_LT(joinedOne.seconds, 1.0) << "rank 1 waited for the stranger";
  EXPECT_EQ(
      allReduceRankNumbers({joinedZero.world.get(), joinedOne.world.get()}),
      (std::vector<std::string>{"3", "3"}));
  // Rank 0 let the stranger go, and said so.
  EXPECT_GE(secondsUntilClosed(stranger, 2), 0);
  EXPECT_TRUE(contains(notes.all(), "the connection from 127.0.0.1:"))
      << notes.all();
  ::close(stranger);
}

INSTANTIATE_TEST_SUITE_P(
    Strangers, TcpWorldStrangerTest,
    testing::Values(StrangerCase{"Silent", {}},
                    StrangerCase{"HalfHeader",
                                 [] {
                                   std::vector<uint8_t> bytes =
                                       headerBytes(1, 72);
                                   bytes.resize(10);
                                   return bytes;
                                 }()},
                    StrangerCase{"BareHelloClaimingRankOne",
                                 bareHelloClaimingRankOne(2)}),
    [](const testing::TestParamInfo<StrangerCase> &info) {
      return std::string(info.param.name);
    });

TEST(TcpWorldTest, AStalledConnectionIsDroppedAtItsHandshakeDeadline) {
  unsigned port = freePort();
  Notes notes;
  TcpWorldConfig zeroConfig = rankConfig(0, 2, port, 10);
  zeroConfig.handshakeSeconds = 0.3;
  zeroConfig.note = notes.sink();
  std::future<Joined> zero = startRank(zeroConfig);
  std::vector<uint8_t> half = headerBytes(1, 72);
  half.resize(10);
  int stranger = connectStranger(port, half);
  ASSERT_GE(stranger, 0);
  // Dropped at 0.3 s, long before the world's 10 s.
  double closedAfter = secondsUntilClosed(stranger, 3);
  EXPECT_GE(closedAfter, 0.25);
  EXPECT_LT(closedAfter, 2.0);
  ::close(stranger);
  EXPECT_TRUE(contains(notes.all(), "sent 10 bytes of a hello, not all of "
                                    "it, within 0.3 s of connecting"))
      << notes.all();
  // A stranger sending garbage is dropped as soon as its header is in (the
  // note says why; the bound leaves room for a loaded machine).
  const char garbage[] = "GET / HTTP/1.1\r\nHost: rank0\r\n\r\n";
  stranger = connectStranger(
      port, llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(garbage),
                                    sizeof garbage - 1));
  ASSERT_GE(stranger, 0);
  closedAfter = secondsUntilClosed(stranger, 3);
  EXPECT_GE(closedAfter, 0);
  EXPECT_LT(closedAfter, 2.0);
  ::close(stranger);
  EXPECT_TRUE(contains(notes.all(), "sent something that is not a gmopt hello"))
      << notes.all();
  std::future<Joined> one = startRank(rankConfig(1, 2, port, 10));
  EXPECT_EQ(one.get().error, "");
  EXPECT_EQ(zero.get().error, "");
}

TEST(TcpWorldTest, ARankWithAnotherSecretIsRefusedAndTheRealOneJoins) {
  unsigned port = freePort();
  Notes notes;
  TcpWorldConfig zeroConfig = rankConfig(0, 2, port, 4);
  zeroConfig.note = notes.sink();
  std::future<Joined> zero = startRank(zeroConfig);
  TcpWorldConfig impostorConfig = rankConfig(1, 2, port, 4);
  impostorConfig.secret = "another secret, 0123456789";
  Joined impostor = startRank(impostorConfig).get();
  EXPECT_EQ(impostor.world, nullptr);
  EXPECT_TRUE(contains(impostor.error,
                       "rank 0 at 127.0.0.1:" + std::to_string(port) +
                           " refused rank 1: its proof of the world secret "
                           "does not match rank 0's"))
      << impostor.error;
  EXPECT_LT(impostor.seconds, 1.0) << "refused at once, not at the timeout";
  Joined one = startRank(rankConfig(1, 2, port, 4)).get();
  Joined joinedZero = zero.get();
  ASSERT_EQ(one.error, "");
  ASSERT_EQ(joinedZero.error, "");
  EXPECT_EQ(allReduceRankNumbers({joinedZero.world.get(), one.world.get()}),
            (std::vector<std::string>{"3", "3"}));
  EXPECT_TRUE(contains(notes.all(), "claimed RANK=1 without the world secret"))
      << notes.all();
}

TEST(TcpWorldTest, AHelloClaimingAJoinedRankDoesNotDisplaceIt) {
  unsigned port = freePort();
  std::future<Joined> zero = startRank(rankConfig(0, 3, port, 4));
  std::future<Joined> one = startRank(rankConfig(1, 3, port, 4));
  // Rank 1 has joined (it waits for rank 2) by the time the others come.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int stranger = connectStranger(port, bareHelloClaimingRankOne(3));
  ASSERT_GE(stranger, 0);
  TcpWorldConfig impostorConfig = rankConfig(1, 3, port, 4);
  impostorConfig.secret = "another secret, 0123456789";
  EXPECT_NE(startRank(impostorConfig).get().error, "");
  Joined two = startRank(rankConfig(2, 3, port, 4)).get();
  Joined joinedOne = one.get(), joinedZero = zero.get();
  ASSERT_EQ(joinedZero.error, "");
  ASSERT_EQ(joinedOne.error, "");
  ASSERT_EQ(two.error, "");
  EXPECT_EQ(allReduceRankNumbers({joinedZero.world.get(), joinedOne.world.get(),
                                  two.world.get()}),
            (std::vector<std::string>{"6", "6", "6"}));
  ::close(stranger);
}

TEST(TcpWorldTest, TheTimeoutNamesTheMissingRankNotAStranger) {
  unsigned port = freePort();
  TcpWorldConfig zeroConfig = rankConfig(0, 3, port, 1.5);
  zeroConfig.handshakeSeconds = 0.5;
  zeroConfig.note = [](const std::string &) {};
  std::future<Joined> zero = startRank(zeroConfig);
  int stranger = connectStranger(port, {});
  ASSERT_GE(stranger, 0);
  std::future<Joined> one = startRank(rankConfig(1, 3, port, 1.5));
  // Rank 2 never comes.
  Joined joinedZero = zero.get(), joinedOne = one.get();
  ::close(stranger);
  EXPECT_TRUE(contains(joinedZero.error, "rank 2 did not join rank 0 at "
                                         "127.0.0.1:"))
      << joinedZero.error;
  EXPECT_FALSE(contains(joinedZero.error, "ranks 1, 2")) << joinedZero.error;
  EXPECT_TRUE(contains(joinedZero.error,
                       "meanwhile rank 0 dropped 1 connection: 127.0.0.1:"))
      << joinedZero.error;
  EXPECT_TRUE(
      contains(joinedZero.error, "sent nothing within 0.5 s of connecting"))
      << joinedZero.error;
  EXPECT_TRUE(contains(joinedOne.error,
                       "rank 0 refused the world: rank 2 did not join"))
      << joinedOne.error;
}

TEST(TcpWorldTest, TheTimeoutNamesARankThatCameWithAnotherSecret) {
  unsigned port = freePort();
  TcpWorldConfig zeroConfig = rankConfig(0, 2, port, 1);
  zeroConfig.note = [](const std::string &) {};
  std::future<Joined> zero = startRank(zeroConfig);
  TcpWorldConfig oneConfig = rankConfig(1, 2, port, 1);
  oneConfig.secret = "another secret, 0123456789";
  Joined one = startRank(oneConfig).get();
  EXPECT_TRUE(contains(one.error, "refused rank 1")) << one.error;
  Joined joinedZero = zero.get();
  EXPECT_TRUE(contains(joinedZero.error, "rank 1 did not join rank 0"))
      << joinedZero.error;
  EXPECT_TRUE(contains(joinedZero.error,
                       "claimed RANK=1 without the world secret (a rank "
                       "launched with another secret, or not a rank of this "
                       "world)"))
      << joinedZero.error;
}

TEST(TcpWorldTest, RankZeroMustProveTheSecretToo) {
  // Something that is not rank 0 holds the port and answers like the
  // first TCP world (no challenge): rank 1 does not take it for rank 0.
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(
      ::bind(listener, reinterpret_cast<sockaddr *>(&address), sizeof address),
      0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t length = sizeof address;
  ::getsockname(listener, reinterpret_cast<sockaddr *>(&address), &length);
  std::future<Joined> one =
      startRank(rankConfig(1, 2, ntohs(address.sin_port), 5));
  int fd = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> welcome = headerBytes(2, 0);
  ASSERT_EQ(::send(fd, welcome.data(), welcome.size(), MSG_NOSIGNAL), 24);
  Joined joined = one.get();
  EXPECT_EQ(joined.world, nullptr);
  EXPECT_TRUE(contains(joined.error, "is not rank 0 of this world"))
      << joined.error;
  ::close(fd);
  ::close(listener);
}

TEST(TcpWorldTest, AWorldOfSeveralRanksNeedsASecret) {
  TcpWorldConfig config = rankConfig(1, 2, freePort(), 1);
  config.secret = "";
  auto world = TcpWorld::connect(config);
  ASSERT_FALSE(bool(world));
  EXPECT_TRUE(contains(llvm::toString(world.takeError()),
                       "needs a secret of at least 16 characters"));
}

//===----------------------------------------------------------------------===//
// HMAC-SHA-256, the world secret, timeouts
//===----------------------------------------------------------------------===//

std::string hmacHex(llvm::ArrayRef<uint8_t> key, llvm::StringRef message) {
  return llvm::toHex(hmacSha256(key, llvm::arrayRefFromStringRef(message)),
                     /*LowerCase=*/true);
}

// RFC 4231, section 4: test cases 1-7 (case 5 compares the 128 bits it
// truncates to).
TEST(TcpWorldTest, HmacSha256MatchesRfc4231) {
  std::vector<uint8_t> key(20, 0x0b);
  EXPECT_EQ(hmacHex(key, "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmacHex(llvm::arrayRefFromStringRef("Jefe"),
                    "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  key.assign(20, 0xaa);
  EXPECT_EQ(hmacHex(key, std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  key.clear();
  for (uint8_t byte = 1; byte <= 25; ++byte)
    key.push_back(byte);
  EXPECT_EQ(hmacHex(key, std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  key.assign(20, 0x0c);
  EXPECT_EQ(hmacHex(key, "Test With Truncation").substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  key.assign(131, 0xaa);
  EXPECT_EQ(hmacHex(key, "Test Using Larger Than Block-Size Key - Hash Key "
                         "First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hmacHex(key, "This is a test using a larger than block-size key "
                         "and a larger than block-size data. The key needs to "
                         "be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

/// Sets (or with nullptr unsets) the secret variables for one test.
class SecretEnvironment {
public:
  SecretEnvironment(const char *secret, const char *file) {
    set(kWorldSecretVariable, secret);
    set(kWorldSecretFileVariable, file);
  }
  ~SecretEnvironment() {
    ::unsetenv(kWorldSecretVariable);
    ::unsetenv(kWorldSecretFileVariable);
  }

private:
  static void set(const char *name, const char *value) {
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
};

/// The error of readWorldSecret(), or "ok: SECRET".
std::string readSecretOutcome() {
  auto secret = readWorldSecret();
  if (!secret)
    return llvm::toString(secret.takeError());
  return "ok: " + *secret;
}

TEST(TcpWorldTest, TheWorldSecretComesFromTheEnvironment) {
  {
    SecretEnvironment environment(nullptr, nullptr);
    EXPECT_TRUE(contains(readSecretOutcome(),
                         "no world secret: set GMOPT_WORLD_SECRET to a "
                         "secret, or GMOPT_WORLD_SECRET_FILE"))
        << readSecretOutcome();
  }
  {
    SecretEnvironment environment(" 0123456789abcdef\n", nullptr);
    EXPECT_EQ(readSecretOutcome(), "ok: 0123456789abcdef");
  }
  {
    SecretEnvironment environment("short", nullptr);
    EXPECT_TRUE(contains(readSecretOutcome(),
                         "GMOPT_WORLD_SECRET holds a secret of 5 characters: "
                         "use at least 16"))
        << readSecretOutcome();
  }
  {
    SecretEnvironment environment("0123456789abcdef", "/nonexistent");
    EXPECT_TRUE(contains(readSecretOutcome(), "both GMOPT_WORLD_SECRET and "
                                              "GMOPT_WORLD_SECRET_FILE are "
                                              "set"))
        << readSecretOutcome();
  }
}

TEST(TcpWorldTest, TheWorldSecretFileMustBePrivate) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("world-secret", "txt", path));
  auto removeFile = [&] { llvm::sys::fs::remove(path); };
  FILE *file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs("fedcba9876543210fedcba9876543210\n", file);
  std::fclose(file);
  SecretEnvironment environment(nullptr, path.c_str());
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  EXPECT_EQ(readSecretOutcome(), "ok: fedcba9876543210fedcba9876543210");
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  EXPECT_TRUE(contains(readSecretOutcome(),
                       "can be read or written by its group or others (mode "
                       "0644): a world secret must be private to you (chmod "
                       "600"))
      << readSecretOutcome();
  ASSERT_EQ(::chmod(path.c_str(), 0620), 0);
  EXPECT_TRUE(contains(readSecretOutcome(), "(mode 0620)"))
      << readSecretOutcome();
  removeFile();
  EXPECT_TRUE(contains(readSecretOutcome(), "cannot open it"))
      << readSecretOutcome();
}

TEST(TcpWorldTest, MadeSecretsAreFreshHex) {
  auto first = makeWorldSecret(), second = makeWorldSecret();
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  EXPECT_EQ(first->size(), 64u);
  EXPECT_EQ(first->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*first, *second);
}

// 1e10 s overflowed the deadline (now + 1e19 ns), which then lay in the
// past: the rendezvous failed at once. Such timeouts, and infinity, wait
// as long as the clock can count.
TEST(TcpWorldTest, TimeoutsBeyondTheClockDoNotFailAtOnce) {
  for (double timeout : {1e10, std::numeric_limits<double>::infinity()}) {
    std::vector<std::string> failures(2), errors;
    runRanks(
        2, timeout,
        [&](int rank, TcpWorld &world) {
          float value = float(rank + 1);
          llvm::Error err = world.allReduceSumF32(&value, 1, "test");
          failures[size_t(rank)] = err ? llvm::toString(std::move(err)) : "";
        },
        errors);
    EXPECT_EQ(errors, (std::vector<std::string>{"", ""})) << timeout;
    EXPECT_EQ(failures, (std::vector<std::string>{"", ""})) << timeout;
  }
}

TEST(TcpWorldTest, TimeoutsThatAreNotPositiveAreRefused) {
  for (double timeout : {0.0, -1.0, std::nan("")}) {
    auto world = TcpWorld::connect(rankConfig(1, 2, freePort(), timeout));
    ASSERT_FALSE(bool(world)) << timeout;
    EXPECT_TRUE(contains(llvm::toString(world.takeError()),
                         "must be positive numbers of seconds"))
        << timeout;
  }
}

} // namespace
