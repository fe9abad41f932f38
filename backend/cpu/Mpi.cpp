//===- Mpi.cpp - The MPI world of a data-parallel CPU run -----------------===//
//
// The world behind Mpi.h: MPI initialisation (compiled with GMOPT_HAVE_MPI
// where CMake found MPI; otherwise each MPI entry point reports that gmopt
// was built without it), the environment's TCP world, and the collectives
// dispatched to whichever is up (ZeRO's reduce-scatter and all-gather
// included). The MPI collectives are non-blocking (MPI_Iallreduce,
// MPI_Ireduce_scatter_block, MPI_Iallgather) polled with MPI_Test until the
// collective timeout; beside each one every rank sends every other an
// arrival notice (its collective number) on a duplicate of MPI_COMM_WORLD,
// and the notices that did not come name the missing ranks. Counts above
// INT_MAX elements go in several calls (MPI counts are ints).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Mpi.h"
#include "backend/cpu/TcpWorld.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#ifdef GMOPT_HAVE_MPI
// The C API only: Open MPI's mpi.h would otherwise pull in its deprecated
// C++ bindings, which need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

using namespace gmopt;

namespace {

llvm::Error mpiError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "MPI: " + message);
}

llvm::Error worldError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "data-parallel world: " + message);
}

/// A GMOPT_TEST_FAULT request.
struct InjectedFault {
  bool die = false;
  int rank = 0;
  unsigned step = 0;
};

enum class Transport { None, Mpi, Tcp };

Transport transport = Transport::None;
int rank = 0;
int worldSize = 1;
double timeoutSeconds = cpu::kDefaultCollectiveTimeoutSeconds;
unsigned currentStep = 1;
/// Collectives this rank entered (names them in errors).
uint64_t collectiveCount = 0;
std::unique_ptr<cpu::TcpWorld> tcpWorld;
std::optional<InjectedFault> fault;
/// Set once a collective failed: the world is unusable.
std::string brokenReason;

constexpr const char *kBuiltWithoutMpi =
    "gmopt was built without MPI (install libopenmpi-dev and reconfigure)";

/// Reads GMOPT_TEST_FAULT; malformed text is an error, not ignored.
llvm::Error readInjectedFault() {
  const char *text = std::getenv("GMOPT_TEST_FAULT");
  if (!text || !*text)
    return llvm::Error::success();
  llvm::SmallVector<llvm::StringRef, 3> parts;
  llvm::StringRef(text).split(parts, ':');
  InjectedFault parsed;
  if (parts.size() != 3 || (parts[0] != "hang" && parts[0] != "die") ||
      parts[1].getAsInteger(10, parsed.rank) ||
      parts[2].getAsInteger(10, parsed.step) || parsed.step == 0)
    return worldError(llvm::Twine("GMOPT_TEST_FAULT='") + text +
                      "' is not hang:RANK:STEP or die:RANK:STEP");
  parsed.die = parts[0] == "die";
  fault = parsed;
  return llvm::Error::success();
}

/// Carries out GMOPT_TEST_FAULT when this rank and step are its target.
void injectFault() {
  if (!fault || fault->rank != rank || fault->step != currentStep)
    return;
  if (fault->die)
    std::raise(SIGKILL);
  std::this_thread::sleep_for(std::chrono::hours(1));
}

/// "the all-reduce of step 2 (collective #3)": the collective about to run.
std::string describeCollective(llvm::StringRef kind) {
  return llvm::formatv("the {0} of step {1} (collective #{2})", kind,
                       currentStep, collectiveCount);
}

#ifdef GMOPT_HAVE_MPI
MPI_Comm noticeComm = MPI_COMM_NULL;
/// The arrival notices' buffers: they must outlive a collective that timed
/// out (its requests stay posted until MPI_Abort).
std::vector<long long> noticesIn;
long long noticeOut = 0;

void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A broken world is aborted, never finalized: MPI_Finalize would wait for
  // the collectives the missing rank never joins.
  if (!finalized && brokenReason.empty())
    MPI_Finalize();
}

llvm::Error checkMpi(int code, llvm::StringRef call) {
  if (code == MPI_SUCCESS)
    return llvm::Error::success();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return mpiError(call + " failed: " + llvm::StringRef(text, length));
}

