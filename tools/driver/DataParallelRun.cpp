//===- DataParallelRun.cpp - gmopt-run's side of a data-parallel run ------===//
//
// Forms the world (see DataParallelRun.h) and checks a launch: the world
// size against the ranks the model's collectives were placed for, then one
// all-gather of each rank's (model hash, compiled ranks) so a rank that
// loaded another file is named before any step runs, and all-gathers of
// hashed settings (the options that change the training step, the inputs,
// the initial parameters) so that ranks which would train different models
// stop before the first step instead of diverging silently. The world
// secret a launch of several ranks needs is written here too
// (--make-world-secret).
//
//===----------------------------------------------------------------------===//

#include "tools/driver/DataParallelRun.h"
#include "tools/runtime/Runtime.h"
#include "tools/runtime/TestDataSet.h"

#include "backend/cpu/Mpi.h"
#include "backend/cpu/TcpWorld.h"
#include "ir/Collectives.h"
#include "ir/Module.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace gmopt;

namespace {

llvm::Error launchError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The world size \p module's collectives (all-reduce, reduce-scatter,
/// all-gather) were placed for (1: none).
int64_t compiledRanks(const Module &module, std::string &node) {
  for (const Node &each : module.getGraph().getNodes())
    if (isCommunicatingCollective(each)) {
      node = each.getName().str();
      return each.getIntAttr("ranks", 1);
    }
  return 1;
}

} // namespace

llvm::Error gmopt::startDataParallelWorld(double timeoutSeconds) {
  // Larger values overflowed the deadline's clock (1e10 s failed at once).
  if (!(timeoutSeconds > 0) ||
      !(timeoutSeconds <= kMaxCollectiveTimeoutSeconds))
    return launchError(llvm::formatv(
        "--collective-timeout={0} is not a number of seconds in (0, {1}] "
        "(at most 7 days)",
        llvm::format("%g", timeoutSeconds),
        llvm::format("%g", kMaxCollectiveTimeoutSeconds)));
  cpu::setCollectiveTimeout(timeoutSeconds);
  if (cpu::isLaunchedByMpi()) {
    // An MPI-less build under mpirun runs as one process; the world-size
    // check then says how to rebuild.
    if (!cpu::isMpiBuilt())
      return llvm::Error::success();
    return cpu::initializeMpi();
  }
  if (cpu::isLaunchedByEnvironment())
    return cpu::initializeEnvironmentWorld();
  return llvm::Error::success();
}

llvm::Error gmopt::writeWorldSecret(llvm::StringRef path,
                                    llvm::raw_ostream &out) {
  auto secret = cpu::makeWorldSecret();
  if (!secret)
    return secret.takeError();
  if (path == "-") {
    out << *secret << '\n';
    out.flush();
    return llvm::Error::success();
  }
  if (path.empty())
    return launchError("--make-world-secret needs a file name (or - to print "
                       "the secret)");
  std::string name = path.str();
  // O_EXCL: never over a file (nor through a link) someone else prepared.
  int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                  S_IRUSR | S_IWUSR);
  if (fd < 0)
    return launchError(
        errno == EEXIST
            ? "--make-world-secret: '" + name +
                  "' exists; a world secret is never written over a file "
                  "(remove it, or name a new one)"
            : "--make-world-secret: cannot create '" + name +
                  "': " + std::strerror(errno));
  std::string text = *secret + "\n";
  bool written = ::fchmod(fd, S_IRUSR | S_IWUSR) == 0;
  for (size_t done = 0; written && done != text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    written = n > 0;
    done += written ? size_t(n) : 0;
  }
  int problem = written ? 0 : errno;
  if (::close(fd) != 0 && written) {
    written = false;
    problem = errno;
  }
  if (!written) {
    ::unlink(name.c_str());
    return launchError("--make-world-secret: cannot write '" + name +
                       "': " + std::strerror(problem));
  }
  return llvm::Error::success();
}

bool gmopt::isDataParallelRun() { return cpu::getMpiWorldSize() > 1; }

std::string gmopt::describeDataParallelWorld() {
  if (!isDataParallelRun())
    return std::string();
  return llvm::formatv("data-parallel: {0} ranks over {1} (collective "
                       "timeout {2} s); losses are the mean over the ranks, "
                       "other ranks print only errors (--verbose: all)",
                       cpu::getMpiWorldSize(), cpu::getWorldTransportName(),
                       llvm::format("%g", cpu::getCollectiveTimeout()));
}

