//===- MatMulKernels.cpp - MatMul, Gemm, FusedMatMul and Einsum -----------===//
//
// Matrix products on top of Blas.h. MatMul follows numpy (1-D operands are
// promoted and their dimension dropped again; batch dimensions broadcast);
// com.microsoft FusedMatMul / TransposeMatMul add alpha, transposes of the
// last two dimensions and ONNX Runtime's transBatch permutations; Gemm adds
// alpha, beta and a broadcast C. A batched product whose right operand has
// no batch dimensions folds the batch into one large GEMM. Einsum reads its
// equation's EinsumBinding (ir/ops/EinsumSpec.h) and contracts its
// operands pairwise: each pair is permuted to [batch, free, contracted]
// x [batch, contracted, free] and multiplied with batched GEMM, labels no
// later operand or the output needs are summed away first, in float32 or,
// for float64 operands, in float64. A node's attributes (transposes,
// alpha, beta; Einsum's parsed equation) are decoded once, at prepare, by
// the decode its workspace function reads too.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Blas.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "ir/ops/EinsumSpec.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

//===----------------------------------------------------------------------===//
// Prepared attributes
//===----------------------------------------------------------------------===//

/// A Gemm, FusedMatMul or TransposeMatMul node's attributes, decoded once
/// (plain MatMul has none: the defaults).
struct ProductAttrs {
  bool transA = false, transB = false;
  /// ONNX Runtime's transBatchA/B (FusedMatMul, TransposeMatMul).
  bool transBatchA = false, transBatchB = false;
  double alpha = 1, beta = 1;
};

/// Decodes a product node: what its kernel reads at launch and its
/// workspace function at plan time.
ProductAttrs decodeProduct(const Node &node) {
  ProductAttrs attrs;
  attrs.transA = node.getIntAttr("transA", 0) != 0;
  attrs.transB = node.getIntAttr("transB", 0) != 0;
  attrs.transBatchA = node.getIntAttr("transBatchA", 0) != 0;
  attrs.transBatchB = node.getIntAttr("transBatchB", 0) != 0;
  attrs.alpha = node.getFloatAttr("alpha", 1.0f);
  attrs.beta = node.getFloatAttr("beta", 1.0f);
  return attrs;
}

/// The element type of \p value as the node binds it (Undefined when
/// absent or unknown).
DType boundDType(const Value *value) {
  return value ? value->getType().getDType() : DType::Undefined;
}

/// Errors, at prepare, for a product whose bound operand and result types
/// its kernel refuses at launch: types that differ (\p mismatch is the
/// launch's message), or one the products do not compute in (f16/bf16 go
/// through fp32 blocks).
llvm::Error checkProductTypes(const Node &node, llvm::StringRef mismatch) {
  DType type = boundDType(node.getOperand(0));
  if (type == DType::Undefined)
    return llvm::Error::success();
  auto differs = [&](const Value *value) {
    DType other = boundDType(value);
    return other != DType::Undefined && other != type;
  };
  if (llvm::any_of(node.getOperands(), differs) ||
      llvm::any_of(node.getResults(), differs))
    return prepareError(node, mismatch);
  if (type != DType::F32 && type != DType::F64 && type != DType::I64 &&
      type != DType::I32 && !isHalfType(type))
    return prepareError(node, "unsupported element type " + dtypeName(type) +
                                  " of input");
  return llvm::Error::success();
}

/// Prepares MatMul, FusedMatMul or TransposeMatMul (Gemm when \p Gemm).
template <bool Gemm>
llvm::Expected<std::unique_ptr<KernelState>> prepareProduct(const Node &node) {
  if (llvm::Error err = checkProductTypes(
          node, Gemm ? "A, B, C and Y must have one element type"
                     : "A, B and Y must have one element type"))
    return err;
  return makeKernelState(decodeProduct(node));
}

/// An Einsum node's equation, parsed once.
struct EinsumState {
  ops::EinsumSpec spec;
};

/// Decodes an Einsum node (its kernel's state and its workspace function's
/// dry run): an equation that does not parse fails here.
llvm::Expected<EinsumState> decodeEinsum(const Node &node) {
  auto spec = ops::EinsumSpec::parse(node.getStringAttr("equation", ""));
  if (!spec)
    return prepareError(node, llvm::toString(spec.takeError()));
  return EinsumState{std::move(*spec)};
}

/// Prepares an Einsum: its equation, and the bound types of its operands,
/// which it computes in float32 (f16/bf16 staged) or float64, one type for
/// all.
llvm::Expected<std::unique_ptr<KernelState>> prepareEinsum(const Node &node) {
  std::optional<DType> computed;
  for (const Value *operand : node.getOperands()) {
    DType type = boundDType(operand);
    if (type == DType::Undefined)
      continue;
    if (type != DType::F32 && type != DType::F64 && !isHalfType(type))
      return prepareError(node, "unsupported element type " + dtypeName(type) +
                                    " of input");
    if (computed && *computed != stagedDType(type))
      return prepareError(node, "operands must have one element type");
    computed = stagedDType(type);
  }
  auto state = decodeEinsum(node);
  if (!state)
    return state.takeError();
  return makeKernelState(std::move(*state));
}

