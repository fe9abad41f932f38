//===- TcpWorld.cpp - gmopt's own TCP data-parallel world -----------------===//
//
// The sockets behind TcpWorld.h: the rendezvous at MASTER_ADDR:MASTER_PORT
// (rank 0 polls the listener and every connection still in its handshake
// together, each connection with its own deadline; the challenge-response
// over HMAC-SHA-256, built here on llvm::SHA256), framed messages (a fixed
// header: magic, type, collective sequence number, payload bytes), and the
// star collectives through rank 0. Every socket is non-blocking and every
// wait is a poll() bounded by the collective's deadline, so a missing rank
// becomes an error naming it. A rank that has sent part of a message and
// then fails closes the socket instead of sending an abort message, so no
// peer ever reads an abort as payload. The world secret is read here too
// (the environment, or a file only its owner can read).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/TcpWorld.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x676d6f70; // "gmop"

/// What a message carries.
enum class MessageType : uint32_t {
  Hello = 1,     ///< a rank's HelloPayload, to rank 0 at the rendezvous
  Welcome = 2,   ///< rank 0's proof: the world is complete
  Data = 3,      ///< a rank's contribution to a collective
  Result = 4,    ///< rank 0's result of a collective
  Abort = 5,     ///< the sender fails; the payload says why
  Challenge = 6, ///< rank 0's nonce, to every new connection
  Refused = 7,   ///< rank 0 refuses a hello's proof; the payload says why
};

/// Most connections rank 0 keeps in their handshake at once; beyond it the
/// oldest is dropped.
constexpr size_t kMaxPendingConnections = 64;

using Nonce = std::array<uint8_t, 32>;
using Proof = std::array<uint8_t, 32>;

/// What a rank says at the rendezvous, after rank 0's challenge.
struct HelloPayload {
  int32_t rank = -1;
  int32_t worldSize = -1;
  /// The rank's own nonce, which rank 0's welcome proof covers.
  Nonce nonce{};
  /// hmacSha256(secret, kHelloLabel, challenge, nonce, rank, world size).
  Proof proof{};
};
static_assert(sizeof(HelloPayload) == 72, "no padding on the wire");

/// What each proof covers first, so that neither can stand for the other.
constexpr llvm::StringLiteral kHelloLabel = "gmopt TCP world v2: hello";
constexpr llvm::StringLiteral kWelcomeLabel = "gmopt TCP world v2: welcome";

/// The fixed part of every message.
struct Header {
  uint32_t magic = kMagic;
  uint32_t type = 0;
  uint64_t sequence = 0;
  uint64_t bytes = 0;
};

/// How one socket transfer ended.
enum class Transfer { Done, TimedOut, Closed, Incoming, Failed };

llvm::Error tcpError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "data-parallel world (TCP): " + message);
}

std::string errnoText(int code) { return std::strerror(code); }

/// "2", "0.5", "300": a timeout as written on the command line.
std::string secondsText(double seconds) {
  return llvm::formatv("{0}", llvm::format("%g", seconds)).str();
}

/// Milliseconds to \p deadline, at least 0, at most a poll-sized slice.
int millisecondsTo(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - Clock::now())
                  .count();
  return int(std::clamp<int64_t>(left, 0, 1000));
}

/// Now plus \p seconds, which are cut to 0..kMaxTimeoutSeconds (NaN: 0)
/// so that the sum cannot overflow the clock.
Clock::time_point deadlineIn(double seconds) {
  double bounded =
      std::isnan(seconds) ? 0.0 : std::clamp(seconds, 0.0, kMaxTimeoutSeconds);
  return Clock::now() + std::chrono::microseconds(int64_t(bounded * 1e6));
}

/// Seconds the non-zero ranks wait beyond the timeout, so that rank 0,
/// which sees every arrival, names a missing rank first.
double graceSeconds(double timeout) {
  return std::clamp(0.2 * timeout, 1.0, 30.0);
}

