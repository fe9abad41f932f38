//===- FileIO.cpp - Bounded reads and all-or-nothing writes ---------------===//
//
// POSIX underneath (stat, open, rename, readlink), because the decisions
// here are about what kind of file a path names - a regular file, a
// device, a FIFO, a symbolic link - and about file identity (device and
// inode numbers), which LLVM's portable layer does not expose in full.
// Reads stat before they open, so a FIFO is never opened; writes resolve
// symbolic links by hand so that a dangling link still writes its target,
// and register every temporary file with LLVM's signal handlers so that an
// interrupted run leaves none behind.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/FileIO.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/stubs/logging.h>

#include <cassert>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

using namespace gmopt;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

namespace {

Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string errnoMessage(int error) {
  return std::make_error_code(static_cast<std::errc>(error)).message();
}

/// `a character device`, `a FIFO`, ... for a file that is not regular.
const char *describeFileType(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISLNK(mode))
    return "a symbolic link";
  return "a special file";
}

/// The error of a failed stat or open of an input.
Error readError(StringRef path, int error) {
  if (error == ENOENT)
    return makeError(path + ": " + errnoMessage(error));
  return makeError(path + ": cannot read: " + errnoMessage(error));
}

Error notRegular(StringRef path, mode_t mode) {
  return makeError(path + ": is " + describeFileType(mode) +
                   ", not a regular file");
}

/// Reads stdin to its end, refusing more than kMaxStreamBytes.
Expected<std::unique_ptr<llvm::MemoryBuffer>> readStdin() {
  std::string bytes;
  char chunk[1 << 16];
  for (;;) {
    ssize_t count = ::read(STDIN_FILENO, chunk, sizeof(chunk));
    if (count < 0) {
      if (errno == EINTR)
        continue;
      return makeError("<stdin>: cannot read: " + errnoMessage(errno));
    }
    if (count == 0)
      break;
    if (bytes.size() + static_cast<size_t>(count) > kMaxStreamBytes)
      return makeError("<stdin>: more than " + Twine(kMaxStreamBytes) +
                       " bytes, the most gmopt reads from a stream");
    bytes.append(chunk, static_cast<size_t>(count));
  }
  return llvm::MemoryBuffer::getMemBufferCopy(bytes, "<stdin>");
}

/// A file's identity for the same-file checks: device and inode when it
/// exists, and its path with every symbolic link resolved.
struct FileIdentity {
  bool exists = false;
  bool isDevice = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::string realPath;
};

/// True if \p a and \p b are one file. Device nodes never count: writing
/// /dev/null twice, or reading and writing it, harms nothing.
bool sameFile(const FileIdentity &a, const FileIdentity &b) {
  if (a.isDevice || b.isDevice)
    return false;
  if (a.exists && b.exists)
    return a.device == b.device && a.inode == b.inode;
  return !a.realPath.empty() && a.realPath == b.realPath;
}

/// The real path of \p path, or "" when it cannot be resolved.
std::string realPathOf(StringRef path) {
  llvm::SmallString<256> resolved;
  if (llvm::sys::fs::real_path(path, resolved))
    return "";
  return resolved.str().str();
}

/// The path that writing \p path creates when it does not exist yet:
/// every symbolic link of the final component followed (a dangling link
/// gives the path it points to).
Expected<std::string> resolveOutputLinks(StringRef path) {
  std::string current = path.str();
  // The kernel's own limit on links followed in one lookup.
  constexpr int kMaxLinks = 40;
  for (int links = 0; links <= kMaxLinks; ++links) {
    struct stat status;
    if (::lstat(current.c_str(), &status) != 0 || !S_ISLNK(status.st_mode))
      return current;
    char target[PATH_MAX];
    ssize_t length = ::readlink(current.c_str(), target, sizeof(target));
    if (length < 0)
      return makeError(
          path + ": cannot read the symbolic link: " + errnoMessage(errno));
    if (static_cast<size_t>(length) >= sizeof(target))
      return makeError(path + ": the symbolic link's target is too long");
    StringRef linkTarget(target, static_cast<size_t>(length));
    if (llvm::sys::path::is_absolute(linkTarget)) {
      current = linkTarget.str();
    } else {
      llvm::SmallString<256> joined(llvm::sys::path::parent_path(current));
      llvm::sys::path::append(joined, linkTarget);
      current = joined.str().str();
    }
  }
  return makeError(path + ": " + errnoMessage(ELOOP));
}