//===----------------------------------------------------------------------===//
// Batched matrix product
//===----------------------------------------------------------------------===//

/// A broadcast batch of C[b] = alpha * op(A[b]) * op(B[b]).
struct BatchedProduct {
  int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  /// Broadcast batch shape of the output.
  llvm::SmallVector<int64_t, 4> batchShape;
  /// Per batch dimension, the matrix stride of A and B (0 if broadcast).
  llvm::SmallVector<int64_t, 4> aStrides, bStrides;
};

/// Whether \p product folds into one [batch*M, K] x [K, N] GEMM: B shared
/// across the batch, A dense over it and not transposed.
bool foldsBatch(const BatchedProduct &product) {
  bool bShared =
      llvm::all_of(product.bStrides, [](int64_t s) { return s == 0; });
  bool aDense = true;
  for (unsigned d = 0; d < product.aStrides.size(); ++d)
    aDense &=
        product.aStrides[d] ==
        cpu::product(
            llvm::ArrayRef<int64_t>(product.batchShape).drop_front(d + 1));
  return bShared && aDense && !product.transA;
}

/// Runs \p product on contiguous A, B and C; C is [batch..., M, N].
template <typename T>
void runBatched(unsigned numThreads, const BatchedProduct &product, T alpha,
                const T *a, const T *b, T *c) {
  int64_t m = product.m, n = product.n, k = product.k;
  int64_t lda = product.transA ? m : k;
  int64_t ldb = product.transB ? k : n;
  int64_t batch = cpu::product(product.batchShape);
  if (foldsBatch(product)) {
    // [batch*M, K] x [K, N]: one GEMM.
    gemm<T>(numThreads, false, product.transB, batch * m, n, k, alpha, a, k, b,
            ldb, T(0), c, n);
    return;
  }
  GemmShape shape{product.transA, product.transB, m, n, k, lda, ldb, n};
  unsigned rank = product.batchShape.size();
  batchedGemm<T>(numThreads, shape, batch, alpha, T(0), [&](int64_t i) {
    // Matrix offsets of A and B for output matrix i (broadcast dims skip).
    int64_t aOffset = 0, bOffset = 0, rest = i;
    for (int d = static_cast<int>(rank) - 1; d >= 0; --d) {
      int64_t coord = rest % product.batchShape[d];
      rest /= product.batchShape[d];
      aOffset += coord * product.aStrides[d];
      bOffset += coord * product.bStrides[d];
    }
    return std::make_tuple(a + aOffset * m * k, b + bOffset * k * n,
                           c + i * m * n);
  });
}

/// Plans MatMul-style broadcasting of A [..., M, K] and B [..., K, N] (with
/// transposes applied) and computes the output shape; an error message
/// instead when the shapes do not multiply.
std::optional<BatchedProduct>
planProduct(llvm::ArrayRef<int64_t> aShape, llvm::ArrayRef<int64_t> bShape,
            bool transA, bool transB, llvm::SmallVectorImpl<int64_t> &outShape,
            std::string &error) {
  if (aShape.empty() || bShape.empty()) {
    error = "MatMul operands must have rank >= 1";
    return std::nullopt;
  }
  BatchedProduct product;
  bool aVector = aShape.size() == 1, bVector = bShape.size() == 1;
  llvm::SmallVector<int64_t, 6> a(aShape.begin(), aShape.end());
  llvm::SmallVector<int64_t, 6> b(bShape.begin(), bShape.end());
  if (aVector) {
    a.insert(a.begin(), 1);
    transA = false;
  }
  if (bVector) {
    b.push_back(1);
    transB = false;
  }
  int64_t aRows = a[a.size() - 2], aCols = a.back();
  int64_t bRows = b[b.size() - 2], bCols = b.back();
  product.transA = transA;
  product.transB = transB;
  product.m = transA ? aCols : aRows;
  product.k = transA ? aRows : aCols;
  int64_t kB = transB ? bCols : bRows;
  product.n = transB ? bRows : bCols;
  if (product.k != kB) {
    error = "inner dimensions differ: " + shapeString(aShape) +
            (transA ? "^T" : "") + " x " + shapeString(bShape) +
            (transB ? "^T" : "");
    return std::nullopt;
  }
  llvm::ArrayRef<int64_t> aBatch = llvm::ArrayRef<int64_t>(a).drop_back(2);
  llvm::ArrayRef<int64_t> bBatch = llvm::ArrayRef<int64_t>(b).drop_back(2);
  llvm::SmallVector<int64_t, 4> batch;
  if (!broadcastShapes(aBatch, bBatch, batch)) {
    error = "batch dimensions " + shapeString(aBatch) + " and " +
            shapeString(bBatch) + " do not broadcast";
    return std::nullopt;
  }
  product.batchShape.assign(batch.begin(), batch.end());
  auto batchStrides = [&](llvm::ArrayRef<int64_t> shape) {
    llvm::SmallVector<int64_t, 4> strides(batch.size(), 0);
    int64_t stride = 1;
    for (unsigned j = 0; j < shape.size(); ++j) {
      unsigned d = batch.size() - 1 - j;
      int64_t extent = shape[shape.size() - 1 - j];
      strides[d] = extent == 1 ? 0 : stride;
      stride *= extent;
    }
    return strides;
  };
  product.aStrides = batchStrides(aBatch);
  product.bStrides = batchStrides(bBatch);
  outShape.assign(batch.begin(), batch.end());
  if (!aVector)
    outShape.push_back(product.m);
  if (!bVector)
    outShape.push_back(product.n);
  if (!fitsBlasInt(product.m, product.n, product.k)) {
    error = "matrix extents exceed 32-bit BLAS limits";
    return std::nullopt;
  }
  return product;
}