/// "rank 1", "ranks 1, 3".
std::string rankList(llvm::ArrayRef<int> ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i != ranks.size(); ++i)
    text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

/// Waits for \p collective (already started) and the arrival notices of
/// every rank until the timeout; fails naming the ranks whose notices did
/// not come.
/// \p number is the collective's number on this rank (the latest one unless
/// it was started earlier, as a split all-reduce's is).
llvm::Error waitWithNotices(MPI_Request &collective, llvm::StringRef what,
                            uint64_t number = collectiveCount) {
  noticeOut = static_cast<long long>(number);
  noticesIn.assign(size_t(worldSize), -1);
  std::vector<MPI_Request> notices;
  std::vector<int> noticeRank;
  for (int peer = 0; peer != worldSize; ++peer) {
    if (peer == rank)
      continue;
    MPI_Request request;
    if (auto err =
            checkMpi(MPI_Irecv(&noticesIn[size_t(peer)], 1, MPI_LONG_LONG, peer,
                               0, noticeComm, &request),
                     "MPI_Irecv"))
      return err;
    notices.push_back(request);
    noticeRank.push_back(peer);
  }
  std::vector<MPI_Request> sends;
  for (int peer = 0; peer != worldSize; ++peer) {
    if (peer == rank)
      continue;
    MPI_Request request;
    if (auto err = checkMpi(MPI_Isend(&noticeOut, 1, MPI_LONG_LONG, peer, 0,
                                      noticeComm, &request),
                            "MPI_Isend"))
      return err;
    sends.push_back(request);
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::microseconds(int64_t(timeoutSeconds * 1e6));
  int collectiveDone = 0, noticesDone = 0, sendsDone = 0;
  auto pause = std::chrono::microseconds(20);
  while (true) {
    if (!collectiveDone)
      if (auto err = checkMpi(
              MPI_Test(&collective, &collectiveDone, MPI_STATUS_IGNORE),
              "MPI_Test"))
        return err;
    if (!noticesDone)
      if (auto err = checkMpi(MPI_Testall(int(notices.size()), notices.data(),
                                          &noticesDone, MPI_STATUSES_IGNORE),
                              "MPI_Testall"))
        return err;
    if (!sendsDone)
      if (auto err = checkMpi(MPI_Testall(int(sends.size()), sends.data(),
                                          &sendsDone, MPI_STATUSES_IGNORE),
                              "MPI_Testall"))
        return err;
    if (collectiveDone && noticesDone && sendsDone)
      break;
    if (std::chrono::steady_clock::now() >= deadline) {
      llvm::SmallVector<int, 4> absent;
      for (size_t i = 0; i != notices.size(); ++i)
        if (noticesIn[size_t(noticeRank[i])] != static_cast<long long>(number))
          absent.push_back(noticeRank[i]);
      std::string message =
          absent.empty()
              ? llvm::formatv("every rank reached {0} but it did not finish "
                              "within {1} s",
                              what, llvm::format("%g", timeoutSeconds))
                    .str()
              : llvm::formatv("{0} did not reach {1} within {2} s (hung, died "
                              "or far slower than rank {3})",
                              rankList(absent), what,
                              llvm::format("%g", timeoutSeconds), rank)
                    .str();
      brokenReason = message;
      return worldError(message);
    }
    // Short waits first (a collective usually completes within
    // microseconds of the last arrival), then at most a millisecond.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  for (size_t i = 0; i != notices.size(); ++i)
    if (noticesIn[size_t(noticeRank[i])] != static_cast<long long>(number))
      return worldError(llvm::formatv(
          "rank {0} ran collective #{1} where rank {2} ran {3}: the ranks run "
          "different models or steps",
          noticeRank[i], noticesIn[size_t(noticeRank[i])], rank, what));
  return llvm::Error::success();
}
#endif

/// Fails unless a world of several ranks is up and unbroken.
llvm::Error checkUsable() {
  if (transport == Transport::None)
    return mpiError(cpu::isMpiBuilt()
                        ? "not initialised (launch with mpirun, or set RANK, "
                          "WORLD_SIZE, MASTER_ADDR and MASTER_PORT)"
                        : llvm::Twine(kBuiltWithoutMpi) +
                              "; without it set RANK, WORLD_SIZE, "
                              "MASTER_ADDR and MASTER_PORT");
  if (!brokenReason.empty())
    return worldError("the world failed earlier: " + brokenReason);
  return llvm::Error::success();
}

} // namespace

bool cpu::isMpiBuilt() {
#ifdef GMOPT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool cpu::isLaunchedByMpi() {
  for (const char *variable :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(variable))
      return true;
  return false;
}

bool cpu::isLaunchedByEnvironment() {
  return !isLaunchedByMpi() && std::getenv("WORLD_SIZE");
}

llvm::Error cpu::initializeMpi() {
  if (transport != Transport::None)
    return llvm::Error::success();
  if (llvm::Error err = readInjectedFault())
    return err;
#ifdef GMOPT_HAVE_MPI
  int provided = 0;
  if (auto err = checkMpi(
          MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided),
          "MPI_Init_thread"))
    return err;
  std::atexit(finalizeAtExit);
  // Errors come back as codes (turned into llvm::Error) instead of aborting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (auto err =
          checkMpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"))
    return err;
  if (auto err =
          checkMpi(MPI_Comm_size(MPI_COMM_WORLD, &worldSize), "MPI_Comm_size"))
    return err;
  if (auto err =
          checkMpi(MPI_Comm_dup(MPI_COMM_WORLD, &noticeComm), "MPI_Comm_dup"))
    return err;
  MPI_Comm_set_errhandler(noticeComm, MPI_ERRORS_RETURN);
  transport = Transport::Mpi;
  return llvm::Error::success();
#else
  return mpiError(kBuiltWithoutMpi);
#endif
}