/// How an output reaches its target.
enum class OutputKind {
  /// Buffered, written to stdout at commit.
  Stdout,
  /// A temporary file renamed over the target (new or regular) at commit.
  Replace,
  /// A device or FIFO: buffered, opened and written at commit.
  WriteThrough,
};

} // namespace

struct OutputFileSet::Input {
  std::string path;
  std::string role;
  FileIdentity identity;
};

struct OutputFileSet::Output {
  /// The path as given, for messages.
  std::string path;
  /// What names the output, e.g. "-o".
  std::string role;
  OutputKind kind = OutputKind::Replace;
  /// The file written or replaced (symbolic links resolved).
  std::string target;
  FileIdentity identity;
  /// The temporary file (Replace), empty once renamed or removed.
  llvm::SmallString<128> tempPath;
  int tempFd = -1;
  /// The content of Stdout and WriteThrough outputs.
  std::string pending;
  bool written = false;

  /// Closes and removes the temporary file, if any.
  void removeTemp() {
    if (tempFd >= 0) {
      (void)llvm::sys::Process::SafelyCloseFileDescriptor(tempFd);
      tempFd = -1;
    }
    if (tempPath.empty())
      return;
    (void)llvm::sys::fs::remove(tempPath);
    llvm::sys::DontRemoveFileOnSignal(tempPath);
    tempPath.clear();
  }
};

std::string gmopt::inputDisplayName(StringRef path) {
  return path == "-" ? std::string("<stdin>") : path.str();
}

Error gmopt::checkRegularFile(StringRef path) {
  std::string name = path.str();
  struct stat status;
  if (::stat(name.c_str(), &status) != 0)
    return readError(path, errno);
  if (!S_ISREG(status.st_mode))
    return notRegular(path, status.st_mode);
  return Error::success();
}

Expected<std::unique_ptr<llvm::MemoryBuffer>>
gmopt::readFileBounded(StringRef path, const ReadFileOptions &options) {
  if (options.allowStdin && path == "-")
    return readStdin();
  // Checked before opening: opening a FIFO would wait for a writer.
  if (Error err = checkRegularFile(path))
    return err;
  std::string name = path.str();
  // O_NONBLOCK in case the path was swapped for a FIFO since the check.
  int fd;
  do
    fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return readError(path, errno);
  struct stat status;
  if (::fstat(fd, &status) != 0) {
    int error = errno;
    ::close(fd);
    return readError(path, error);
  }
  if (!S_ISREG(status.st_mode)) {
    ::close(fd);
    return notRegular(path, status.st_mode);
  }
  // The size fstat reported bounds the read, even if the file grows.
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getOpenFile(fd, path,
                                      static_cast<uint64_t>(status.st_size),
                                      options.requiresNullTerminator);
  ::close(fd);
  if (!buffer)
    return makeError(path + ": cannot read: " + buffer.getError().message());
  return std::move(*buffer);
}

//===----------------------------------------------------------------------===//
// OutputFileSet
//===----------------------------------------------------------------------===//

OutputFileSet::OutputFileSet() = default;

OutputFileSet::~OutputFileSet() { discard(); }

void OutputFileSet::addInput(StringRef path, StringRef role) {
  if (path.empty() || path == "-")
    return;
  std::string name = path.str();
  struct stat status;
  if (::stat(name.c_str(), &status) != 0)
    return;
  auto input = std::make_unique<Input>();
  input->path = name;
  input->role = role.str();
  input->identity.exists = true;
  input->identity.isDevice = S_ISCHR(status.st_mode) || S_ISBLK(status.st_mode);
  input->identity.device = status.st_dev;
  input->identity.inode = status.st_ino;
  input->identity.realPath = realPathOf(path);
  inputs.push_back(std::move(input));
}