llvm::Expected<BatchedProduct>
planMatMul(const KernelCall &call, llvm::ArrayRef<int64_t> aShape,
           llvm::ArrayRef<int64_t> bShape, bool transA, bool transB,
           llvm::SmallVectorImpl<int64_t> &outShape) {
  std::string error;
  std::optional<BatchedProduct> product =
      planProduct(aShape, bShape, transA, transB, outShape, error);
  if (!product)
    return call.error(error);
  return *product;
}

//===----------------------------------------------------------------------===//
// 16-bit products in bounded fp32 blocks
//===----------------------------------------------------------------------===//

/// f16/bf16 products compute in fp32 (BLAS has no 16-bit GEMM), but
/// widening whole operands and the whole result would reserve an fp32 copy
/// of each: a GPT-2 LM head's [8192, 50257] logits staged in fp32 are 1.6
/// GiB of scratch, more than amp saves on them. So the product runs block
/// by block: per output matrix, panels of op(B)'s columns and blocks of
/// op(A)'s rows are widened into fp32 scratch of at most
/// kHalfBlockElements each, multiplied, and the fp32 block of C rounded
/// into the 16-bit result. The contraction is never split, so each element
/// is the same fp32 dot product a whole-tensor staging computes.
constexpr int64_t kHalfBlockElements = int64_t(1) << 21;

/// How a 16-bit product is blocked: output matrices of m rows (a batch
/// whose B is shared folds into one matrix of batch*M rows), blocks of mb
/// rows, panels of nb columns.
struct HalfBlocking {
  bool folded = false;
  int64_t m = 0, mb = 0, nb = 0;
};

HalfBlocking planHalfBlocks(const BatchedProduct &product) {
  HalfBlocking blocks;
  blocks.folded = foldsBatch(product);
  blocks.m =
      blocks.folded ? product.m * cpu::product(product.batchShape) : product.m;
  int64_t k = std::max<int64_t>(product.k, 1);
  int64_t rowsPerBlock = std::max<int64_t>(kHalfBlockElements / k, 1);
  blocks.nb = std::max<int64_t>(std::min(product.n, rowsPerBlock), 1);
  int64_t byColumns = std::max<int64_t>(kHalfBlockElements / blocks.nb, 1);
  blocks.mb =
      std::max<int64_t>(std::min({blocks.m, rowsPerBlock, byColumns}), 1);
  return blocks;
}

/// The scratch of a 16-bit product, in allocation order: the block of
/// op(A), the panel of op(B), the block of C.
uint64_t halfProductScratch(const BatchedProduct &product) {
  HalfBlocking blocks = planHalfBlocks(product);
  uint64_t bytes = scratchBytes(DType::F32, mulCount(blocks.mb, product.k));
  bytes = addScratch(bytes,
                     scratchBytes(DType::F32, mulCount(product.k, blocks.nb)));
  return addScratch(bytes,
                    scratchBytes(DType::F32, mulCount(blocks.mb, blocks.nb)));
}