llvm::Error cpu::initializeEnvironmentWorld() {
  if (transport != Transport::None)
    return llvm::Error::success();
  if (llvm::Error err = readInjectedFault())
    return err;
  auto readNumber = [](const char *name, const char *fallback,
                       long long &value) -> llvm::Error {
    const char *text = std::getenv(name);
    if (!text)
      text = fallback;
    if (!text)
      return worldError(llvm::Twine(name) +
                        " is not set (a torchrun-style launch sets RANK, "
                        "WORLD_SIZE, MASTER_ADDR and MASTER_PORT)");
    if (llvm::StringRef(text).trim().getAsInteger(10, value) || value < 0)
      return worldError(llvm::Twine(name) + "='" + text +
                        "' is not a non-negative integer");
    return llvm::Error::success();
  };
  long long worldValue = 0, rankValue = 0, portValue = 0, localRank = 0;
  if (llvm::Error err = readNumber("WORLD_SIZE", nullptr, worldValue))
    return err;
  if (llvm::Error err = readNumber("RANK", nullptr, rankValue))
    return err;
  if (llvm::Error err = readNumber("MASTER_PORT", "29500", portValue))
    return err;
  if (llvm::Error err = readNumber("LOCAL_RANK", "0", localRank))
    return err;
  if (worldValue < 1 || worldValue > 65536)
    return worldError(
        llvm::formatv("WORLD_SIZE={0} is not in 1..65536", worldValue));
  if (rankValue >= worldValue)
    return worldError(llvm::formatv("RANK={0} is not below WORLD_SIZE={1}",
                                    rankValue, worldValue));
  if (portValue < 1 || portValue > 65535)
    return worldError(
        llvm::formatv("MASTER_PORT={0} is not a TCP port", portValue));
  TcpWorldConfig config;
  config.rank = int(rankValue);
  config.worldSize = int(worldValue);
  if (const char *address = std::getenv("MASTER_ADDR"))
    config.masterAddress = address;
  config.masterPort = unsigned(portValue);
  config.timeoutSeconds = timeoutSeconds;
  if (config.worldSize > 1) {
    auto secret = readWorldSecret();
    if (!secret)
      return secret.takeError();
    config.secret = std::move(*secret);
  }
  auto world = TcpWorld::connect(config);
  if (!world)
    return world.takeError();
  tcpWorld = std::move(*world);
  rank = config.rank;
  worldSize = config.worldSize;
  transport = Transport::Tcp;
  return llvm::Error::success();
}

bool cpu::isMpiInitialized() { return transport != Transport::None; }

const char *cpu::getWorldTransportName() {
  switch (transport) {
  case Transport::Mpi:
    return "MPI";
  case Transport::Tcp:
    return "TCP";
  case Transport::None:
    break;
  }
  return "none";
}

int cpu::getMpiRank() { return rank; }
int cpu::getMpiWorldSize() { return worldSize; }