void configureSocket(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// Sends \p bytes at \p data by \p deadline. With \p watchIncoming, data
/// arriving meanwhile (an abort, or the peer closing) ends the send with
/// Transfer::Incoming; \p sent counts what went out.
Transfer sendAll(int fd, const void *data, size_t bytes,
                 Clock::time_point deadline, bool watchIncoming, size_t &sent,
                 int &errorCode) {
  const char *at = static_cast<const char *>(data);
  sent = 0;
  while (sent < bytes) {
    ssize_t n = ::send(fd, at + sent, bytes - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      errorCode = errno;
      return errno == EPIPE || errno == ECONNRESET ? Transfer::Closed
                                                   : Transfer::Failed;
    }
    pollfd entry{fd, short(POLLOUT | (watchIncoming ? POLLIN : 0)), 0};
    if (Clock::now() >= deadline)
      return Transfer::TimedOut;
    int ready = ::poll(&entry, 1, millisecondsTo(deadline));
    if (ready < 0 && errno != EINTR) {
      errorCode = errno;
      return Transfer::Failed;
    }
    if (ready > 0 && (entry.revents & (POLLIN | POLLHUP | POLLERR)) &&
        watchIncoming)
      return Transfer::Incoming;
  }
  return Transfer::Done;
}

/// Receives exactly \p bytes into \p data by \p deadline.
Transfer receiveAll(int fd, void *data, size_t bytes,
                    Clock::time_point deadline, int &errorCode) {
  char *at = static_cast<char *>(data);
  size_t received = 0;
  while (received < bytes) {
    ssize_t n = ::recv(fd, at + received, bytes - received, 0);
    if (n > 0) {
      received += size_t(n);
      continue;
    }
    if (n == 0)
      return Transfer::Closed;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      errorCode = errno;
      return errno == ECONNRESET ? Transfer::Closed : Transfer::Failed;
    }
    if (Clock::now() >= deadline)
      return Transfer::TimedOut;
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, millisecondsTo(deadline)) < 0 && errno != EINTR) {
      errorCode = errno;
      return Transfer::Failed;
    }
  }
  return Transfer::Done;
}

/// True if \p fd has something to read (or was closed) right now.
bool hasIncoming(int fd) {
  pollfd entry{fd, POLLIN, 0};
  return ::poll(&entry, 1, 0) > 0 &&
         (entry.revents & (POLLIN | POLLHUP | POLLERR));
}

/// "rank 1", "ranks 1, 3".
std::string rankList(llvm::ArrayRef<int> ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i != ranks.size(); ++i)
    text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

/// Reads the reason of an abort message whose header came already.
std::string readAbortReason(int fd, const Header &header) {
  std::string reason(std::min<uint64_t>(header.bytes, 4096), '\0');
  int code = 0;
  if (receiveAll(fd, reason.data(), reason.size(), deadlineIn(2), code) !=
      Transfer::Done)
    return "(the reason was cut off)";
  return reason;
}

/// Sends one whole message (header and payload); see sendAll.
Transfer sendMessage(int fd, MessageType type, uint64_t sequence,
                     const void *payload, size_t bytes,
                     Clock::time_point deadline, bool watchIncoming,
                     bool &partial, int &errorCode) {
  Header header;
  header.type = uint32_t(type);
  header.sequence = sequence;
  header.bytes = bytes;
  size_t sent = 0;
  partial = false;
  Transfer status = sendAll(fd, &header, sizeof header, deadline, watchIncoming,
                            sent, errorCode);
  partial = sent != 0 && sent != sizeof header;
  if (status != Transfer::Done || bytes == 0)
    return status;
  status =
      sendAll(fd, payload, bytes, deadline, watchIncoming, sent, errorCode);
  partial = status != Transfer::Done;
  return status;
}

/// A fresh random nonce from the system's entropy source.
llvm::Expected<Nonce> randomNonce() {
  Nonce nonce;
  if (::getentropy(nonce.data(), nonce.size()) != 0)
    return tcpError("cannot draw random bytes (getentropy): " +
                    errnoText(errno));
  return nonce;
}

/// The proof that its maker holds \p secret: the HMAC over \p label, the
/// nonces in the order given, the rank and the world size.
Proof prove(llvm::StringRef secret, llvm::StringRef label, const Nonce &first,
            const Nonce &second, int32_t rank, int32_t worldSize) {
  std::vector<uint8_t> message(label.begin(), label.end());
  message.push_back(0);
  message.insert(message.end(), first.begin(), first.end());
  message.insert(message.end(), second.begin(), second.end());
  for (int32_t number : {rank, worldSize})
    for (int shift = 0; shift != 32; shift += 8)
      message.push_back(uint8_t(uint32_t(number) >> shift));
  return hmacSha256(llvm::arrayRefFromStringRef(secret), message);
}

