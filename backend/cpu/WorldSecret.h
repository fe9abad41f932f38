//===- WorldSecret.h - The secret a TCP world's ranks share -----*- C++ -*-===//
//
// A TCP world of several ranks admits only peers that prove they hold one
// secret (backend/cpu/TcpWorld.h): this is where the secret comes from
// (GMOPT_WORLD_SECRET, or a file only its owner can read named by
// GMOPT_WORLD_SECRET_FILE), how a fresh one is made, and the HMAC-SHA-256
// the proofs are made with.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_WORLDSECRET_H
#define GMOPT_BACKEND_CPU_WORLDSECRET_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gmopt {
namespace cpu {

/// Shortest world secret accepted, in characters.
constexpr size_t kMinWorldSecretLength = 16;

/// The environment variable holding the world secret itself.
constexpr const char *kWorldSecretVariable = "GMOPT_WORLD_SECRET";
/// The environment variable naming a file (readable by its owner only)
/// that holds the world secret.
constexpr const char *kWorldSecretFileVariable = "GMOPT_WORLD_SECRET_FILE";

/// Reads the world secret of a launch of several ranks: the value of
/// GMOPT_WORLD_SECRET, or the contents of the file GMOPT_WORLD_SECRET_FILE
/// names (surrounding white space trimmed). Fails, saying how to make one,
/// when neither is set or both are, when the secret is shorter than
/// kMinWorldSecretLength, and when the file is not a regular file owned by
/// this user that only this user can access (mode 0600 or 0400).
llvm::Expected<std::string> readWorldSecret();

/// A fresh world secret: 32 bytes from the system's entropy source
/// (getentropy), as 64 lowercase hex digits.
llvm::Expected<std::string> makeWorldSecret();

/// HMAC-SHA-256 (RFC 2104 over FIPS 180-4's SHA-256) of \p message under
/// \p key.
std::array<uint8_t, 32> hmacSha256(llvm::ArrayRef<uint8_t> key,
                                   llvm::ArrayRef<uint8_t> message);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_WORLDSECRET_H
