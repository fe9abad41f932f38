//===- TcpWorld.h - gmopt's own TCP data-parallel world ---------*- C++ -*-===//
//
// Where no MPI launcher started the ranks (torchrun-style launches: RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment), gmopt-run forms
// its data-parallel world over TCP sockets instead. Debian's Open MPI 4.1
// cannot do it: processes it did not launch are singletons, and joining
// singletons with MPI_Comm_connect/MPI_Comm_accept fails with
// MPI_ERR_INTERN (and with ompi-server as their server, MPI_Init itself
// fails), so the environment cannot simply bootstrap an MPI world.
//
// The world is a star around rank 0: every other rank connects to
// MASTER_ADDR:MASTER_PORT, says its rank and world size, and each
// collective sends its contribution to rank 0, which adds them in rank
// order and sends the result back. That is (N - 1) times the bucket through
// rank 0 each way - meant for the small CPU worlds such launches are for;
// large worlds use mpirun (MPI) - but rank 0 sees every arrival, so a rank
// that hangs or dies is named exactly, and every rank gets bit-identical
// results. All I/O is non-blocking with a deadline: nothing here waits
// forever. A failing rank tells the others why (an abort message) before
// it exits.
//
// Anything that can reach the port can connect, so rank 0 serves every
// connection at once (one poll() over the listener and the connections
// still in their handshake), gives each its own handshake deadline (5 s by
// default) and drops, with a note, one that stalls, sends garbage or fails
// the handshake; no connection can hold up another. A peer joins only by
// proving it holds the world secret every rank was launched with
// (readWorldSecret): rank 0 sends each connection a fresh random nonce,
// the peer answers with its rank, world size, a nonce of its own and
// HMAC-SHA-256(secret, both nonces, rank, world size), and rank 0's welcome
// carries the HMAC over the peer's nonce, so each side knows the other
// holds the secret and the secret never crosses the wire. The secret
// decides who joins; the collectives' traffic after that is neither
// encrypted nor authenticated (run the world on a network you trust).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_TCPWORLD_H
#define GMOPT_BACKEND_CPU_TCPWORLD_H

#include "backend/cpu/WorldSecret.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gmopt {
namespace cpu {

/// Seconds rank 0 gives a new connection to complete its handshake.
constexpr double kDefaultHandshakeSeconds = 5;
/// Longest wait any deadline stands for (about 31 years): longer
/// timeouts, infinity included, are cut to it so that no deadline
/// overflows the clock.
constexpr double kMaxTimeoutSeconds = 1e9;

/// Where and who: the torchrun-style launch of one rank.
struct TcpWorldConfig {
  /// This process's rank, 0 <= rank < worldSize.
  int rank = 0;
  /// The number of ranks.
  int worldSize = 1;
  /// Rank 0's address (a host name or a numeric address).
  std::string masterAddress = "127.0.0.1";
  /// Rank 0's listening port.
  unsigned masterPort = 29500;
  /// Seconds the rendezvous and each collective may wait for the other
  /// ranks before failing with the ranks that did not come. Values beyond
  /// kMaxTimeoutSeconds (infinity too) wait that long.
  double timeoutSeconds = 300;
  /// The secret every rank of the world shares (readWorldSecret reads it
  /// from the environment); needed when worldSize > 1, at least
  /// kMinWorldSecretLength characters.
  std::string secret;
  /// Rank 0: seconds a new connection has to complete its handshake before
  /// it is dropped (each connection on its own clock).
  double handshakeSeconds = kDefaultHandshakeSeconds;
  /// Rank 0: receives a note for every connection it drops (a stranger, a
  /// stalled or refused peer); unset, the notes go to stderr.
  std::function<void(const std::string &)> note;
};

/// One rank's connections to the TCP world.
class TcpWorld {
public:
  /// Forms the world: rank 0 listens and admits every other rank that
  /// proves it holds the secret, the others connect (retrying until rank 0
  /// listens). Fails, naming the ranks, when some do not join within the
  /// timeout (with what rank 0 dropped meanwhile), two that hold the secret
  /// claim one rank, or their world sizes differ; a rank fails at once when
  /// rank 0 refuses its proof, or when what answers at the port does not
  /// prove it holds the secret.
  static llvm::Expected<std::unique_ptr<TcpWorld>>
  connect(const TcpWorldConfig &config);
  ~TcpWorld();
  TcpWorld(const TcpWorld &) = delete;
  TcpWorld &operator=(const TcpWorld &) = delete;

  /// This rank.
  int getRank() const { return config.rank; }
  /// The number of ranks.
  int getWorldSize() const { return config.worldSize; }
  /// Changes the per-collective timeout.
  void setTimeout(double seconds) { config.timeoutSeconds = seconds; }

  /// Sums \p count floats at \p data over the ranks, in place (rank 0 adds
  /// them in rank order). \p what names the collective in errors.
  llvm::Error allReduceSumF32(float *data, size_t count, llvm::StringRef what);
  /// Every rank's \p mine (all of one length), concatenated in rank order.
  llvm::Expected<std::vector<uint64_t>>
  allGatherU64(llvm::ArrayRef<uint64_t> mine, llvm::StringRef what);
  /// Tells the connected ranks that this one fails with \p message (best
  /// effort, never blocks for long); later collectives fail at once.
  void abort(llvm::StringRef message);

private:
  explicit TcpWorld(TcpWorldConfig config) : config(std::move(config)) {}

  /// Rank 0: receives one message of \p bytes from every other rank into
  /// \p from (rank r's at [(r - 1) * bytes]) and then sends every rank
  /// \p reply(...) - the collective's result. Other ranks: sends \p mine
  /// and receives \p resultBytes into \p result.
  llvm::Error exchange(const void *mine, size_t bytes, void *result,
                       size_t resultBytes, std::vector<uint8_t> *from,
                       llvm::StringRef what);
  /// Rank 0 only: sends \p bytes at \p data to every other rank.
  llvm::Error broadcastResult(const void *data, size_t bytes,
                              llvm::StringRef what);

  TcpWorldConfig config;
  /// Rank 0: socket of rank r at [r] (-1 at [0]); other ranks: [0] is the
  /// socket to rank 0.
  std::vector<int> sockets;
  /// Collectives run so far (names each in errors, checks their order).
  uint64_t sequence = 0;
  /// Set once a collective failed or abort() ran: the world is unusable.
  std::string brokenReason;
};

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_TCPWORLD_H