/// Compares proofs in time independent of where they differ.
bool sameProof(const Proof &a, const Proof &b) {
  uint8_t difference = 0;
  for (size_t i = 0; i != a.size(); ++i)
    difference |= uint8_t(a[i] ^ b[i]);
  return difference == 0;
}

/// "127.0.0.1:50412", "[::1]:50412": where a connection came from.
std::string peerName(const sockaddr_storage &address, socklen_t length) {
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr *>(&address), length, host,
                  sizeof host, service, sizeof service,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown address";
  if (address.ss_family == AF_INET6)
    return "[" + std::string(host) + "]:" + service;
  return std::string(host) + ":" + service;
}

/// "1 connection", "2 connections".
std::string connectionCount(size_t count) {
  return std::to_string(count) + (count == 1 ? " connection" : " connections");
}

llvm::Expected<addrinfo *> resolve(const std::string &host, unsigned port,
                                   bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive)
    hints.ai_flags = AI_PASSIVE;
  addrinfo *found = nullptr;
  std::string service = std::to_string(port);
  if (int code = getaddrinfo(host.c_str(), service.c_str(), &hints, &found))
    return tcpError(llvm::formatv("cannot resolve MASTER_ADDR '{0}': {1}", host,
                                  gai_strerror(code)));
  return found;
}

} // namespace