/// C = alpha * op(A) * op(B) + beta * C for f16/bf16 A, B and C (one
/// element type), in the blocks planHalfBlocks chooses (C is read only when
/// beta is nonzero).
llvm::Error runHalfProduct(KernelCall &call, const BatchedProduct &product,
                           float alpha, const TensorView &aView,
                           const TensorView &bView, const TensorView &cView,
                           float beta = 0) {
  DType type = cView.getDType();
  unsigned threads = call.getNumThreads();
  HalfBlocking blocks = planHalfBlocks(product);
  int64_t n = product.n, k = product.k, m = blocks.m;
  auto aBlock = call.getContext().allocateScratch(DType::F32, {blocks.mb, k});
  if (!aBlock)
    return aBlock.takeError();
  auto bPanel = call.getContext().allocateScratch(DType::F32, {k, blocks.nb});
  if (!bPanel)
    return bPanel.takeError();
  auto cBlock =
      call.getContext().allocateScratch(DType::F32, {blocks.mb, blocks.nb});
  if (!cBlock)
    return cBlock.takeError();
  float *aFloat = aBlock->getView().getDataAs<float>();
  float *bFloat = bPanel->getView().getDataAs<float>();
  float *cFloat = cBlock->getView().getDataAs<float>();
  const uint16_t *a = aView.getDataAs<uint16_t>();
  const uint16_t *b = bView.getDataAs<uint16_t>();
  uint16_t *c = cView.getDataAs<uint16_t>();
  int64_t matrices = blocks.folded ? 1 : cpu::product(product.batchShape);
  unsigned rank = product.batchShape.size();
  for (int64_t i = 0; i < matrices; ++i) {
    int64_t aOffset = 0, bOffset = 0, rest = i;
    for (int d = static_cast<int>(rank) - 1; d >= 0 && !blocks.folded; --d) {
      int64_t coord = rest % product.batchShape[d];
      rest /= product.batchShape[d];
      aOffset += coord * product.aStrides[d];
      bOffset += coord * product.bStrides[d];
    }
    const uint16_t *aMatrix = a + aOffset * product.m * k;
    const uint16_t *bMatrix = b + bOffset * k * n;
    uint16_t *cMatrix = c + i * m * n;
    for (int64_t n0 = 0; n0 < n; n0 += blocks.nb) {
      int64_t nb = std::min(blocks.nb, n - n0);
      // op(B)'s columns n0..n0+nb: B [K, N] gives K rows of nb; B [N, K]
      // (transB) gives nb rows of K.
      if (product.transB)
        widenRows(type, bMatrix + n0 * k, nb, k, k, bFloat, threads);
      else
        widenRows(type, bMatrix + n0, k, nb, n, bFloat, threads);
      for (int64_t m0 = 0; m0 < m; m0 += blocks.mb) {
        int64_t mb = std::min(blocks.mb, m - m0);
        // op(A)'s rows m0..m0+mb: A [M, K] gives mb rows of K; A [K, M]
        // (transA) gives K rows of mb.
        if (product.transA)
          widenRows(type, aMatrix + m0, k, mb, m, aFloat, threads);
        else
          widenRows(type, aMatrix + m0 * k, mb, k, k, aFloat, threads);
        if (beta != 0)
          widenRows(type, cMatrix + m0 * n + n0, mb, nb, n, cFloat, threads);
        gemm<float>(threads, product.transA, product.transB, mb, nb, k, alpha,
                    aFloat, product.transA ? mb : k, bFloat,
                    product.transB ? k : nb, beta, cFloat, nb);
        narrowRows(cFloat, mb, nb, type, cMatrix + m0 * n + n0, n, threads);
      }
    }
  }
  return llvm::Error::success();
}

/// ONNX Runtime's transBatch: moves dimension 0 to just before the last.
llvm::Expected<std::optional<TensorBuffer>>
transposeBatch(const KernelCall &call, const TensorView &view) {
  unsigned rank = view.getRank();
  if (rank < 3)
    return std::optional<TensorBuffer>();
  llvm::SmallVector<unsigned, 6> perm;
  llvm::SmallVector<int64_t, 6> shape;
  for (unsigned d = 1; d + 1 < rank; ++d)
    perm.push_back(d);
  perm.push_back(0);
  perm.push_back(rank - 1);
  for (unsigned d : perm)
    shape.push_back(view.getDim(d));
  auto buffer = call.getContext().allocateScratch(view.getDType(), shape);
  if (!buffer)
    return buffer.takeError();
  transposeInto(view, buffer->getView(), perm, call.getNumThreads());
  return std::optional<TensorBuffer>(std::move(*buffer));
}

/// MatMul, and FusedMatMul/TransposeMatMul when Fused.
template <bool Fused> llvm::Error matMulKernel(KernelCall &call) {
  const TensorView *a = call.in(0), *b = call.in(1);
  const TensorView &out = *call.out(0);
  if (a->getDType() != b->getDType() || out.getDType() != a->getDType())
    return call.error("A, B and Y must have one element type");
  bool transA = false, transB = false;
  double alpha = 1;
  std::optional<TensorBuffer> aCopy, bCopy;
  if (Fused) {
    const auto &attrs = call.getState<ProductAttrs>();
    transA = attrs.transA;
    transB = attrs.transB;
    alpha = attrs.alpha;
    if (attrs.transBatchA) {
      auto copy = transposeBatch(call, *a);
      if (!copy)
        return copy.takeError();
      if (*copy) {
        aCopy = std::move(*copy);
        a = &aCopy->getView();
      }
    }
    if (attrs.transBatchB) {
      auto copy = transposeBatch(call, *b);
      if (!copy)
        return copy.takeError();
      if (*copy) {
        bCopy = std::move(*copy);
        b = &bCopy->getView();
      }
    }
  }
  llvm::SmallVector<int64_t, 6> outShape;
  auto product =
      planMatMul(call, a->getShape(), b->getShape(), transA, transB, outShape);
  if (!product)
    return product.takeError();
  if (llvm::Error err = checkOutputShape(call, 0, outShape))
    return err;
  if (isHalfType(a->getDType()))
    return runHalfProduct(call, *product, static_cast<float>(alpha), *a, *b,
                          out);
  return dispatchTypes<float, double, int64_t, int32_t>(
      call, a->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        runBatched<T>(call.getNumThreads(), *product, static_cast<T>(alpha),
                      a->getDataAs<T>(), b->getDataAs<T>(), out.getDataAs<T>());
        return llvm::Error::success();
      });
}