OutputFileSet::Output *OutputFileSet::find(StringRef path) {
  // A device may be reserved more than once: each write fills the next.
  Output *found = nullptr;
  for (const std::unique_ptr<Output> &output : outputs)
    if (output->path == path) {
      if (!output->written)
        return output.get();
      found = output.get();
    }
  return found;
}

Error OutputFileSet::reserve(StringRef path, StringRef role) {
  auto output = std::make_unique<Output>();
  output->path = path.str();
  output->role = role.str();

  if (path == "-") {
    output->kind = OutputKind::Stdout;
    // Two outputs on stdout would be interleaved into one unusable stream.
    for (const std::unique_ptr<Output> &other : outputs)
      if (other->kind == OutputKind::Stdout)
        return makeError("<stdout>: named by both " + other->role + " and " +
                         role + "; each output needs a file of its own");
    outputs.push_back(std::move(output));
    return Error::success();
  }

  // stat follows every link, also the kernel's magic ones (/dev/stdout
  // onto a pipe), which only open() can write through.
  struct stat status;
  bool exists = ::stat(output->path.c_str(), &status) == 0;
  if (!exists && errno != ENOENT)
    return makeError(path + ": cannot write: " + errnoMessage(errno));
  if (exists && !S_ISREG(status.st_mode)) {
    output->target = output->path;
  } else {
    // A regular file is replaced where it really is; a new file (or a
    // dangling link's target) is created where the links lead.
    std::string resolved = exists ? realPathOf(path) : std::string();
    if (resolved.empty()) {
      Expected<std::string> target = resolveOutputLinks(path);
      if (!target)
        return target.takeError();
      resolved = std::move(*target);
    }
    output->target = std::move(resolved);
  }
  if (exists && (S_ISDIR(status.st_mode) || S_ISSOCK(status.st_mode)))
    return makeError(path + ": is " + describeFileType(status.st_mode) +
                     "; cannot write to it");

  FileIdentity &identity = output->identity;
  if (exists && !S_ISREG(status.st_mode)) {
    // Devices and FIFOs are written through: replacing /dev/null with a
    // regular file would break the system for everyone.
    output->kind = OutputKind::WriteThrough;
    if (::access(output->target.c_str(), W_OK) != 0)
      return makeError(path + ": cannot write: " + errnoMessage(errno));
  } else {
    output->kind = OutputKind::Replace;
    int fd = -1;
    if (std::error_code ec = llvm::sys::fs::createUniqueFile(
            output->target + ".tmp%%%%%%", fd, output->tempPath))
      return makeError(path +
                       ": cannot create a temporary file: " + ec.message());
    output->tempFd = fd;
    llvm::sys::RemoveFileOnSignal(output->tempPath);
    if (exists) {
      // The replacement keeps the file's owner (where this process may set
      // it) and then its mode (chown may clear set-user-ID bits).
      struct stat tempStatus;
      if (::fstat(fd, &tempStatus) == 0 &&
          (tempStatus.st_uid != status.st_uid ||
           tempStatus.st_gid != status.st_gid))
        (void)!::fchown(fd, status.st_uid, status.st_gid);
      if (::fchmod(fd, status.st_mode & 07777) != 0) {
        int error = errno;
        output->removeTemp();
        return makeError(path +
                         ": cannot give the new file the mode of the "
                         "old one: " +
                         errnoMessage(error));
      }
    }
  }

  identity.exists = exists;
  if (exists) {
    identity.isDevice = S_ISCHR(status.st_mode) || S_ISBLK(status.st_mode);
    identity.device = status.st_dev;
    identity.inode = status.st_ino;
    identity.realPath = realPathOf(output->target);
  } else {
    std::string directory =
        realPathOf(llvm::sys::path::parent_path(output->target).empty()
                       ? StringRef(".")
                       : llvm::sys::path::parent_path(output->target));
    llvm::SmallString<256> full(directory);
    llvm::sys::path::append(full, llvm::sys::path::filename(output->target));
    identity.realPath = full.str().str();
  }

  for (const std::unique_ptr<Input> &input : inputs)
    if (sameFile(identity, input->identity)) {
      output->removeTemp();
      return makeError(path + ": " + role + " would overwrite " + input->role +
                       (input->path == path ? "" : " (" + input->path + ")"));
    }
  for (const std::unique_ptr<Output> &other : outputs)
    if (sameFile(identity, other->identity)) {
      output->removeTemp();
      if (other->path == path)
        return makeError(path + ": named by both " + other->role + " and " +
                         role + "; each output needs a file of its own");
      return makeError(path + ": " + role + " names the same file as " +
                       other->role + " (" + other->path +
                       "); each output needs a file of its own");
    }
  outputs.push_back(std::move(output));
  return Error::success();
}