llvm::Expected<std::unique_ptr<TcpWorld>>
TcpWorld::connect(const TcpWorldConfig &config) {
  if (config.worldSize < 1 || config.rank < 0 ||
      config.rank >= config.worldSize)
    return tcpError(llvm::formatv("RANK={0} is not below WORLD_SIZE={1}",
                                  config.rank, config.worldSize));
  if (!(config.timeoutSeconds > 0) || !(config.handshakeSeconds > 0))
    return tcpError("the timeouts must be positive numbers of seconds");
  std::unique_ptr<TcpWorld> world(new TcpWorld(config));
  world->sockets.assign(size_t(config.rank == 0 ? config.worldSize : 1), -1);
  if (config.worldSize == 1)
    return world;
  if (config.secret.size() < kMinWorldSecretLength)
    return tcpError(llvm::formatv("a world of several ranks needs a secret of "
                                  "at least {0} characters",
                                  kMinWorldSecretLength));
  std::string where =
      llvm::formatv("{0}:{1}", config.masterAddress, config.masterPort);
  auto found =
      resolve(config.masterAddress, config.masterPort, config.rank == 0);
  if (!found)
    return found.takeError();
  auto freeFound = llvm::make_scope_exit([&] { freeaddrinfo(*found); });
  int code = 0;

  if (config.rank != 0) {
    // Connect, retrying until rank 0 listens; then answer its challenge.
    Clock::time_point deadline =
        deadlineIn(config.timeoutSeconds + graceSeconds(config.timeoutSeconds));
    int fd = -1;
    while (fd < 0) {
      for (addrinfo *at = *found; at && fd < 0; at = at->ai_next) {
        int candidate =
            ::socket(at->ai_family, at->ai_socktype, at->ai_protocol);
        if (candidate < 0)
          continue;
        configureSocket(candidate);
        if (::connect(candidate, at->ai_addr, at->ai_addrlen) == 0) {
          fd = candidate;
          break;
        }
        if (errno == EINPROGRESS) {
          pollfd entry{candidate, POLLOUT, 0};
          int error = 0;
          socklen_t length = sizeof error;
          if (::poll(&entry, 1, std::max(millisecondsTo(deadline), 1)) > 0 &&
              getsockopt(candidate, SOL_SOCKET, SO_ERROR, &error, &length) ==
                  0 &&
              error == 0) {
            fd = candidate;
            break;
          }
        }
        ::close(candidate);
      }
      if (fd >= 0)
        break;
      if (Clock::now() >= deadline)
        return tcpError(llvm::formatv(
            "rank {0} could not reach rank 0 at {1} within {2} s (is rank 0 "
            "running, with the same MASTER_ADDR and MASTER_PORT?)",
            config.rank, where, secondsText(config.timeoutSeconds)));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    world->sockets[0] = fd;
    auto notRankZero = [&](llvm::StringRef what) {
      return tcpError(llvm::formatv(
          "what answers at {0} is not rank 0 of this world: {1} (another "
          "program on MASTER_PORT, or a gmopt-run of another version)",
          where, what));
    };
    // Rank 0 speaks first: a fresh nonce that this rank's proof covers.
    Header header;
    Transfer status = receiveAll(fd, &header, sizeof header, deadline, code);
    if (status == Transfer::TimedOut)
      return notRankZero(llvm::formatv("it sent no challenge within {0} s",
                                       secondsText(config.timeoutSeconds))
                             .str());
    if (status != Transfer::Done)
      return tcpError(llvm::formatv("rank 0 at {0} closed the connection "
                                    "before the handshake",
                                    where));
    if (header.magic == kMagic && header.type == uint32_t(MessageType::Abort))
      return tcpError("rank 0 refused the world: " +
                      readAbortReason(fd, header));
    Nonce challenge;
    if (header.magic != kMagic ||
        header.type != uint32_t(MessageType::Challenge) ||
        header.bytes != sizeof challenge ||
        receiveAll(fd, challenge.data(), challenge.size(), deadline, code) !=
            Transfer::Done)
      return notRankZero("it sent no gmopt challenge");
    auto nonce = randomNonce();
    if (!nonce)
      return nonce.takeError();
    HelloPayload hello;
    hello.rank = config.rank;
    hello.worldSize = config.worldSize;
    hello.nonce = *nonce;
    hello.proof = prove(config.secret, kHelloLabel, challenge, hello.nonce,
                        hello.rank, hello.worldSize);
    bool partial = false;
    if (sendMessage(fd, MessageType::Hello, 0, &hello, sizeof hello, deadline,
                    false, partial, code) != Transfer::Done)
      return tcpError(llvm::formatv("rank {0} could not greet rank 0 at {1}",
                                    config.rank, where));
    status = receiveAll(fd, &header, sizeof header, deadline, code);
    if (status == Transfer::TimedOut)
      return tcpError(
          llvm::formatv("rank 0 at {0} did not complete the world within {1} s",
                        where, secondsText(config.timeoutSeconds)));
    if (status != Transfer::Done || header.magic != kMagic)
      return tcpError(llvm::formatv("rank 0 at {0} closed the connection "
                                    "while the world was forming",
                                    where));
    if (header.type == uint32_t(MessageType::Abort))
      return tcpError("rank 0 refused the world: " +
                      readAbortReason(fd, header));
    if (header.type == uint32_t(MessageType::Refused))
      return tcpError(llvm::formatv("rank 0 at {0} refused rank {1}: {2}",
                                    where, config.rank,
                                    readAbortReason(fd, header)));
    Proof welcome;
    if (header.type != uint32_t(MessageType::Welcome) ||
        header.bytes != sizeof welcome ||
        receiveAll(fd, welcome.data(), welcome.size(), deadline, code) !=
            Transfer::Done)
      return tcpError("rank 0 answered with an unexpected message");
    if (!sameProof(welcome, prove(config.secret, kWelcomeLabel, hello.nonce,
                                  challenge, hello.rank, hello.worldSize)))
      return notRankZero("its welcome does not prove it holds the world "
                         "secret");
    return world;
  }

  // Rank 0: listen, and admit every other rank that proves the secret.
  int listener = -1;
  std::string bindProblem = "no usable address";
  for (addrinfo *at = *found; at && listener < 0; at = at->ai_next) {
    int fd = ::socket(at->ai_family, at->ai_socktype, at->ai_protocol);
    if (fd < 0)
      continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, at->ai_addr, at->ai_addrlen) == 0 &&
        ::listen(fd, SOMAXCONN) == 0) {
      listener = fd;
      break;
    }
    bindProblem = errnoText(errno);
    ::close(fd);
  }
  if (listener < 0)
    return tcpError(
        llvm::formatv("rank 0 cannot listen on {0}: {1}", where, bindProblem));
  auto closeListener = llvm::make_scope_exit([&] { ::close(listener); });
  configureSocket(listener);
  Clock::time_point deadline = deadlineIn(config.timeoutSeconds);
  auto note = [&](const std::string &text) {
    if (config.note)
      config.note(text);
    else
      llvm::errs() << "note: data-parallel world (TCP): " << text << '\n';
  };
  // Every socket that proved the secret; on a refusal each is told why and
  // closed.
  std::vector<int> joined;
  auto refuse = [&](const std::string &message) -> llvm::Error {
    for (int fd : joined) {
      bool partial = false;
      sendMessage(fd, MessageType::Abort, 0, message.data(), message.size(),
                  deadlineIn(1), false, partial, code);
      ::close(fd);
    }
    world->sockets.assign(world->sockets.size(), -1);
    return tcpError(message);
  };

  /// A connection in its handshake: rank 0's challenge went out, the
  /// hello comes in.
  struct Pending {
    int fd = -1;
    /// Where it came from, for the notes.
    std::string peer;
    /// When it is dropped unless its hello is complete.
    Clock::time_point deadline;
    Nonce challenge{};
    /// The header and hello received so far.
    std::array<uint8_t, sizeof(Header) + sizeof(HelloPayload)> bytes{};
    size_t received = 0;
  };
  std::vector<Pending> pending;
  auto closePending = llvm::make_scope_exit([&] {
    for (const Pending &connection : pending)
      ::close(connection.fd);
  });
  // Why each dropped connection was dropped, for the timeout's error.
  std::vector<std::string> dropped;
  auto drop = [&](size_t index, const std::string &why) {
    std::string text = pending[index].peer + " " + why;
    note("rank 0 dropped the connection from " + pending[index].peer +
         ", which " + why);
    dropped.push_back(std::move(text));
    ::close(pending[index].fd);
    pending.erase(pending.begin() + ptrdiff_t(index));
  };
  std::string handshakeText = secondsText(config.handshakeSeconds);
  int missing = config.worldSize - 1;
  // Rank r's welcome at [r]: rank 0's proof over its nonce.
  std::vector<Proof> welcomes(size_t(config.worldSize));
  // Reads what connection \p index sent; drops it, or on a complete hello
  // that proves the secret moves it into the world. Fails when a peer that
  // holds the secret was launched wrong.
  auto serve = [&](size_t index) -> llvm::Error {
    Pending &connection = pending[index];
    size_t want = connection.received < sizeof(Header)
                      ? sizeof(Header)
                      : connection.bytes.size();
    ssize_t n =
        ::recv(connection.fd, connection.bytes.data() + connection.received,
               want - connection.received, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return llvm::Error::success();
    if (n <= 0) {
      drop(index,
           connection.received == 0
               ? "closed its connection without a hello"
               : llvm::formatv("closed its connection {0} bytes into its hello",
                               connection.received)
                     .str());
      return llvm::Error::success();
    }
    connection.received += size_t(n);
    Header header;
    std::memcpy(&header, connection.bytes.data(), sizeof header);
    if (connection.received == sizeof(Header) &&
        (header.magic != kMagic ||
         header.type != uint32_t(MessageType::Hello) ||
         header.bytes != sizeof(HelloPayload))) {
      drop(index,
           header.magic == kMagic && header.type == uint32_t(MessageType::Hello)
               ? "sent a hello without a proof of the world secret "
                 "(a gmopt-run of an older version?)"
               : "sent something that is not a gmopt hello");
      return llvm::Error::success();
    }
    if (connection.received != connection.bytes.size())
      return llvm::Error::success();
    HelloPayload hello;
    std::memcpy(&hello, connection.bytes.data() + sizeof(Header), sizeof hello);
    if (!sameProof(hello.proof,
                   prove(config.secret, kHelloLabel, connection.challenge,
                         hello.nonce, hello.rank, hello.worldSize))) {
      std::string reason = "its proof of the world secret does not match "
                           "rank 0's: launch every rank with the same " +
                           std::string(kWorldSecretVariable) + " or " +
                           kWorldSecretFileVariable;
      bool partial = false;
      sendMessage(connection.fd, MessageType::Refused, 0, reason.data(),
                  reason.size(), Clock::now(), false, partial, code);
      drop(index, llvm::formatv("claimed RANK={0} without the world secret "
                                "(a rank launched with another secret, or "
                                "not a rank of this world)",
                                hello.rank)
                      .str());
      return llvm::Error::success();
    }
    // A peer that holds the secret: a rank of this launch.
    Proof welcome = prove(config.secret, kWelcomeLabel, hello.nonce,
                          connection.challenge, hello.rank, hello.worldSize);
    int fd = connection.fd;
    pending.erase(pending.begin() + ptrdiff_t(index));
    joined.push_back(fd);
    if (hello.worldSize != config.worldSize)
      return refuse(llvm::formatv("rank {0} has WORLD_SIZE={1} but rank 0 "
                                  "has {2}: launch every rank with the same "
                                  "world size",
                                  hello.rank, hello.worldSize,
                                  config.worldSize));
    if (hello.rank < 1 || hello.rank >= config.worldSize)
      return refuse(llvm::formatv("a process joined as RANK={0}, outside 1.."
                                  "{1}",
                                  hello.rank, config.worldSize - 1));
    if (world->sockets[size_t(hello.rank)] >= 0)
      return refuse(
          llvm::formatv("two processes joined as RANK={0}", hello.rank));
    world->sockets[size_t(hello.rank)] = fd;
    welcomes[size_t(hello.rank)] = welcome;
    --missing;
    return llvm::Error::success();
  };

  while (missing > 0) {
    Clock::time_point now = Clock::now();
    if (now >= deadline) {
      llvm::SmallVector<int, 4> absent;
      for (int r = 1; r != config.worldSize; ++r)
        if (world->sockets[size_t(r)] < 0)
          absent.push_back(r);
      std::string message = llvm::formatv(
          "{0} did not join rank 0 at {1} within {2} s (WORLD_SIZE={3})",
          rankList(absent), where, secondsText(config.timeoutSeconds),
          config.worldSize);
      if (!dropped.empty()) {
        constexpr size_t kShown = 3;
        message += "; meanwhile rank 0 dropped " +
                   connectionCount(dropped.size()) + ": ";
        for (size_t i = 0; i != std::min(dropped.size(), kShown); ++i)
          message += (i ? "; " : "") + dropped[i];
        if (dropped.size() > kShown)
          message += llvm::formatv("; and {0} more", dropped.size() - kShown);
      }
      if (!pending.empty())
        message += "; " + connectionCount(pending.size()) +
                   " still in the handshake (from " + pending.front().peer +
                   (pending.size() > 1 ? ", ..." : "") + ")";
      return refuse(message);
    }
    // Handshakes past their own deadline.
    for (size_t i = pending.size(); i-- != 0;)
      if (now >= pending[i].deadline)
        drop(i, pending[i].received == 0
                    ? llvm::formatv("sent nothing within {0} s of "
                                    "connecting",
                                    handshakeText)
                          .str()
                    : llvm::formatv("sent {0} bytes of a hello, not all of "
                                    "it, within {1} s of connecting",
                                    pending[i].received, handshakeText)
                          .str());
    std::vector<pollfd> entries{{listener, POLLIN, 0}};
    Clock::time_point wake = deadline;
    for (const Pending &connection : pending) {
      entries.push_back({connection.fd, POLLIN, 0});
      wake = std::min(wake, connection.deadline);
    }
    if (::poll(entries.data(), entries.size(), millisecondsTo(wake)) <= 0)
      continue;
    // From the last, so that serving one (which may remove it) does not
    // move those still to serve.
    for (size_t i = pending.size(); i-- != 0;)
      if (entries[i + 1].revents & (POLLIN | POLLHUP | POLLERR))
        if (llvm::Error err = serve(i))
          return err;
    if (!(entries[0].revents & POLLIN))
      continue;
    // A bounded number per round, so that a flood of connections cannot
    // keep rank 0 from its deadlines.
    for (int round = 0; round != 16; ++round) {
      sockaddr_storage address{};
      socklen_t length = sizeof address;
      int fd =
          ::accept(listener, reinterpret_cast<sockaddr *>(&address), &length);
      if (fd < 0)
        break;
      configureSocket(fd);
      auto challenge = randomNonce();
      if (!challenge) {
        ::close(fd);
        return refuse(llvm::toString(challenge.takeError()));
      }
      Pending connection;
      connection.fd = fd;
      connection.peer = peerName(address, length);
      connection.deadline = deadlineIn(config.handshakeSeconds);
      connection.challenge = *challenge;
      pending.push_back(std::move(connection));
      if (pending.size() > kMaxPendingConnections)
        drop(0, llvm::formatv("was the oldest of more than {0} connections "
                              "in their handshake at once",
                              kMaxPendingConnections)
                    .str());
      // A fresh socket's buffer takes the 56 bytes at once.
      bool partial = false;
      if (sendMessage(fd, MessageType::Challenge, 0,
                      pending.back().challenge.data(),
                      pending.back().challenge.size(), Clock::now(), false,
                      partial, code) != Transfer::Done)
        drop(pending.size() - 1, "could not be sent rank 0's challenge");
    }
  }
  for (const Pending &connection : pending)
    note("rank 0 closed the connection from " + connection.peer +
         ": the world formed before it completed a handshake");
  for (int r = 1; r != config.worldSize; ++r) {
    bool partial = false;
    const Proof &welcome = welcomes[size_t(r)];
    if (sendMessage(world->sockets[size_t(r)], MessageType::Welcome, 0,
                    welcome.data(), welcome.size(), deadline, false, partial,
                    code) != Transfer::Done)
      return refuse(llvm::formatv("rank {0} went away while the world was "
                                  "forming",
                                  r));
  }
  return world;
}