/// Gemm(A, B, C?) = alpha * op(A) * op(B) + beta * C.
llvm::Error gemmKernel(KernelCall &call) {
  const TensorView &a = *call.in(0), &b = *call.in(1);
  const TensorView *c = call.in(2);
  const TensorView &y = *call.out(0);
  if (a.getRank() != 2 || b.getRank() != 2)
    return call.error("A and B must be matrices");
  const auto &attrs = call.getState<ProductAttrs>();
  bool transA = attrs.transA, transB = attrs.transB;
  double alpha = attrs.alpha, beta = attrs.beta;
  int64_t m = transA ? a.getDim(1) : a.getDim(0);
  int64_t k = transA ? a.getDim(0) : a.getDim(1);
  int64_t kB = transB ? b.getDim(1) : b.getDim(0);
  int64_t n = transB ? b.getDim(0) : b.getDim(1);
  if (k != kB)
    return call.error("inner dimensions differ");
  if (!fitsBlasInt(m, n, k))
    return call.error("matrix extents exceed 32-bit BLAS limits");
  if (llvm::Error err = checkOutputShape(call, 0, {m, n}))
    return err;
  if (a.getDType() != b.getDType() || y.getDType() != a.getDType() ||
      (c && c->getDType() != a.getDType()))
    return call.error("A, B, C and Y must have one element type");
  bool useC = c && beta != 0;
  if (useC) {
    llvm::SmallVector<int64_t, 2> merged;
    if (!broadcastShapes(c->getShape(), {m, n}, merged) ||
        llvm::ArrayRef<int64_t>(merged) != llvm::ArrayRef<int64_t>({m, n}))
      return call.error("C of shape " + shapeString(c->getShape()) +
                        " does not broadcast to [M,N]");
    broadcastCopy(*c, y, call.getNumThreads());
  }
  if (isHalfType(a.getDType())) {
    BatchedProduct product;
    product.m = m;
    product.n = n;
    product.k = k;
    product.transA = transA;
    product.transB = transB;
    return runHalfProduct(call, product, static_cast<float>(alpha), a, b, y,
                          useC ? static_cast<float>(beta) : 0.0f);
  }
  return dispatchTypes<float, double, int64_t, int32_t>(
      call, a.getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        gemm<T>(call.getNumThreads(), transA, transB, m, n, k,
                static_cast<T>(alpha), a.getDataAs<T>(), a.getDim(1),
                b.getDataAs<T>(), b.getDim(1),
                useC ? static_cast<T>(beta) : T(0), y.getDataAs<T>(), n);
        return llvm::Error::success();
      });
}

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

/// A tensor whose dimensions are named by einsum labels. The view is held
/// by value; storage (when set) owns the bytes of an intermediate.
struct LabeledTensor {
  TensorView view;
  llvm::SmallVector<int, 8> labels;
  std::shared_ptr<TensorBuffer> storage;
};

using LabelSizes = llvm::DenseMap<int, int64_t>;
using LabelSet = llvm::SmallDenseSet<int, 16>;

/// Where an einsum's intermediates come from. A dry run (for the workspace
/// model) only adds up the scratch requests the real run makes, in the same
/// order and sizes: intermediates get no data and nothing is computed.
struct EinsumScratch {
  bool dryRun = false;
  /// The element type of the operands, the output and every intermediate
  /// (float32 or float64).
  DType dtype = DType::F32;
  /// Aligned bytes requested (dry run).
  uint64_t bytes = 0;
};

/// Allocates an intermediate with \p labels (of scratch.dtype).
llvm::Expected<LabeledTensor> makeLabeled(const KernelCall &call,
                                          EinsumScratch &scratch,
                                          llvm::ArrayRef<int> labels,
                                          const LabelSizes &sizes) {
  llvm::SmallVector<int64_t, 8> shape;
  for (int label : labels)
    shape.push_back(sizes.lookup(label));
  if (scratch.dryRun) {
    LabeledTensor result;
    result.view = TensorView(nullptr, scratch.dtype, shape);
    scratch.bytes =
        addScratch(scratch.bytes,
                   scratchBytes(scratch.dtype, result.view.getNumElements()));
    result.labels.assign(labels.begin(), labels.end());
    return result;
  }
  auto buffer = call.getContext().allocateScratch(scratch.dtype, shape);
  if (!buffer)
    return buffer.takeError();
  LabeledTensor result;
  result.storage = std::make_shared<TensorBuffer>(std::move(*buffer));
  result.view = result.storage->getView();
  result.labels.assign(labels.begin(), labels.end());
  return result;
}

