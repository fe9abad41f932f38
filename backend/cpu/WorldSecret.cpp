//===- WorldSecret.cpp - The secret a TCP world's ranks share -------------===//
//
// Reading the world secret from the environment or a private file, making a
// fresh one, and HMAC-SHA-256 over LLVM's SHA-256 (see WorldSecret.h).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/WorldSecret.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SHA256.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

llvm::Error secretError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "data-parallel world (TCP): " + message);
}

/// Reads the secret file \p path: a regular file of this user's that no
/// one else may access, at most 4 KiB.
llvm::Expected<std::string> readSecretFile(llvm::StringRef path) {
  std::string where =
      llvm::formatv("{0}='{1}'", kWorldSecretFileVariable, path).str();
  // O_NONBLOCK: a FIFO put there must not hang the open.
  int fd =
      ::open(path.str().c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return secretError(
        where + ": cannot open it: " + std::string(std::strerror(errno)));
  auto closeFile = llvm::make_scope_exit([&] { ::close(fd); });
  struct stat status;
  if (::fstat(fd, &status) != 0)
    return secretError(
        where + ": cannot stat it: " + std::string(std::strerror(errno)));
  if (!S_ISREG(status.st_mode))
    return secretError(where + " is not a regular file");
  if (status.st_uid != ::geteuid())
    return secretError(
        llvm::formatv("{0} belongs to user {1}, not to this user "
                      "({2}): the world secret must be your own",
                      where, status.st_uid, ::geteuid()));
  if (status.st_mode & (S_IRWXG | S_IRWXO))
    return secretError(llvm::formatv(
        "{0} can be read or written by its group or others (mode {1}): "
        "a world secret must be private to you (chmod 600 '{2}')",
        where, llvm::format("%04o", unsigned(status.st_mode & 07777)), path));
  constexpr size_t kMaxSecretFileBytes = 4096;
  std::string contents;
  char chunk[512];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return secretError(
          where + ": cannot read it: " + std::string(std::strerror(errno)));
    if (n == 0)
      break;
    contents.append(chunk, size_t(n));
    if (contents.size() > kMaxSecretFileBytes)
      return secretError(llvm::formatv("{0} is larger than {1} bytes: not a "
                                       "world secret",
                                       where, kMaxSecretFileBytes));
  }
  return llvm::StringRef(contents).trim().str();
}

} // namespace

std::array<uint8_t, 32> cpu::hmacSha256(llvm::ArrayRef<uint8_t> key,
                                        llvm::ArrayRef<uint8_t> message) {
  // RFC 2104: H((K ^ opad) || H((K ^ ipad) || message)), K padded to the
  // block, or hashed first when longer than one.
  constexpr size_t kBlockBytes = 64;
  std::array<uint8_t, kBlockBytes> block{};
  if (key.size() > kBlockBytes) {
    std::array<uint8_t, 32> digest = llvm::SHA256::hash(key);
    std::copy(digest.begin(), digest.end(), block.begin());
  } else {
    std::copy(key.begin(), key.end(), block.begin());
  }
  std::array<uint8_t, kBlockBytes> innerPad, outerPad;
  for (size_t i = 0; i != kBlockBytes; ++i) {
    innerPad[i] = block[i] ^ 0x36;
    outerPad[i] = block[i] ^ 0x5c;
  }
  llvm::SHA256 inner;
  inner.update(innerPad);
  inner.update(message);
  std::array<uint8_t, 32> innerDigest = inner.final();
  llvm::SHA256 outer;
  outer.update(outerPad);
  outer.update(innerDigest);
  return outer.final();
}

llvm::Expected<std::string> cpu::readWorldSecret() {
  const char *value = std::getenv(kWorldSecretVariable);
  const char *file = std::getenv(kWorldSecretFileVariable);
  if (value && file)
    return secretError(
        llvm::formatv("both {0} and {1} are set: set one of them, "
                      "alike on every rank",
                      kWorldSecretVariable, kWorldSecretFileVariable));
  if (!value && !file)
    return secretError(llvm::formatv(
        "no world secret: set {0} to a secret, or {1} to a file only you can "
        "read that holds it, alike on every rank (`gmopt-run "
        "--make-world-secret=FILE` writes one), so that a process which "
        "reaches MASTER_ADDR:MASTER_PORT without it cannot join the world",
        kWorldSecretVariable, kWorldSecretFileVariable));
  std::string secret, source;
  if (value) {
    secret = llvm::StringRef(value).trim().str();
    source = kWorldSecretVariable;
  } else {
    auto read = readSecretFile(file);
    if (!read)
      return read.takeError();
    secret = std::move(*read);
    source = llvm::formatv("{0}='{1}'", kWorldSecretFileVariable, file);
  }
  if (secret.size() < kMinWorldSecretLength)
    return secretError(llvm::formatv(
        "{0} holds a secret of {1} characters: use at least {2} (`gmopt-run "
        "--make-world-secret=FILE` writes 64 random hex digits)",
        source, secret.size(), kMinWorldSecretLength));
  return secret;
}

llvm::Expected<std::string> cpu::makeWorldSecret() {
  std::array<uint8_t, 32> bytes;
  if (::getentropy(bytes.data(), bytes.size()) != 0)
    return secretError("cannot draw random bytes (getentropy): " +
                       std::string(std::strerror(errno)));
  return llvm::toHex(bytes, /*LowerCase=*/true);
}