void cpu::setCollectiveTimeout(double seconds) {
  timeoutSeconds = seconds;
  if (tcpWorld)
    tcpWorld->setTimeout(seconds);
}

double cpu::getCollectiveTimeout() { return timeoutSeconds; }

void cpu::setCollectiveStep(unsigned step) { currentStep = step; }

llvm::Error cpu::allReduceSumF32(float *data, size_t count) {
  if (llvm::Error err = checkUsable())
    return err;
  injectFault();
  ++collectiveCount;
  std::string what = describeCollective("all-reduce");
  if (transport == Transport::Tcp) {
    llvm::Error err = tcpWorld->allReduceSumF32(data, count, what);
    if (err)
      brokenReason = "a collective failed";
    return err;
  }
#ifdef GMOPT_HAVE_MPI
  // One notice per call: the chunks of one collective share it.
  while (count != 0) {
    int chunk = count > size_t(INT_MAX) ? INT_MAX : static_cast<int>(count);
    MPI_Request request;
    if (auto err = checkMpi(MPI_Iallreduce(MPI_IN_PLACE, data, chunk, MPI_FLOAT,
                                           MPI_SUM, MPI_COMM_WORLD, &request),
                            "MPI_Iallreduce"))
      return err;
    if (llvm::Error err = waitWithNotices(request, what))
      return err;
    data += chunk;
    count -= size_t(chunk);
  }
  return llvm::Error::success();
#else
  (void)data;
  return mpiError(kBuiltWithoutMpi);
#endif
}

namespace {
/// A split all-reduce between its start and its finish.
struct PendingAllReduce {
  float *data = nullptr;
  uint64_t number = 0;
  std::string what;
#ifdef GMOPT_HAVE_MPI
  /// One request per INT_MAX-element chunk.
  std::vector<MPI_Request> requests;
#endif
};
/// Started all-reduces, oldest first (every rank finishes them in the
/// order of its plan).
std::vector<PendingAllReduce> pendingAllReduces;
} // namespace

llvm::Error cpu::startAllReduceSumF32(float *data, size_t count) {
  if (llvm::Error err = checkUsable())
    return err;
  for (const PendingAllReduce &pending : pendingAllReduces)
    if (pending.data == data)
      return worldError("an all-reduce of this buffer is already in flight");
  injectFault();
  ++collectiveCount;
  PendingAllReduce pending;
  pending.data = data;
  pending.number = collectiveCount;
  pending.what = describeCollective("all-reduce");
  if (transport == Transport::Tcp) {
    // The TCP world has no non-blocking collective: it completes here and
    // the finish only checks it was started.
    llvm::Error err = tcpWorld->allReduceSumF32(data, count, pending.what);
    if (err) {
      brokenReason = "a collective failed";
      return err;
    }
    pendingAllReduces.push_back(std::move(pending));
    return llvm::Error::success();
  }
#ifdef GMOPT_HAVE_MPI
  while (count != 0) {
    int chunk = count > size_t(INT_MAX) ? INT_MAX : static_cast<int>(count);
    MPI_Request request;
    if (auto err = checkMpi(MPI_Iallreduce(MPI_IN_PLACE, data, chunk, MPI_FLOAT,
                                           MPI_SUM, MPI_COMM_WORLD, &request),
                            "MPI_Iallreduce"))
      return err;
    pending.requests.push_back(request);
    data += chunk;
    count -= size_t(chunk);
  }
  pendingAllReduces.push_back(std::move(pending));
  return llvm::Error::success();
#else
  (void)count;
  return mpiError(kBuiltWithoutMpi);
#endif
}

llvm::Error cpu::finishAllReduceSumF32(float *data) {
  auto it = llvm::find_if(pendingAllReduces, [&](const PendingAllReduce &p) {
    return p.data == data;
  });
  if (it == pendingAllReduces.end())
    return worldError("no all-reduce of this buffer was started");
  PendingAllReduce pending = std::move(*it);
  pendingAllReduces.erase(it);
  if (llvm::Error err = checkUsable())
    return err;
#ifdef GMOPT_HAVE_MPI
  // The arrival notice is sent here: a rank that never reaches this finish
  // (dead or hung) is named by the others when the timeout expires.
  for (MPI_Request &request : pending.requests)
    if (llvm::Error err =
            waitWithNotices(request, pending.what, pending.number))
      return err;
#endif
  return llvm::Error::success();
}

