//===- train_gpt.cpp - examples/train_gpt.py's loop in C++ ----------------===//
//
// Trains testdata/gpt_tiny (ONNX Runtime's artifacts of a 2-layer GPT:
// vocabulary 512, sequence 64, batch 4) on the bytes of the repository's
// C++ sources through gmopt::runtime's TrainingSession, as a C++ user of
// ONNX Runtime's training API would: batches from a memory-mapped token file,
// a cosine learning rate with warm-up, an evaluation every --eval-every
// steps, a checkpoint (parameters, AdamW state, the step, the loss history)
// every --checkpoint-every steps, a resume that continues bit-identically,
// and a progress line. The losses go to OUT/history.csv.
//
// Usage: train_gpt --out DIR --repo REPO [--steps N] [--resume CHECKPOINT_DIR]
//        [--eval-every N] [--checkpoint-every N] [--threads N] [--quiet]
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/TrainingSession.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace gmopt;

namespace {

constexpr int64_t kBatch = 4, kSeq = 64;

struct Options {
  std::string out, repo, resume;
  int steps = 300, warmup = 20, evalEvery = 50, evalBatches = 4;
  int checkpointEvery = 100;
  unsigned threads = 0;
  double lr = 3e-3;
  bool quiet = false;
};

int fail(const llvm::Twine &message) {
  llvm::errs() << "train_gpt: error: " << message << "\n";
  return 1;
}

int fail(llvm::Error err) { return fail(llvm::toString(std::move(err))); }

bool parseOptions(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char * {
      return i + 1 < argc ? argv[++i] : nullptr;
    };
    auto number = [&](int &target) {
      const char *v = value();
      target = v ? std::atoi(v) : 0;
      return target > 0;
    };
    bool ok = true;
    if (arg == "--out" || arg == "--repo" || arg == "--resume") {
      const char *v = value();
      ok = v != nullptr;
      if (ok)
        (arg == "--out" ? o.out : arg == "--repo" ? o.repo : o.resume) = v;
    } else if (arg == "--steps") {
      ok = number(o.steps);
    } else if (arg == "--warmup") {
      ok = number(o.warmup);
    } else if (arg == "--eval-every") {
      ok = number(o.evalEvery);
    } else if (arg == "--checkpoint-every") {
      ok = number(o.checkpointEvery);
    } else if (arg == "--threads") {
      int threads = 0;
      ok = number(threads);
      o.threads = threads;
    } else if (arg == "--quiet") {
      o.quiet = true;
    } else {
      ok = false;
    }
    if (!ok) {
      llvm::errs() << "train_gpt: bad argument '" << arg << "'\n";
      return false;
    }
  }
  if (o.out.empty() || o.repo.empty()) {
    llvm::errs() << "usage: train_gpt --out DIR --repo REPO [--steps N] "
                    "[--resume CHECKPOINT_DIR] [--eval-every N] "
                    "[--checkpoint-every N] [--threads N] [--quiet]\n";
    return false;
  }
  return true;
}

/// Writes the bytes of REPO's C++ sources (ir, passes, backend, tools; by
/// sorted path) as little-endian uint16 tokens to \p path.
llvm::Error writeTokens(const std::string &repo, const std::string &path) {
  std::vector<std::string> files;
  for (const char *top : {"ir", "passes", "backend", "tools"}) {
    std::error_code ec;
    llvm::SmallString<256> root(repo);
    llvm::sys::path::append(root, top);
    for (llvm::sys::fs::recursive_directory_iterator it(root, ec), end;
         it != end && !ec; it.increment(ec)) {
      llvm::StringRef name = it->path();
      if (name.ends_with(".cpp") || name.ends_with(".h"))
        files.push_back(name.str());
    }
    if (ec)
      return llvm::createStringError(ec, "cannot list " + std::string(root));
  }
  std::sort(files.begin(), files.end());
  std::ofstream os(path, std::ios::binary);
  for (const std::string &file : files) {
    auto buffer = llvm::MemoryBuffer::getFile(file);
    if (!buffer)
      return llvm::createStringError(buffer.getError(),
                                     ("cannot read " + file).c_str());
    for (unsigned char byte : (*buffer)->getBuffer()) {
      uint16_t token = byte;
      os.write(reinterpret_cast<const char *>(&token), sizeof(token));
    }
  }
  if (!os)
    return llvm::createStringError(std::make_error_code(std::errc::io_error),
                                   "cannot write " + path);
  return llvm::Error::success();
}

/// splitmix64: the batch offsets of (seed, split, step), so a resumed run
/// draws the batches the uninterrupted run would have.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Batch \p step of the train split (\p eval false: the first nine tenths)
/// or the eval split: input_ids [4, 64] and the next tokens as labels [256].
std::vector<HostTensor> getBatch(llvm::ArrayRef<uint16_t> tokens, bool eval,
                                 uint64_t step) {
  int64_t cut = int64_t(tokens.size()) * 9 / 10;
  int64_t lo = eval ? cut : 0, hi = eval ? int64_t(tokens.size()) : cut;
  std::vector<int64_t> ids, labels;
  uint64_t state = mix((eval ? 1ULL << 62 : 0) ^ step);
  for (int64_t b = 0; b < kBatch; ++b) {
    state = mix(state);
    int64_t start = lo + int64_t(state % uint64_t(hi - lo - kSeq - 1));
    for (int64_t t = 0; t < kSeq; ++t) {
      ids.push_back(tokens[start + t]);
      labels.push_back(tokens[start + t + 1]);
    }
  }
  return {HostTensor::fromValues(DType::I64, {kBatch, kSeq},
                                 llvm::ArrayRef<int64_t>(ids)),
          HostTensor::fromValues(DType::I64, {kBatch * kSeq},
                                 llvm::ArrayRef<int64_t>(labels))};
}

