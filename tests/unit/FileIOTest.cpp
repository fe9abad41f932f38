//===- FileIOTest.cpp - Tests of bounded reads and all-or-nothing writes --===//
//
// readFileBounded refuses every kind of file that is not regular without
// blocking on it; OutputFileSet writes through symbolic links (which stay
// links), keeps an old file's mode, writes through to devices and FIFOs
// (which stay what they were), refuses sockets and directories, refuses an
// output on an input or on another output, commits all outputs or none,
// and leaves no temporary file behind - also when the process is killed by
// SIGTERM while an output is staged.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/FileIO.h"

#include "TestSupport.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"

#include "gtest/gtest.h"

#include <csignal>
#include <fcntl.h>
#include <set>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

using namespace gmopt;
using gmopt::test::TempDir;

namespace {

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

std::string readError(llvm::StringRef path) {
  auto buffer = readFileBounded(path);
  return buffer ? std::string("<success>") : llvm::toString(buffer.takeError());
}

void writeFile(const std::string &path, llvm::StringRef content) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  ASSERT_FALSE(ec) << ec.message();
  os << content;
}

std::string contentOf(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : std::string("<unreadable>");
}

mode_t lstatMode(const std::string &path) {
  struct stat status;
  EXPECT_EQ(::lstat(path.c_str(), &status), 0) << path;
  return status.st_mode;
}

/// Makes a listening Unix socket at \p path; returns its descriptor.
int makeSocket(const std::string &path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  EXPECT_LT(path.size(), sizeof(address.sun_path));
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)),
            0);
  return fd;
}

TEST(FileIO, ReadsRegularFilesWhole) {
  TempDir dir;
  writeFile(dir.file("a.txt"), "hello");
  auto buffer = readFileBounded(dir.file("a.txt"));
  ASSERT_TRUE(bool(buffer)) << llvm::toString(buffer.takeError());
  EXPECT_EQ((*buffer)->getBuffer(), "hello");
  // Through a symbolic link too.
  ASSERT_EQ(::symlink("a.txt", dir.file("link").c_str()), 0);
  buffer = readFileBounded(dir.file("link"));
  ASSERT_TRUE(bool(buffer)) << llvm::toString(buffer.takeError());
  EXPECT_EQ((*buffer)->getBuffer(), "hello");
}

TEST(FileIO, ReadRefusesWhatIsNotARegularFile) {
  TempDir dir;
  EXPECT_EQ(readError("/dev/zero"),
            "/dev/zero: is a character device, not a regular file");
  EXPECT_EQ(readError(dir.path),
            (dir.path + ": is a directory, not a regular file").str());
  // A FIFO is refused without being opened (that would block here).
  std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(readError(fifo), fifo + ": is a FIFO, not a regular file");
  std::string socketPath = dir.file("sock");
  int socketFd = makeSocket(socketPath);
  EXPECT_EQ(readError(socketPath),
            socketPath + ": is a socket, not a regular file");
  ::close(socketFd);
  // A symbolic link to a device is the device.
  ASSERT_EQ(::symlink("/dev/zero", dir.file("zero").c_str()), 0);
  EXPECT_EQ(readError(dir.file("zero")),
            dir.file("zero") + ": is a character device, not a regular file");
  EXPECT_EQ(readError(dir.file("missing")),
            dir.file("missing") + ": No such file or directory");
  // `-` is a file name unless stdin is allowed.
  EXPECT_EQ(readError("-"), "-: No such file or directory");
}

TEST(FileIO, WritesNewAndExistingFilesKeepingTheMode) {
  TempDir dir;
  std::string path = dir.file("out.txt");
  EXPECT_EQ(errorText(writeFileSafely(path, "one")), "<success>");
  EXPECT_EQ(contentOf(path), "one");
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  EXPECT_EQ(errorText(writeFileSafely(path, "two")), "<success>");
  EXPECT_EQ(contentOf(path), "two");
  EXPECT_EQ(lstatMode(path) & 07777, 0640u);
  EXPECT_EQ(dir.list(), std::set<std::string>{"out.txt"});
}