void cpu::progressCollectives() {
#ifdef GMOPT_HAVE_MPI
  if (transport != Transport::Mpi)
    return;
  for (PendingAllReduce &pending : pendingAllReduces)
    for (MPI_Request &request : pending.requests) {
      if (request == MPI_REQUEST_NULL)
        continue;
      int done = 0;
      // Only to let Open MPI progress; errors surface in the finish.
      (void)MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    }
#endif
}

size_t cpu::getPendingCollectiveCount() { return pendingAllReduces.size(); }

llvm::Expected<std::vector<uint64_t>>
cpu::allGatherU64(llvm::ArrayRef<uint64_t> mine, llvm::StringRef what) {
  if (transport == Transport::None || worldSize == 1)
    return std::vector<uint64_t>(mine.begin(), mine.end());
  if (llvm::Error err = checkUsable())
    return err;
  ++collectiveCount;
  std::string described =
      llvm::formatv("{0} (collective #{1})", what, collectiveCount);
  if (transport == Transport::Tcp) {
    auto all = tcpWorld->allGatherU64(mine, described);
    if (!all)
      brokenReason = "a collective failed";
    return all;
  }
#ifdef GMOPT_HAVE_MPI
  std::vector<uint64_t> all(mine.size() * size_t(worldSize));
  MPI_Request request;
  if (auto err =
          checkMpi(MPI_Iallgather(mine.data(), int(mine.size()), MPI_UINT64_T,
                                  all.data(), int(mine.size()), MPI_UINT64_T,
                                  MPI_COMM_WORLD, &request),
                   "MPI_Iallgather"))
    return err;
  if (llvm::Error err = waitWithNotices(request, described)) {
    // The request may still write into `all`: keep it until the abort.
    static std::vector<uint64_t> abandoned;
    abandoned = std::move(all);
    return err;
  }
  return all;
#else
  return mpiError(kBuiltWithoutMpi);
#endif
}

llvm::Expected<double> cpu::averageOverRanks(double value,
                                             llvm::StringRef what) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  auto all = allGatherU64({bits}, what);
  if (!all)
    return all.takeError();
  double sum = 0;
  for (uint64_t each : *all) {
    double term;
    std::memcpy(&term, &each, sizeof term);
    sum += term;
  }
  return sum / double(all->size());
}

void cpu::abortWorld(llvm::StringRef message, int exitCode) {
  if (transport == Transport::None || worldSize == 1)
    return;
  if (brokenReason.empty())
    brokenReason = message.str();
  if (transport == Transport::Tcp) {
    tcpWorld->abort(message);
    return;
  }
#ifdef GMOPT_HAVE_MPI
  MPI_Abort(MPI_COMM_WORLD, exitCode);
#else
  (void)exitCode;
#endif
}

// ZeRO's collectives. Over MPI: MPI_Ireduce_scatter_block / MPI_Iallgather,
// waited for like the all-reduce (arrival notices, the collective timeout).
// Over the environment's TCP world, which has only an all-reduce: a
// reduce-scatter is an all-reduce of a copy of the bucket keeping this
// rank's block, an all-gather an all-reduce of a zeroed bucket holding this
// rank's block (x + 0 is x exactly) - twice the ring traffic of the
// dedicated collectives, the same values. Blocks above INT_MAX floats go in
// several calls over column blocks of the rank-major layout.