/// Permutes \p t so its labels come in \p order (a permutation of them).
llvm::Expected<LabeledTensor> permuteLabels(const KernelCall &call,
                                            EinsumScratch &scratch,
                                            const LabeledTensor &t,
                                            llvm::ArrayRef<int> order,
                                            const LabelSizes &sizes) {
  if (llvm::ArrayRef<int>(t.labels) == order)
    return t;
  llvm::SmallVector<unsigned, 8> perm;
  for (int label : order)
    perm.push_back(llvm::find(t.labels, label) - t.labels.begin());
  auto result = makeLabeled(call, scratch, order, sizes);
  if (!result || scratch.dryRun)
    return result;
  transposeInto(t.view, result->view, perm, call.getNumThreads());
  return result;
}

/// Sums \p t over every label not in \p keep.
llvm::Expected<LabeledTensor> sumOutLabels(const KernelCall &call,
                                           EinsumScratch &scratch,
                                           const LabeledTensor &t,
                                           const LabelSet &keep,
                                           const LabelSizes &sizes) {
  llvm::SmallVector<int, 8> kept, summed;
  for (int label : t.labels)
    (keep.count(label) ? kept : summed).push_back(label);
  if (summed.empty())
    return t;
  llvm::SmallVector<int, 8> order(kept);
  order.append(summed.begin(), summed.end());
  auto permuted = permuteLabels(call, scratch, t, order, sizes);
  if (!permuted)
    return permuted.takeError();
  auto result = makeLabeled(call, scratch, kept, sizes);
  if (!result || scratch.dryRun)
    return result;
  int64_t rows = result->view.getNumElements();
  int64_t width = 1;
  for (int label : summed)
    width *= sizes.lookup(label);
  auto sumRows = [&](auto zero) {
    using T = decltype(zero);
    const T *in = permuted->view.getDataAs<T>();
    T *out = result->view.getDataAs<T>();
    parallelFor(call.getNumThreads(), rows, grainFor(width),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t r = lo; r < hi; ++r) {
                    T sum = 0;
                    for (int64_t j = 0; j < width; ++j)
                      sum += in[r * width + j];
                    out[r] = sum;
                  }
                });
  };
  if (scratch.dtype == DType::F64)
    sumRows(0.0);
  else
    sumRows(0.0f);
  return result;
}

/// Contracts \p a and \p b, keeping the labels in \p keep.
llvm::Expected<LabeledTensor>
contractPair(const KernelCall &call, EinsumScratch &scratch,
             const LabeledTensor &a, const LabeledTensor &b,
             const LabelSet &keep, const LabelSizes &sizes) {
  // A label only one side has that nobody needs later is summed away first.
  LabelSet keepA(keep.begin(), keep.end()), keepB(keep.begin(), keep.end());
  keepA.insert(b.labels.begin(), b.labels.end());
  keepB.insert(a.labels.begin(), a.labels.end());
  auto reducedA = sumOutLabels(call, scratch, a, keepA, sizes);
  if (!reducedA)
    return reducedA.takeError();
  auto reducedB = sumOutLabels(call, scratch, b, keepB, sizes);
  if (!reducedB)
    return reducedB.takeError();
  llvm::SmallVector<int, 8> batch, freeA, freeB, contracted;
  for (int label : reducedA->labels) {
    bool inB = llvm::is_contained(reducedB->labels, label);
    if (inB && keep.count(label))
      batch.push_back(label);
    else if (inB)
      contracted.push_back(label);
    else
      freeA.push_back(label);
  }
  for (int label : reducedB->labels)
    if (!llvm::is_contained(reducedA->labels, label))
      freeB.push_back(label);
  llvm::SmallVector<int, 8> orderA(batch), orderB(batch);
  orderA.append(freeA.begin(), freeA.end());
  orderA.append(contracted.begin(), contracted.end());
  orderB.append(contracted.begin(), contracted.end());
  orderB.append(freeB.begin(), freeB.end());
  auto pa = permuteLabels(call, scratch, *reducedA, orderA, sizes);
  if (!pa)
    return pa.takeError();
  auto pb = permuteLabels(call, scratch, *reducedB, orderB, sizes);
  if (!pb)
    return pb.takeError();
  llvm::SmallVector<int, 8> resultLabels(batch);
  resultLabels.append(freeA.begin(), freeA.end());
  resultLabels.append(freeB.begin(), freeB.end());
  auto result = makeLabeled(call, scratch, resultLabels, sizes);
  if (!result || scratch.dryRun)
    return result;
  auto extent = [&](llvm::ArrayRef<int> labels) {
    int64_t size = 1;
    for (int label : labels)
      size *= sizes.lookup(label);
    return size;
  };
  BatchedProduct product;
  product.m = extent(freeA);
  product.n = extent(freeB);
  product.k = extent(contracted);
  if (!fitsBlasInt(product.m, product.n, product.k))
    return call.error("contraction extents exceed 32-bit BLAS limits");
  product.batchShape = {extent(batch)};
  product.aStrides = {1};
  product.bStrides = {1};
  if (scratch.dtype == DType::F64)
    runBatched<double>(
        call.getNumThreads(), product, 1.0, pa->view.getDataAs<double>(),
        pb->view.getDataAs<double>(), result->view.getDataAs<double>());
  else
    runBatched<float>(call.getNumThreads(), product, 1.0f,
                      pa->view.getDataAs<float>(), pb->view.getDataAs<float>(),
                      result->view.getDataAs<float>());
  return result;
}