TEST(FileIO, WritesThroughSymbolicLinks) {
  TempDir dir;
  std::string target = dir.file("target.txt");
  writeFile(target, "old");
  ASSERT_EQ(::chmod(target.c_str(), 0604), 0);
  std::string link = dir.file("link.txt");
  ASSERT_EQ(::symlink("target.txt", link.c_str()), 0);
  // A chain of two links.
  std::string link2 = dir.file("link2.txt");
  ASSERT_EQ(::symlink(link.c_str(), link2.c_str()), 0);
  EXPECT_EQ(errorText(writeFileSafely(link2, "new")), "<success>");
  EXPECT_TRUE(S_ISLNK(lstatMode(link)));
  EXPECT_TRUE(S_ISLNK(lstatMode(link2)));
  EXPECT_EQ(contentOf(target), "new");
  EXPECT_EQ(lstatMode(target) & 07777, 0604u);
  // A dangling link creates its target.
  std::string dangling = dir.file("dangling");
  ASSERT_EQ(::symlink("created.txt", dangling.c_str()), 0);
  EXPECT_EQ(errorText(writeFileSafely(dangling, "made")), "<success>");
  EXPECT_TRUE(S_ISLNK(lstatMode(dangling)));
  EXPECT_EQ(contentOf(dir.file("created.txt")), "made");
  EXPECT_EQ(dir.list(),
            (std::set<std::string>{"created.txt", "dangling", "link.txt",
                                   "link2.txt", "target.txt"}));
}

TEST(FileIO, WritesThroughDevicesAndFifos) {
  EXPECT_EQ(errorText(writeFileSafely("/dev/null", "discarded")), "<success>");
  EXPECT_TRUE(S_ISCHR(lstatMode("/dev/null")));
  EXPECT_EQ(errorText(writeFileSafely("/dev/full", "x")),
            "/dev/full: cannot write: No space left on device");
  EXPECT_TRUE(S_ISCHR(lstatMode("/dev/full")));

  TempDir dir;
  std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] {
    int fd = ::open(fifo.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    char chunk[256];
    ssize_t count;
    while ((count = ::read(fd, chunk, sizeof(chunk))) > 0)
      received.append(chunk, static_cast<size_t>(count));
    ::close(fd);
  });
  EXPECT_EQ(errorText(writeFileSafely(fifo, "through the pipe")), "<success>");
  reader.join();
  EXPECT_EQ(received, "through the pipe");
  EXPECT_TRUE(S_ISFIFO(lstatMode(fifo)));
  EXPECT_EQ(dir.list(), std::set<std::string>{"fifo"});
}

TEST(FileIO, WritesThroughMagicLinksToPipes) {
  // /dev/stdout onto a pipe is /proc/self/fd/1, a link to "pipe:[N]" that
  // only open() can follow.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::string path = "/proc/self/fd/" + std::to_string(fds[1]);
  EXPECT_EQ(errorText(writeFileSafely(path, "piped")), "<success>");
  ::close(fds[1]);
  char buffer[16] = {};
  EXPECT_EQ(::read(fds[0], buffer, sizeof(buffer)), 5);
  ::close(fds[0]);
  EXPECT_EQ(std::string(buffer), "piped");
}

TEST(FileIO, RefusesSocketsAndDirectories) {
  TempDir dir;
  std::string socketPath = dir.file("sock");
  int socketFd = makeSocket(socketPath);
  EXPECT_EQ(errorText(writeFileSafely(socketPath, "x")),
            socketPath + ": is a socket; cannot write to it");
  ::close(socketFd);
  EXPECT_EQ(errorText(writeFileSafely(dir.path, "x")),
            (dir.path + ": is a directory; cannot write to it").str());
  std::string missing = dir.file("no/such/file");
  std::string message = errorText(writeFileSafely(missing, "x"));
  EXPECT_EQ(message, missing + ": cannot create a temporary file: No such "
                               "file or directory");
  EXPECT_EQ(dir.list(), std::set<std::string>{"sock"});
}

