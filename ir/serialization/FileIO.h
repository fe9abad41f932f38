//===- FileIO.h - Bounded reads and all-or-nothing writes -------*- C++ -*-===//
//
// Every file gmopt reads or writes goes through this file. Reads accept
// only regular files (or stdin, where a caller allows `-`), so a device,
// FIFO or socket named by mistake or malice is refused instead of read
// without bound, and a read never takes more bytes than the file holds
// (stdin: at most kMaxStreamBytes). Writes are transactions: an
// OutputFileSet stages every output of a run in a temporary file next to
// its target and renames them all into place only when all were written,
// so a failure leaves no output and every pre-existing target untouched;
// the temporary files are removed on SIGINT/SIGTERM too. Symbolic links are
// resolved and their target is replaced (the link survives); an existing
// file keeps its mode and, where allowed, its owner; character and block
// devices and FIFOs are written through, never replaced; sockets and
// directories are refused. Outputs are also checked against each other and
// against the run's inputs before anything is written, so no output can
// overwrite an input or another output.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_SERIALIZATION_FILEIO_H
#define GMOPT_IR_SERIALIZATION_FILEIO_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// The most bytes read from stdin, which has no size to bound it: 2 GiB - 1,
/// the most protobuf can parse (every gmopt format fits in it).
constexpr uint64_t kMaxStreamBytes = INT_MAX;

/// How readFileBounded treats its path.
struct ReadFileOptions {
  /// `-` reads stdin (at most kMaxStreamBytes) instead of a file named `-`.
  bool allowStdin = false;
  /// The buffer ends in a NUL byte (past its size), for parsers that
  /// look one character ahead.
  bool requiresNullTerminator = false;
};

/// The name \p path has in messages: `<stdin>` for `-`, else the path.
std::string inputDisplayName(llvm::StringRef path);

/// Checks that \p path (symbolic links followed) is an existing regular
/// file. Errors start with the path: `PATH: No such file or directory`,
/// `PATH: is a character device, not a regular file`, ...
llvm::Error checkRegularFile(llvm::StringRef path);

/// Reads the regular file at \p path whole (mapped when large), never more
/// than the size it has when opened. Anything but a regular file is refused
/// before it is opened (see checkRegularFile), so a FIFO never blocks and
/// /dev/zero never grows memory. Errors start with the path.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readFileBounded(llvm::StringRef path, const ReadFileOptions &options = {});

/// The outputs of one run, written all together or not at all.
///
/// Use: addInput() for every file the run reads, reserve() for every output
/// as early as possible (this checks the paths and creates the temporary
/// files, so a bad output path fails before any work), write() the content
/// of each, then commit(). Destroying the set without a successful commit
/// removes every temporary file and leaves every target as it was.
///
/// An output path may be `-` (stdout, written at commit), a new file, an
/// existing regular file (replaced atomically, keeping its mode and, where
/// allowed, its owner), a symbolic link (its final target is replaced; the
/// link stays), or a character or block device or FIFO (written through at
/// commit, before any rename, since such writes cannot be undone; a FIFO's
/// open waits for a reader). Directories and sockets are refused. Two
/// outputs on one file, or an output on an input, are refused by reserve();
/// device nodes such as /dev/null may be named any number of times.
class OutputFileSet {
public:
  OutputFileSet();
  ~OutputFileSet();
  OutputFileSet(const OutputFileSet &) = delete;
  OutputFileSet &operator=(const OutputFileSet &) = delete;

  /// Records \p path as an input of the run that no output may overwrite;
  /// \p role names it in messages (e.g. "the input model"). `-` and paths
  /// that do not exist are ignored (nothing there to protect).
  void addInput(llvm::StringRef path, llvm::StringRef role);

  /// Reserves \p path as an output named \p role in messages (e.g. "-o"):
  /// resolves symbolic links, checks the target against the inputs and the
  /// other outputs, and creates its temporary file. Errors start with the
  /// path.
  llvm::Error reserve(llvm::StringRef path, llvm::StringRef role);

  /// Sets the content of the output \p path (reserved first, as "the
  /// output", if it was not) to what \p fill writes. Regular targets are
  /// written into their temporary file now; stdout and write-through
  /// targets are buffered until commit. An output is written once.
  llvm::Error write(llvm::StringRef path,
                    llvm::function_ref<void(llvm::raw_ostream &)> fill);
  /// write() with the bytes \p content.
  llvm::Error write(llvm::StringRef path, llvm::StringRef content);

  /// Writes the write-through and stdout outputs, then renames every
  /// temporary file over its target. On a failure the remaining temporary
  /// files are removed; only a rename failing after others succeeded (which
  /// needs the file system to fail between two renames in directories
  /// already written to) can leave part of the set committed.
  llvm::Error commit();

  /// Removes every temporary file; the targets stay as they were.
  void discard();

  /// One output; defined in FileIO.cpp.
  struct Output;
  /// One input's identity; defined in FileIO.cpp.
  struct Input;

private:
  /// The first output reserved as \p path that is not written yet (a
  /// device may be reserved several times), else a written one, else null.
  Output *find(llvm::StringRef path);

  std::vector<std::unique_ptr<Input>> inputs;
  std::vector<std::unique_ptr<Output>> outputs;
};

/// Writes \p content to \p path (`-` is stdout) as a one-output
/// OutputFileSet: atomically, through symbolic links, keeping the mode,
/// writing through to devices and FIFOs. Errors start with the path.
llvm::Error writeFileSafely(llvm::StringRef path, llvm::StringRef content);

/// Routes libprotobuf's log messages (parse warnings, invalid UTF-8
/// reports) to nowhere, once per process: gmopt reports every problem
/// itself as one error line, and a library log line before it would be
/// noise. Every reader and writer of protobuf bytes calls it.
void silenceProtobufLogging();

} // namespace gmopt

#endif // GMOPT_IR_SERIALIZATION_FILEIO_H
