//===- DataParallelRun.h - gmopt-run in a data-parallel world --*- C++ -*-===//
//
// What gmopt-run adds around a model when several ranks train it: forming
// the world (mpirun's MPI world, or the TCP world of a torchrun-style
// launch), the start-up checks that refuse a bad launch before any step
// (every rank runs the same model file, compiled for this world size, with
// the same training settings, inputs and initial parameters), and the
// world's half of a failure (telling the other ranks to stop). It also
// bounds --collective-timeout and writes the world secret of a
// torchrun-style launch (--make-world-secret).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_DATAPARALLELRUN_H
#define GMOPT_TOOLS_DRIVER_DATAPARALLELRUN_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gmopt {

class Module;
class TestDataSet;
class Value;
struct BoundInput;

/// The longest --collective-timeout, in seconds (7 days): longer ones, and
/// ones that are not positive finite numbers, are refused.
constexpr double kMaxCollectiveTimeoutSeconds = 7 * 24 * 3600;

/// Forms the data-parallel world this process was launched into, if any:
/// MPI under mpirun, the TCP world when WORLD_SIZE is set without an MPI
/// launcher (with the world secret, cpu::readWorldSecret), nothing
/// otherwise. \p timeoutSeconds bounds the rendezvous and every collective
/// (--collective-timeout; refused unless in (0, kMaxCollectiveTimeoutSeconds]).
llvm::Error startDataParallelWorld(double timeoutSeconds);

/// --make-world-secret=PATH: writes a fresh world secret (64 random hex
/// digits and a newline) to a new file \p path, which only this user may
/// read (mode 0600), for GMOPT_WORLD_SECRET_FILE; never over an existing
/// file. \p path `-` prints the secret on \p out instead (for
/// GMOPT_WORLD_SECRET).
llvm::Error writeWorldSecret(llvm::StringRef path, llvm::raw_ostream &out);

/// True when this process is one of several ranks.
bool isDataParallelRun();

/// One line about the world for rank 0's log ("data-parallel: 2 ranks over
/// TCP ..."); empty outside a world of several ranks.
std::string describeDataParallelWorld();

/// Start-up checks of a launch of several ranks: fails unless \p module
/// was compiled for this world size (its gmopt.AllReduce nodes' ranks) and
/// every rank runs a model file with the same bytes as rank 0's (the xxh3
/// hash of \p modelPath, gathered over the world with the collective
/// timeout). A no-op for one process.
llvm::Error checkDataParallelLaunch(llvm::StringRef modelPath,
                                    const Module &module);

/// One thing that must be the same on every rank of a launch for the ranks
/// to train one model: an option that changes the training step, the
/// inputs, the initial parameters.
struct LaunchSetting {
  /// How messages name it: `--lr`, `the initial parameters (--weights,
  /// --seed)`.
  std::string name;
  /// This rank's value as text for the message (empty: not shown).
  std::string value;
  /// What is compared over the world: a hash of the value.
  uint64_t hash = 0;
};

/// The xxh3 hash of \p bytes, for LaunchSetting::hash.
uint64_t hashBytes(llvm::ArrayRef<uint8_t> bytes);

/// A hash of every tensor (name, type, shape, bytes) of \p sets in order:
/// the --inputs every rank must read alike before taking its share.
uint64_t hashTestDataSets(llvm::ArrayRef<TestDataSet> sets);

/// A hash of the initial values of \p values (graph inputs or
/// initializers of one module, in order; each value's name, type and
/// bytes): their \p bindings, or the data the value carries.
uint64_t hashInitialValues(llvm::ArrayRef<const Value *> values,
                           llvm::ArrayRef<BoundInput> bindings);

/// Start-up check of a launch of several ranks: gathers every rank's
/// \p settings (the same list, in the same order, on every rank; \p what
/// names the exchange in a timeout) and fails on every rank when one
/// differs from rank 0's, naming the first such setting and the first rank
/// that differs (`rank 1's --lr differs from rank 0's`). A no-op for one
/// process. Every rank must call it alike (a collective).
llvm::Error checkSameOnEveryRank(llvm::ArrayRef<LaunchSetting> settings,
                                 llvm::StringRef what);

/// The file this rank writes for an output \p path (\p what names it in
/// errors) in a data-parallel run: `{rank}` in it becomes the rank; a path
/// every rank names alike (the same absolute path, compared over the world
/// with the collective timeout) is rank 0's to write and empty on the
/// others; per-rank paths (by `{rank}`, $OMPI_COMM_WORLD_RANK or the
/// launcher) are each rank's own. \p path as it is for one process or
/// when empty. Every rank must call it alike (a collective).
llvm::Expected<std::string> resolveRankOutputPath(llvm::StringRef path,
                                                  llvm::StringRef what);

/// After this rank failed with \p message (already printed), makes the
/// other ranks stop (see cpu::abortWorld; under MPI it does not return).
void stopDataParallelWorld(llvm::StringRef message, int exitCode);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_DATAPARALLELRUN_H