TcpWorld::~TcpWorld() {
  for (int fd : sockets)
    if (fd >= 0)
      ::close(fd);
}

llvm::Error TcpWorld::exchange(const void *mine, size_t bytes, void *result,
                               size_t resultBytes, std::vector<uint8_t> *from,
                               llvm::StringRef what) {
  int code = 0;
  bool partial = false;
  auto fail = [&](const std::string &message) -> llvm::Error {
    brokenReason = message;
    return tcpError(message);
  };
  if (config.rank != 0) {
    int fd = sockets[0];
    Clock::time_point deadline =
        deadlineIn(config.timeoutSeconds + graceSeconds(config.timeoutSeconds));
    // Rank 0 may have stopped the run before this rank arrived: its abort
    // is read now, before a send to its closed socket resets the
    // connection and drops it.
    if (hasIncoming(fd)) {
      Header header;
      if (receiveAll(fd, &header, sizeof header, deadline, code) ==
              Transfer::Done &&
          header.magic == kMagic && header.type == uint32_t(MessageType::Abort))
        return fail("rank 0 stopped the run: " + readAbortReason(fd, header));
      return fail(llvm::formatv("rank 0 closed its connection before {0} (it "
                                "died or exited)",
                                what));
    }
    Transfer status = sendMessage(fd, MessageType::Data, sequence, mine, bytes,
                                  deadline, true, partial, code);
    if (partial)
      ::shutdown(fd, SHUT_WR); // an abort must not be read as payload
    if (status == Transfer::TimedOut)
      return fail(llvm::formatv("rank 0 did not take rank {0}'s part of {1} "
                                "within {2} s",
                                config.rank, what,
                                secondsText(config.timeoutSeconds)));
    if (status == Transfer::Closed || status == Transfer::Failed)
      return fail(llvm::formatv("rank 0 closed its connection during {0} (it "
                                "died or exited)",
                                what));
    // Done, or rank 0 spoke first (an abort) while this rank was sending.
    Header header;
    status = receiveAll(fd, &header, sizeof header, deadline, code);
    if (status == Transfer::TimedOut)
      return fail(llvm::formatv("rank 0 did not finish {0} within {1} s "
                                "(rank 0 hangs, or waits for another rank)",
                                what, secondsText(config.timeoutSeconds)));
    if (status != Transfer::Done || header.magic != kMagic)
      return fail(llvm::formatv("rank 0 closed its connection during {0} (it "
                                "died or exited)",
                                what));
    if (header.type == uint32_t(MessageType::Abort))
      return fail("rank 0 stopped the run: " + readAbortReason(fd, header));
    if (header.type != uint32_t(MessageType::Result) ||
        header.sequence != sequence || header.bytes != resultBytes)
      return fail(llvm::formatv("rank 0 answered {0} with another collective "
                                "(#{1}, {2} bytes): the ranks run different "
                                "models or steps",
                                what, header.sequence, header.bytes));
    if (receiveAll(fd, result, resultBytes, deadline, code) != Transfer::Done)
      return fail(
          llvm::formatv("rank 0 closed its connection during {0}", what));
    return llvm::Error::success();
  }

  // Rank 0: every other rank's part, in rank order, by one deadline.
  from->resize(size_t(config.worldSize - 1) * bytes);
  Clock::time_point deadline = deadlineIn(config.timeoutSeconds);
  for (int r = 1; r != config.worldSize; ++r) {
    int fd = sockets[size_t(r)];
    Header header;
    Transfer status = receiveAll(fd, &header, sizeof header, deadline, code);
    if (status == Transfer::TimedOut) {
      llvm::SmallVector<int, 4> absent{r};
      for (int later = r + 1; later != config.worldSize; ++later)
        if (!hasIncoming(sockets[size_t(later)]))
          absent.push_back(later);
      return fail(llvm::formatv("{0} did not reach {1} within {2} s (hung, "
                                "or far slower than rank 0)",
                                rankList(absent), what,
                                secondsText(config.timeoutSeconds)));
    }
    if (status != Transfer::Done || header.magic != kMagic)
      return fail(llvm::formatv("rank {0} closed its connection before {1} "
                                "(it died or exited)",
                                r, what));
    if (header.type == uint32_t(MessageType::Abort))
      return fail(llvm::formatv("rank {0} failed: {1}", r,
                                readAbortReason(fd, header)));
    if (header.type != uint32_t(MessageType::Data) ||
        header.sequence != sequence || header.bytes != bytes)
      return fail(llvm::formatv("rank {0} sent collective #{1} ({2} bytes) "
                                "where rank 0 runs {3} ({4} bytes): the ranks "
                                "run different models or steps",
                                r, header.sequence, header.bytes, what, bytes));
    status = receiveAll(fd, from->data() + size_t(r - 1) * bytes, bytes,
                        deadline, code);
    if (status == Transfer::TimedOut)
      return fail(llvm::formatv("rank {0} did not finish sending its part of "
                                "{1} within {2} s",
                                r, what, secondsText(config.timeoutSeconds)));
    if (status != Transfer::Done)
      return fail(llvm::formatv("rank {0} closed its connection during {1} "
                                "(it died or exited)",
                                r, what));
  }
  return llvm::Error::success();
}