llvm::Error cpu::reduceScatterSumF32(const float *input, float *output,
                                     size_t shardCount) {
  if (llvm::Error err = checkUsable())
    return err;
  injectFault();
  size_t ranks = size_t(worldSize);
  if (transport == Transport::Tcp) {
    ++collectiveCount;
    std::string what = describeCollective("reduce-scatter");
    std::vector<float> bucket(input, input + ranks * shardCount);
    llvm::Error err =
        tcpWorld->allReduceSumF32(bucket.data(), bucket.size(), what);
    if (err) {
      brokenReason = "a collective failed";
      return err;
    }
    std::copy(bucket.begin() + size_t(rank) * shardCount,
              bucket.begin() + size_t(rank + 1) * shardCount, output);
    return llvm::Error::success();
  }
#ifdef GMOPT_HAVE_MPI
  for (size_t begin = 0; begin < shardCount || begin == 0;) {
    size_t chunk = std::min(shardCount - begin, size_t(INT_MAX) / ranks);
    // Column block [begin, begin + chunk) of every rank's block, packed
    // (the bucket itself when one call takes it whole).
    std::vector<float> packed;
    const float *send = input;
    if (chunk != shardCount) {
      packed.resize(chunk * ranks);
      for (size_t r = 0; r != ranks; ++r)
        std::copy(input + r * shardCount + begin,
                  input + r * shardCount + begin + chunk,
                  packed.begin() + r * chunk);
      send = packed.data();
    }
    ++collectiveCount;
    std::string what = describeCollective("reduce-scatter");
    MPI_Request request;
    if (auto err = checkMpi(MPI_Ireduce_scatter_block(
                                send, output + begin, int(chunk), MPI_FLOAT,
                                MPI_SUM, MPI_COMM_WORLD, &request),
                            "MPI_Ireduce_scatter_block"))
      return err;
    if (llvm::Error err = waitWithNotices(request, what)) {
      // The request may still read `packed`: keep it until the abort.
      static std::vector<float> abandoned;
      abandoned = std::move(packed);
      return err;
    }
    begin += chunk;
    if (chunk == 0)
      break;
  }
  return llvm::Error::success();
#else
  (void)input;
  (void)output;
  return mpiError(kBuiltWithoutMpi);
#endif
}

llvm::Error cpu::allGatherF32(const float *shard, float *output,
                              size_t shardCount) {
  if (llvm::Error err = checkUsable())
    return err;
  injectFault();
  size_t ranks = size_t(worldSize);
  if (transport == Transport::Tcp) {
    ++collectiveCount;
    std::string what = describeCollective("all-gather");
    std::fill(output, output + ranks * shardCount, 0.0f);
    std::copy(shard, shard + shardCount, output + size_t(rank) * shardCount);
    llvm::Error err =
        tcpWorld->allReduceSumF32(output, ranks * shardCount, what);
    if (err)
      brokenReason = "a collective failed";
    return err;
  }
#ifdef GMOPT_HAVE_MPI
  for (size_t begin = 0; begin < shardCount || begin == 0;) {
    size_t chunk = std::min(shardCount - begin, size_t(INT_MAX) / ranks);
    // Received packed by rank, then spread into the column block (straight
    // into the output when one call takes it whole).
    bool whole = chunk == shardCount;
    std::vector<float> packed(whole ? 0 : chunk * ranks);
    float *receive = whole ? output : packed.data();
    ++collectiveCount;
    std::string what = describeCollective("all-gather");
    MPI_Request request;
    if (auto err = checkMpi(MPI_Iallgather(shard + begin, int(chunk), MPI_FLOAT,
                                           receive, int(chunk), MPI_FLOAT,
                                           MPI_COMM_WORLD, &request),
                            "MPI_Iallgather"))
      return err;
    if (llvm::Error err = waitWithNotices(request, what)) {
      static std::vector<float> abandoned;
      abandoned = std::move(packed);
      return err;
    }
    if (!whole)
      for (size_t r = 0; r != ranks; ++r)
        std::copy(packed.begin() + r * chunk, packed.begin() + (r + 1) * chunk,
                  output + r * shardCount + begin);
    begin += chunk;
    if (chunk == 0)
      break;
  }
  return llvm::Error::success();
#else
  (void)shard;
  (void)output;
  return mpiError(kBuiltWithoutMpi);
#endif
}

llvm::Error cpu::broadcastBytes(void *data, size_t bytes, int root) {
  if (llvm::Error err = checkUsable())
    return err;
  if (root < 0 || root >= worldSize)
    return mpiError(llvm::formatv("broadcast from rank {0} in a world of {1}",
                                  root, worldSize));
  // A small payload (an NCCL unique id): one all-gather of every rank's
  // words, over either transport and under the collective timeout, and the
  // root's taken.
  size_t words = (bytes + 7) / 8;
  std::vector<uint64_t> mine(words, 0);
  std::memcpy(mine.data(), data, bytes);
  auto all = allGatherU64(mine, "the broadcast of rank " +
                                    std::to_string(root) + "'s bytes");
  if (!all)
    return all.takeError();
  std::memcpy(data, all->data() + size_t(root) * words, bytes);
  return llvm::Error::success();
}