TEST(FileIO, OutputsCommitTogetherOrNotAtAll) {
  TempDir dir;
  std::string first = dir.file("first.gm"), second = dir.file("second.json");
  writeFile(first, "old first");
  {
    // The second output cannot be written: the first stays as it was.
    OutputFileSet outputs;
    EXPECT_EQ(errorText(outputs.reserve(first, "-o")), "<success>");
    EXPECT_EQ(errorText(outputs.write(first, "new first")), "<success>");
    std::string bad = dir.file("missing/r.json");
    EXPECT_NE(errorText(outputs.reserve(bad, "--report-json")), "<success>");
  }
  EXPECT_EQ(contentOf(first), "old first");
  EXPECT_EQ(dir.list(), std::set<std::string>{"first.gm"});
  {
    // A write-through output that fails at commit: no rename happens.
    OutputFileSet outputs;
    EXPECT_EQ(errorText(outputs.write(first, "new first")), "<success>");
    EXPECT_EQ(errorText(outputs.write(second, "new second")), "<success>");
    EXPECT_EQ(errorText(outputs.write("/dev/full", "report")), "<success>");
    EXPECT_EQ(errorText(outputs.commit()),
              "/dev/full: cannot write: No space left on device");
  }
  EXPECT_EQ(contentOf(first), "old first");
  EXPECT_EQ(dir.list(), std::set<std::string>{"first.gm"});
  {
    // Staged but never committed.
    OutputFileSet outputs;
    EXPECT_EQ(errorText(outputs.write(first, "new first")), "<success>");
    EXPECT_EQ(dir.list().size(), 2u);
  }
  EXPECT_EQ(contentOf(first), "old first");
  EXPECT_EQ(dir.list(), std::set<std::string>{"first.gm"});
  {
    OutputFileSet outputs;
    EXPECT_EQ(errorText(outputs.write(first, "new first")), "<success>");
    EXPECT_EQ(errorText(outputs.write(second, "new second")), "<success>");
    EXPECT_EQ(errorText(outputs.commit()), "<success>");
  }
  EXPECT_EQ(contentOf(first), "new first");
  EXPECT_EQ(contentOf(second), "new second");
  EXPECT_EQ(dir.list(), (std::set<std::string>{"first.gm", "second.json"}));
}

TEST(FileIO, RefusesOutputsOnInputsAndOnEachOther) {
  TempDir dir;
  std::string input = dir.file("in.gm");
  writeFile(input, "input");
  ASSERT_EQ(::symlink("in.gm", dir.file("alias.gm").c_str()), 0);
  ASSERT_EQ(::link(input.c_str(), dir.file("hard.gm").c_str()), 0);
  {
    OutputFileSet outputs;
    outputs.addInput(input, "the input model");
    EXPECT_EQ(errorText(outputs.reserve(input, "-o")),
              input + ": -o would overwrite the input model");
    EXPECT_EQ(errorText(outputs.reserve(dir.file("alias.gm"), "-o")),
              dir.file("alias.gm") + ": -o would overwrite the input model (" +
                  input + ")");
    EXPECT_EQ(errorText(outputs.reserve(dir.file("hard.gm"), "-o")),
              dir.file("hard.gm") + ": -o would overwrite the input model (" +
                  input + ")");
  }
  {
    OutputFileSet outputs;
    std::string out = dir.file("out.gm");
    EXPECT_EQ(errorText(outputs.reserve(out, "-o")), "<success>");
    EXPECT_EQ(errorText(outputs.reserve(out, "--emit-onnx")),
              out + ": named by both -o and --emit-onnx; each output needs a "
                    "file of its own");
    // The same new file by another spelling.
    std::string other = (dir.path + "/./out.gm").str();
    EXPECT_EQ(errorText(outputs.reserve(other, "--report-json")),
              other + ": --report-json names the same file as -o (" + out +
                  "); each output needs a file of its own");
    EXPECT_EQ(errorText(outputs.reserve("-", "--emit-onnx")), "<success>");
    EXPECT_EQ(errorText(outputs.reserve("-", "--report-json")),
              "<stdout>: named by both --emit-onnx and --report-json; each "
              "output needs a file of its own");
    // Device nodes may be named twice, and be inputs too.
    outputs.addInput("/dev/null", "the input");
    EXPECT_EQ(errorText(outputs.reserve("/dev/null", "a")), "<success>");
    std::string devNull = dir.file("null");
    ASSERT_EQ(::symlink("/dev/null", devNull.c_str()), 0);
    EXPECT_EQ(errorText(outputs.reserve(devNull, "b")), "<success>");
  }
  EXPECT_EQ(contentOf(input), "input");
  EXPECT_EQ(dir.list(),
            (std::set<std::string>{"alias.gm", "hard.gm", "in.gm", "null"}));
}

TEST(FileIODeathTest, SigtermRemovesStagedFiles) {
  TempDir dir;
  std::string out = dir.file("out.gm");
  EXPECT_EXIT(
      {
        OutputFileSet outputs;
        if (errorText(outputs.reserve(out, "-o")) != "<success>")
          std::_Exit(3);
        if (errorText(outputs.write(out, "staged")) != "<success>")
          std::_Exit(4);
        std::raise(SIGTERM);
        std::_Exit(5);
      },
      testing::KilledBySignal(SIGTERM), "");
  EXPECT_EQ(dir.list(), std::set<std::string>{});
}

} // namespace