llvm::Error TcpWorld::broadcastResult(const void *data, size_t bytes,
                                      llvm::StringRef what) {
  Clock::time_point deadline = deadlineIn(config.timeoutSeconds);
  for (int r = 1; r != config.worldSize; ++r) {
    int fd = sockets[size_t(r)];
    bool partial = false;
    int code = 0;
    Transfer status = sendMessage(fd, MessageType::Result, sequence, data,
                                  bytes, deadline, false, partial, code);
    if (partial)
      ::shutdown(fd, SHUT_WR);
    if (status != Transfer::Done) {
      brokenReason =
          llvm::formatv("rank {0} did not take the result of {1}{2}", r, what,
                        status == Transfer::TimedOut ? " in time"
                                                     : " (it died or exited)")
              .str();
      return tcpError(brokenReason);
    }
  }
  return llvm::Error::success();
}

llvm::Error TcpWorld::allReduceSumF32(float *data, size_t count,
                                      llvm::StringRef what) {
  if (!brokenReason.empty())
    return tcpError("the world failed earlier: " + brokenReason);
  ++sequence;
  if (config.worldSize == 1)
    return llvm::Error::success();
  size_t bytes = count * sizeof(float);
  std::vector<uint8_t> from;
  if (llvm::Error err = exchange(data, bytes, data, bytes, &from, what))
    return err;
  if (config.rank != 0)
    return llvm::Error::success();
  // Rank order, so every run adds in the same order.
  for (int r = 1; r != config.worldSize; ++r) {
    const uint8_t *part = from.data() + size_t(r - 1) * bytes;
    for (size_t k = 0; k != count; ++k) {
      float value;
      std::memcpy(&value, part + k * sizeof(float), sizeof value);
      data[k] += value;
    }
  }
  return broadcastResult(data, bytes, what);
}