double cosineLr(int step, const Options &o) {
  if (step < o.warmup)
    return o.lr * (step + 1) / o.warmup;
  double progress =
      std::min(1.0, double(step - o.warmup) / std::max(1, o.steps - o.warmup));
  double floor = o.lr / 10;
  return floor + 0.5 * (o.lr - floor) * (1.0 + std::cos(M_PI * progress));
}

/// One history line: `train,STEP,LOSS` or `eval,STEP,LOSS`, the loss with
/// every digit a float needs to round-trip.
std::string historyLine(const char *split, int step, double loss) {
  std::string line;
  llvm::raw_string_ostream os(line);
  os << split << "," << step << "," << llvm::format("%.9g", loss) << "\n";
  return line;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  if (!parseOptions(argc, argv, o))
    return 1;
  if (std::error_code ec = llvm::sys::fs::create_directories(o.out))
    return fail("cannot create " + o.out + ": " + ec.message());
  std::string tokensPath = o.out + "/tokens.u16";
  if (!llvm::sys::fs::exists(tokensPath))
    if (llvm::Error err = writeTokens(o.repo, tokensPath))
      return fail(std::move(err));
  // Memory-mapped: the token file is never read into the process whole.
  auto mapped = llvm::MemoryBuffer::getFile(tokensPath, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!mapped)
    return fail("cannot map " + tokensPath);
  llvm::ArrayRef<uint16_t> tokens(
      reinterpret_cast<const uint16_t *>((*mapped)->getBufferStart()),
      (*mapped)->getBufferSize() / sizeof(uint16_t));

  std::string artifacts = o.repo + "/testdata/gpt_tiny";
  auto state = CheckpointState::load(
      o.resume.empty() ? artifacts + "/checkpoint" : o.resume + "/checkpoint");
  if (!state)
    return fail(state.takeError());
  int start = 0;
  std::string history;
  if (!o.resume.empty()) {
    auto step = state->getProperty("step");
    if (!step)
      return fail(o.resume + " was not written by train_gpt (no 'step' " +
                  "property): " + llvm::toString(step.takeError()));
    start = int(std::get<int64_t>(*step));
    auto previous = llvm::MemoryBuffer::getFile(o.resume + "/history.csv");
    if (!previous)
      return fail("cannot read " + o.resume + "/history.csv");
    history = (*previous)->getBuffer().str();
  }
  TrainingSessionOptions options;
  options.threads = o.threads;
  auto session = TrainingSession::open(
      TrainingArtifacts::fromDirectory(artifacts), *state, options);
  if (!session)
    return fail(session.takeError());
  TrainingSession &s = **session;

  auto began = std::chrono::steady_clock::now();
  double first = NAN, last = NAN;
  for (int step = start; step < o.steps; ++step) {
    double lr = cosineLr(step, o);
    s.setLearningRate(float(lr));
    s.lazyResetGrad();
    auto outputs = s.trainStep(getBatch(tokens, false, step));
    if (!outputs)
      return fail(outputs.takeError());
    if (llvm::Error err = s.optimizerStep())
      return fail(std::move(err));
    double loss = outputs->front().getElementAsDouble(0);
    first = std::isnan(first) ? loss : first;
    last = loss;
    int done = step + 1;
    history += historyLine("train", done, loss);
    if (done % o.evalEvery == 0 || done == o.steps) {
      double sum = 0;
      for (int b = 0; b < o.evalBatches; ++b) {
        auto eval = s.evalStep(getBatch(tokens, true, b));
        if (!eval)
          return fail(eval.takeError());
        sum += eval->front().getElementAsDouble(0);
      }
      history += historyLine("eval", done, sum / o.evalBatches);
    }
    if (!o.quiet) {
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - began)
                           .count();
      llvm::outs() << llvm::format(
          "\rstep %5d/%d  loss %.4f  lr %.2e  %7.0f tok/s", done, o.steps, loss,
          lr, (done - start) * kBatch * kSeq / seconds);
      llvm::outs().flush();
    }
    if (done % o.checkpointEvery == 0 || done == o.steps) {
      std::string dir = o.out + "/checkpoint_" + std::to_string(done);
      if (std::error_code ec = llvm::sys::fs::create_directories(dir))
        return fail("cannot create " + dir + ": " + ec.message());
      s.getCheckpointState().addProperty("step", int64_t(done));
      if (llvm::Error err = s.saveCheckpoint(dir + "/checkpoint",
                                             /*includeOptimizerState=*/true))
        return fail(std::move(err));
      std::ofstream(dir + "/history.csv") << history;
    }
  }
  if (!o.quiet)
    llvm::outs() << "\n";
  std::ofstream(o.out + "/history.csv") << history;
  llvm::outs() << llvm::format("train loss %.4f -> %.4f; history %s\n", first,
                               last, (o.out + "/history.csv").c_str());
  return 0;
}