Error OutputFileSet::write(StringRef path,
                           llvm::function_ref<void(llvm::raw_ostream &)> fill) {
  Output *output = find(path);
  if (!output) {
    if (Error err = reserve(path, "the output"))
      return err;
    output = outputs.back().get();
  }
  assert(!output->written && "an output is written once");
  output->written = true;
  if (output->kind != OutputKind::Replace) {
    llvm::raw_string_ostream os(output->pending);
    fill(os);
    return Error::success();
  }
  std::error_code writeError;
  {
    llvm::raw_fd_ostream os(output->tempFd, /*shouldClose=*/false);
    fill(os);
    os.flush();
    if (os.has_error()) {
      writeError = os.error();
      os.clear_error();
    }
  }
  std::error_code closeError =
      llvm::sys::Process::SafelyCloseFileDescriptor(output->tempFd);
  output->tempFd = -1;
  if (writeError || closeError)
    return makeError(path + ": cannot write: " +
                     (writeError ? writeError : closeError).message());
  return Error::success();
}

Error OutputFileSet::write(StringRef path, StringRef content) {
  return write(path, [&](llvm::raw_ostream &os) { os << content; });
}

Error OutputFileSet::commit() {
  auto fail = [&](Error err) {
    discard();
    return err;
  };
  // Writes that cannot be undone first, so that when one fails no regular
  // output has been replaced yet.
  for (const std::unique_ptr<Output> &output : outputs) {
    assert(output->written && "every reserved output is written");
    if (output->kind == OutputKind::WriteThrough) {
      int fd;
      do
        fd = ::open(output->target.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
      while (fd < 0 && errno == EINTR);
      if (fd < 0)
        return fail(
            makeError(output->path + ": cannot write: " + errnoMessage(errno)));
      llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
      os << output->pending;
      os.flush();
      if (os.has_error()) {
        std::error_code ec = os.error();
        os.clear_error();
        return fail(
            makeError(output->path + ": cannot write: " + ec.message()));
      }
    } else if (output->kind == OutputKind::Stdout) {
      llvm::raw_fd_ostream &os = llvm::outs();
      os << output->pending;
      os.flush();
      if (os.has_error()) {
        std::error_code ec = os.error();
        // Reported here, so not again by LLVM when the process exits.
        os.clear_error();
        return fail(makeError("<stdout>: cannot write: " + ec.message()));
      }
    }
  }
  for (const std::unique_ptr<Output> &output : outputs) {
    if (output->kind != OutputKind::Replace)
      continue;
    if (std::error_code ec =
            llvm::sys::fs::rename(output->tempPath, output->target))
      return fail(makeError(
          output->path +
          ": cannot rename the temporary file into place: " + ec.message()));
    llvm::sys::DontRemoveFileOnSignal(output->tempPath);
    output->tempPath.clear();
  }
  outputs.clear();
  return Error::success();
}

void OutputFileSet::discard() {
  for (const std::unique_ptr<Output> &output : outputs)
    output->removeTemp();
  outputs.clear();
}

Error gmopt::writeFileSafely(StringRef path, StringRef content) {
  OutputFileSet outputs;
  if (Error err = outputs.write(path, content))
    return err;
  return outputs.commit();
}

namespace {
void discardProtobufLog(google::protobuf::LogLevel, const char *, int,
                        const std::string &) {}
} // namespace

void gmopt::silenceProtobufLogging() {
  static std::once_flag once;
  std::call_once(once,
                 [] { google::protobuf::SetLogHandler(discardProtobufLog); });
}