/// Einsum, or with \p scratch.dryRun only its scratch requests (the
/// operands' and output's views need shapes, not data).
llvm::Error runEinsum(const KernelCall &call, EinsumScratch &scratch) {
  const ops::EinsumSpec &spec = call.getState<EinsumState>().spec;
  unsigned numInputs = call.getNumInputs();
  llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> shapes;
  for (unsigned i = 0; i < numInputs; ++i) {
    const TensorView *view = call.in(i);
    if (!view)
      return call.error("inputs may not be absent");
    if (view->getDType() != DType::F32 && view->getDType() != DType::F64)
      return unsupportedType(call, view->getDType());
    if (i == 0)
      scratch.dtype = view->getDType();
    else if (view->getDType() != scratch.dtype)
      return call.error("operands must have one element type");
    shapes.emplace_back(view->getShape().begin(), view->getShape().end());
  }
  auto binding = ops::bindEinsum(spec, shapes);
  if (!binding)
    return call.error(llvm::toString(binding.takeError()));
  const LabelSizes &sizes = binding->extents;
  std::vector<LabeledTensor> operands(numInputs);
  for (unsigned i = 0; i < numInputs; ++i) {
    operands[i].view = *call.in(i);
    operands[i].labels = binding->operandLabels[i];
  }
  // An operand whose broadcast (extent 1) ellipsis dim is larger elsewhere
  // drops that dimension: the same bytes with fewer unit dimensions.
  for (unsigned i = 0; i < numInputs; ++i) {
    LabeledTensor &operand = operands[i];
    llvm::SmallVector<int, 8> labels;
    llvm::SmallVector<int64_t, 8> shape;
    for (unsigned d = 0; d < operand.labels.size(); ++d) {
      if (binding->isBroadcast(i, d))
        continue;
      labels.push_back(operand.labels[d]);
      shape.push_back(operand.view.getDim(d));
    }
    if (labels.size() != operand.labels.size()) {
      operand.view = operand.view.reshaped(shape);
      operand.labels = std::move(labels);
    }
  }
  llvm::ArrayRef<int> outLabels = binding->outLabels;
  llvm::ArrayRef<int64_t> outShape = binding->outShape;
  if (llvm::Error err = checkOutputShape(call, 0, outShape))
    return err;
  if (llvm::Error err = checkDType(call, *call.out(0), scratch.dtype, "output"))
    return err;
  // Contract left to right, keeping labels later operands or the output use.
  LabelSet outSet(outLabels.begin(), outLabels.end());
  LabeledTensor current = operands[0];
  for (unsigned i = 1; i < numInputs; ++i) {
    LabelSet keep(outSet.begin(), outSet.end());
    for (unsigned j = i + 1; j < numInputs; ++j)
      keep.insert(operands[j].labels.begin(), operands[j].labels.end());
    auto next = contractPair(call, scratch, current, operands[i], keep, sizes);
    if (!next)
      return next.takeError();
    current = std::move(*next);
  }
  auto reduced = sumOutLabels(call, scratch, current, outSet, sizes);
  if (!reduced)
    return reduced.takeError();
  if (scratch.dryRun)
    return llvm::Error::success();
  llvm::SmallVector<unsigned, 8> perm;
  for (int label : outLabels)
    perm.push_back(llvm::find(reduced->labels, label) -
                   reduced->labels.begin());
  transposeInto(reduced->view, *call.out(0), perm, call.getNumThreads());
  return llvm::Error::success();
}

llvm::Error einsumKernel(KernelCall &call) {
  EinsumScratch scratch;
  return runEinsum(call, scratch);
}

/// Einsum's scratch: the kernel's own contraction sequence, dry-run on the
/// node's static shapes with the state prepare decodes. 0 when the kernel
/// would reject the node.
uint64_t einsumWorkspace(const Node &node) {
  auto state = decodeEinsum(node);
  if (!state) {
    llvm::consumeError(state.takeError());
    return 0;
  }
  KernelStateOf<EinsumState> prepared(std::move(*state));
  // Shapes only: views without data (reserved up front: pointers stay).
  std::vector<TensorView> views;
  views.reserve(node.getNumOperands() + 1);
  auto addView = [&](const Value *value) -> TensorView * {
    if (!value)
      return nullptr;
    auto view = TensorView::get(nullptr, value->getType());
    if (!view) {
      llvm::consumeError(view.takeError());
      return nullptr;
    }
    views.push_back(std::move(*view));
    return &views.back();
  };
  llvm::SmallVector<const TensorView *, 4> inputs;
  for (const Value *operand : node.getOperands()) {
    const TensorView *view = addView(operand);
    if (!view)
      return 0;
    inputs.push_back(view);
  }
  TensorView *output =
      node.getNumResults() == 1 ? addView(node.getResult(0)) : nullptr;
  if (!output)
    return 0;
  llvm::SmallVector<TensorView *, 1> outputs = {output};
  CountingAllocator allocator;
  CpuKernelContext context(allocator);
  KernelCall call(node, inputs, outputs, context, &prepared);
  EinsumScratch scratch;
  scratch.dryRun = true;
  if (llvm::Error err = runEinsum(call, scratch)) {
    llvm::consumeError(std::move(err));
    return 0;
  }
  return scratch.bytes;
}