llvm::Expected<std::vector<uint64_t>>
TcpWorld::allGatherU64(llvm::ArrayRef<uint64_t> mine, llvm::StringRef what) {
  if (!brokenReason.empty())
    return tcpError("the world failed earlier: " + brokenReason);
  ++sequence;
  std::vector<uint64_t> all(mine.size() * size_t(config.worldSize));
  size_t bytes = mine.size() * sizeof(uint64_t);
  std::vector<uint8_t> from;
  if (config.worldSize == 1) {
    llvm::copy(mine, all.begin());
    return all;
  }
  if (llvm::Error err =
          exchange(mine.data(), bytes, all.data(), all.size() * 8, &from, what))
    return err;
  if (config.rank != 0)
    return all;
  llvm::copy(mine, all.begin());
  if (bytes)
    std::memcpy(all.data() + mine.size(), from.data(), from.size());
  if (llvm::Error err = broadcastResult(all.data(), all.size() * 8, what))
    return err;
  return all;
}

void TcpWorld::abort(llvm::StringRef message) {
  if (brokenReason.empty())
    brokenReason = message.str();
  for (int fd : sockets) {
    if (fd < 0)
      continue;
    bool partial = false;
    int code = 0;
    sendMessage(fd, MessageType::Abort, sequence, message.data(),
                message.size(), deadlineIn(1), false, partial, code);
  }
}