llvm::Error gmopt::checkDataParallelLaunch(llvm::StringRef modelPath,
                                           const Module &module) {
  int world = cpu::getMpiWorldSize();
  std::string node;
  int64_t ranks = compiledRanks(module, node);
  if (world <= 1)
    return llvm::Error::success();
  if (ranks == 1)
    return launchError(llvm::formatv(
        "this run has {0} data-parallel ranks but the model has no "
        "collective (it was compiled for one process): compile it with "
        "`gmopt-compile --ranks {0}`",
        world));
  // checkWorldSize (RunSession.cpp) refused other mismatches already.
  auto buffer = llvm::MemoryBuffer::getFile(modelPath, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return launchError("cannot read it again to hash it: " +
                       buffer.getError().message());
  uint64_t hash = llvm::xxh3_64bits((*buffer)->getBuffer());
  auto all = cpu::allGatherU64({hash, uint64_t(ranks)},
                               "the start-up check of the model files");
  if (!all)
    return all.takeError();
  for (int r = 1; r < world; ++r) {
    uint64_t theirs = (*all)[2 * size_t(r)];
    if ((*all)[2 * size_t(r) + 1] != (*all)[1])
      return launchError(llvm::formatv(
          "rank {0}'s model was compiled for {1} ranks, rank 0's for {2}", r,
          (*all)[2 * size_t(r) + 1], (*all)[1]));
    if (theirs != (*all)[0])
      return launchError(llvm::formatv(
          "rank {0} runs a model file different from rank 0's (hash "
          "{1:x16} vs {2:x16}): every rank must run the same .gm",
          r, theirs, (*all)[0]));
  }
  return llvm::Error::success();
}

uint64_t gmopt::hashBytes(llvm::ArrayRef<uint8_t> bytes) {
  return llvm::xxh3_64bits(bytes);
}

namespace {

/// Folds \p value into the running hash \p seed (order matters).
uint64_t combine(uint64_t seed, uint64_t value) {
  uint64_t parts[2] = {seed, value};
  return llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(parts), sizeof(parts)));
}

/// Folds the tensor \p name of contents \p data into \p seed.
uint64_t hashTensor(uint64_t seed, llvm::StringRef name,
                    const TensorData &data) {
  seed = combine(seed, llvm::xxh3_64bits(name));
  seed = combine(seed, llvm::xxh3_64bits(data.getType().str()));
  return combine(seed, llvm::xxh3_64bits(data.getBytes()));
}

} // namespace

uint64_t gmopt::hashTestDataSets(llvm::ArrayRef<TestDataSet> sets) {
  uint64_t hash = sets.size();
  for (const TestDataSet &set : sets)
    for (const auto *tensors : {&set.inputs, &set.outputs}) {
      hash = combine(hash, tensors->size());
      for (const NamedTensor &tensor : *tensors)
        hash = hashTensor(hash, tensor.name, tensor.data);
    }
  return hash;
}

uint64_t gmopt::hashInitialValues(llvm::ArrayRef<const Value *> values,
                                  llvm::ArrayRef<BoundInput> bindings) {
  uint64_t hash = values.size();
  for (const Value *value : values) {
    const BoundInput *bound = llvm::find_if(
        bindings, [&](const BoundInput &b) { return b.input == value; });
    const TensorData *data = bound != bindings.end() ? &bound->data
                             : value->hasData()      ? &value->getData()
                                                     : nullptr;
    if (!data) {
      hash = combine(hash, llvm::xxh3_64bits(value->getName()));
      continue;
    }
    hash = hashTensor(hash, value->getName(), *data);
  }
  return hash;
}

llvm::Error gmopt::checkSameOnEveryRank(llvm::ArrayRef<LaunchSetting> settings,
                                        llvm::StringRef what) {
  int world = cpu::getMpiWorldSize();
  if (world <= 1 || settings.empty())
    return llvm::Error::success();
  std::vector<uint64_t> mine;
  for (const LaunchSetting &setting : settings)
    mine.push_back(setting.hash);
  auto all = cpu::allGatherU64(mine, what);
  if (!all)
    return all.takeError();
  size_t count = settings.size();
  for (size_t i = 0; i != count; ++i) {
    llvm::SmallVector<int, 4> differing;
    for (int r = 1; r < world; ++r)
      if ((*all)[size_t(r) * count + i] != (*all)[i])
        differing.push_back(r);
    if (differing.empty())
      continue;
    const LaunchSetting &setting = settings[i];
    std::string others;
    if (differing.size() > 1)
      others = llvm::formatv(" (and {0} other rank{1})", differing.size() - 1,
                             differing.size() > 2 ? "s" : "");
    std::string here;
    if (!setting.value.empty())
      here = llvm::formatv(" (here, on rank {0}: {1})", cpu::getMpiRank(),
                           setting.value);
    return launchError(llvm::formatv(
        "rank {0}'s {1} differs from rank 0's{2}{3}; every rank must train "
        "the same model with the same settings",
        differing.front(), setting.name, others, here));
  }
  return llvm::Error::success();
}

llvm::Expected<std::string> gmopt::resolveRankOutputPath(llvm::StringRef path,
                                                         llvm::StringRef what) {
  if (!isDataParallelRun() || path.empty())
    return path.str();
  std::string resolved = path.str();
  for (size_t at; (at = resolved.find("{rank}")) != std::string::npos;)
    resolved.replace(at, 6, std::to_string(cpu::getMpiRank()));
  llvm::SmallString<256> absolute(resolved);
  if (std::error_code ec = llvm::sys::fs::make_absolute(absolute))
    return llvm::createStringError(ec, resolved + ": " + ec.message());
  llvm::sys::path::remove_dots(absolute, /*remove_dot_dot=*/true);
  auto all =
      cpu::allGatherU64({llvm::xxh3_64bits(absolute.str())},
                        "the comparison of the " + what.str() + " paths");
  if (!all)
    return all.takeError();
  bool shared =
      llvm::all_of(*all, [&](uint64_t h) { return h == all->front(); });
  if (shared && cpu::getMpiRank() != 0)
    return std::string();
  return resolved;
}

void gmopt::stopDataParallelWorld(llvm::StringRef message, int exitCode) {
  cpu::abortWorld(message, exitCode);
}