/// The static shape of \p value with ONNX Runtime's transBatch applied
/// when \p transBatch (dimension 0 moved to just before the last, rank >= 3).
llvm::SmallVector<int64_t, 6> productOperandShape(const Value *value,
                                                  bool transBatch) {
  auto dims = value->getType().getStaticShape();
  llvm::SmallVector<int64_t, 6> shape(dims.begin(), dims.end());
  if (transBatch && shape.size() >= 3) {
    int64_t first = shape.front();
    shape.erase(shape.begin());
    shape.insert(shape.end() - 1, first);
  }
  return shape;
}

/// MatMul, FusedMatMul and TransposeMatMul scratch, in request order: the
/// batch-transposed copies of A and B (transBatchA/B on rank >= 3, in the
/// operand's type), then a 16-bit product's fp32 blocks.
template <bool Fused> uint64_t matMulWorkspace(const Node &node) {
  const Value *a = node.getOperand(0), *b = node.getOperand(1);
  if (!a || !b)
    return 0;
  ProductAttrs attrs = Fused ? decodeProduct(node) : ProductAttrs();
  bool transBatchA = attrs.transBatchA, transBatchB = attrs.transBatchB;
  uint64_t bytes = 0;
  if (transBatchA && a->getType().getRank() >= 3)
    bytes = addScratch(bytes, scratchBytes(a->getType().getDType(),
                                           a->getType().getNumElements()));
  if (transBatchB && b->getType().getRank() >= 3)
    bytes = addScratch(bytes, scratchBytes(b->getType().getDType(),
                                           b->getType().getNumElements()));
  if (!isHalfType(a->getType().getDType()))
    return bytes;
  llvm::SmallVector<int64_t, 6> outShape;
  std::string error;
  std::optional<BatchedProduct> product = planProduct(
      productOperandShape(a, transBatchA), productOperandShape(b, transBatchB),
      attrs.transA, attrs.transB, outShape, error);
  // Shapes that do not multiply fail in the kernel before any scratch.
  return product ? addScratch(bytes, halfProductScratch(*product)) : bytes;
}

/// Gemm's scratch: a 16-bit product's fp32 blocks.
uint64_t gemmWorkspace(const Node &node) {
  const Value *a = node.getOperand(0), *b = node.getOperand(1);
  if (!a || !b || !isHalfType(a->getType().getDType()) ||
      a->getType().getRank() != 2 || b->getType().getRank() != 2)
    return 0;
  auto aShape = a->getType().getStaticShape();
  auto bShape = b->getType().getStaticShape();
  ProductAttrs attrs = decodeProduct(node);
  BatchedProduct product;
  product.transA = attrs.transA;
  product.transB = attrs.transB;
  product.m = product.transA ? aShape[1] : aShape[0];
  product.k = product.transA ? aShape[0] : aShape[1];
  product.n = product.transB ? bShape[0] : bShape[1];
  return halfProductScratch(product);
}

} // namespace

void cpu::registerMatMulKernels(KernelTable &table) {
  // Native: 16-bit products widen in blocks (runHalfProduct), not whole.
  table.add("", "MatMul", matMulKernel<false>, KernelMode::Native);
  table.add("", "Gemm", gemmKernel, KernelMode::Native);
  table.add(kMsDomain, "FusedMatMul", matMulKernel<true>, KernelMode::Native);
  table.add(kMsDomain, "TransposeMatMul", matMulKernel<true>,
            KernelMode::Native);
  table.add("", "Einsum", einsumKernel);
  table.setWorkspace("", "Einsum", einsumWorkspace);
  table.setWorkspace("", "MatMul", matMulWorkspace<false>);
  table.setWorkspace("", "Gemm", gemmWorkspace);
  table.setWorkspace(kMsDomain, "FusedMatMul", matMulWorkspace<true>);
  table.setWorkspace(kMsDomain, "TransposeMatMul", matMulWorkspace<true>);
  table.setPrepare("", "MatMul", prepareProduct<false>);
  table.setPrepare("", "Gemm", prepareProduct<true>);
  table.setPrepare(kMsDomain, "FusedMatMul", prepareProduct<false>);
  table.setPrepare(kMsDomain, "TransposeMatMul", prepareProduct<false>);
  table.setPrepare("", "Einsum", prepareEinsum);
}
