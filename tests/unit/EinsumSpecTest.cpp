//===- EinsumSpecTest.cpp - The one reading of an Einsum equation ---------===//
//
// ops::EinsumSpec and ops::bindEinsum, which shape inference, the gradient
// rule, the CPU kernel and the CUDA plan all read: terms and the ellipsis,
// numpy's implicit output, letter roles, the right-aligned broadcast of the
// ellipsis dimensions, and each error a malformed equation or mismatched
// operand gets.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/EinsumSpec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

int label(char c) { return einsumLetterLabel(c); }

std::string errorOf(llvm::Error err) { return llvm::toString(std::move(err)); }

TEST(EinsumSpecTest, ParsesTermsAndTheExplicitOutput) {
  auto spec = EinsumSpec::parse(" bhsd, bhtd -> bhst ");
  ASSERT_TRUE(bool(spec)) << errorOf(spec.takeError());
  EXPECT_EQ(spec->str(), "bhsd,bhtd->bhst");
  ASSERT_EQ(spec->getNumInputs(), 2u);
  EXPECT_EQ(spec->getInput(0).str(), "bhsd");
  EXPECT_EQ(spec->getInput(1).str(), "bhtd");
  EXPECT_TRUE(spec->hasExplicitOutput());
  EXPECT_EQ(spec->getOutput().str(), "bhst");
  EXPECT_FALSE(spec->hasEllipsis());
  EXPECT_EQ(spec->getLetterRole(label('b')), EinsumRole::Batch);
  EXPECT_EQ(spec->getLetterRole(label('s')), EinsumRole::Free);
  EXPECT_EQ(spec->getLetterRole(label('d')), EinsumRole::Contracted);
  EXPECT_EQ(spec->getLetterCount(label('d')), 2u);
  EXPECT_EQ(spec->getNumOperandsWith(label('t')), 1u);
}

TEST(EinsumSpecTest, ImplicitOutputIsNumpys) {
  // The letters written once, upper case first (ASCII order).
  auto spec = EinsumSpec::parse("zB,Bc");
  ASSERT_TRUE(bool(spec)) << errorOf(spec.takeError());
  EXPECT_FALSE(spec->hasExplicitOutput());
  EXPECT_EQ(spec->getOutput().str(), "cz");
  auto mixed = EinsumSpec::parse("aB,Cb");
  ASSERT_TRUE(bool(mixed)) << errorOf(mixed.takeError());
  EXPECT_EQ(mixed->getOutput().str(), "BCab");
  // The ellipsis dimensions lead; a letter written twice is summed even
  // within one term.
  auto ellipsis = EinsumSpec::parse("...ij,jk,ii");
  ASSERT_TRUE(bool(ellipsis)) << errorOf(ellipsis.takeError());
  EXPECT_TRUE(ellipsis->hasEllipsis());
  EXPECT_EQ(ellipsis->getOutput().str(), "...k");
  EXPECT_TRUE(ellipsis->getInput(2).hasRepeatedLetter());
  EXPECT_FALSE(ellipsis->getInput(0).hasRepeatedLetter());
}

TEST(EinsumSpecTest, EllipsisPositionAndExpansion) {
  auto spec = EinsumSpec::parse("a...b->...");
  ASSERT_TRUE(bool(spec)) << errorOf(spec.takeError());
  const EinsumTerm &term = spec->getInput(0);
  EXPECT_EQ(term.ellipsisAt, 1);
  EXPECT_EQ(term.str(), "a...b");
  llvm::SmallVector<int, 8> expected = {label('a'), kEinsumEllipsisLabel + 1,
                                        kEinsumEllipsisLabel + 2, label('b')};
  EXPECT_EQ(term.expand(2, 1), expected);
  expected = {label('a'), label('b')};
  EXPECT_EQ(term.expand(0), expected);
}

TEST(EinsumSpecTest, MalformedEquationsAreErrors) {
  struct Case {
    const char *equation;
    const char *message;
  };
  std::vector<Case> cases = {
      {"", "missing equation"},
      {"   ", "missing equation"},
      {"i1->i", "invalid character '1'"},
      {"i..j->i", "invalid character '.'"},
      {"...i...->i", "more than one ellipsis"},
      {"ij->iz", "output letter 'z' appears in no operand"},
      {"ij->ii", "repeated"},
      {"ij->i-", "invalid character '-'"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.equation);
    auto spec = EinsumSpec::parse(c.equation);
    ASSERT_FALSE(bool(spec));
    std::string message = errorOf(spec.takeError());
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
}

TEST(EinsumSpecTest, BindingRightAlignsAndBroadcastsTheEllipsis) {
  auto spec = EinsumSpec::parse("...ij,...jk->...ik");
  ASSERT_TRUE(bool(spec)) << errorOf(spec.takeError());
  auto binding = bindEinsum(*spec, {{2, 1, 3, 4}, {5, 4, 2}});
  ASSERT_TRUE(bool(binding)) << errorOf(binding.takeError());
  EXPECT_EQ(binding->ellipsisRank, 2u);
  int e0 = kEinsumEllipsisLabel, e1 = kEinsumEllipsisLabel + 1;
  llvm::SmallVector<int, 8> first = {e0, e1, label('i'), label('j')};
  llvm::SmallVector<int, 8> second = {e1, label('j'), label('k')};
  EXPECT_EQ(binding->operandLabels[0], first);
  EXPECT_EQ(binding->operandLabels[1], second);
  EXPECT_EQ(binding->getExtent(e0), 2);
  EXPECT_EQ(binding->getExtent(e1), 5);
  EXPECT_EQ(binding->outShape, (llvm::SmallVector<int64_t, 8>{2, 5, 3, 2}));
  EXPECT_EQ(binding->summedLabels, (llvm::SmallVector<int, 16>{label('j')}));
  EXPECT_TRUE(binding->isBroadcast(0, 1));
  EXPECT_FALSE(binding->isBroadcast(0, 0));
  EXPECT_FALSE(binding->isBroadcast(1, 0));
  EXPECT_TRUE(binding->hasBroadcast());
  EXPECT_EQ(binding->getRole(e1), EinsumRole::Batch);
  EXPECT_EQ(binding->getRole(e0), EinsumRole::Free);
  EXPECT_EQ(binding->getRole(label('j')), EinsumRole::Contracted);
  EXPECT_EQ(binding->getExtent({label('i'), label('k')}), 6);
}

TEST(EinsumSpecTest, BindingOfTheImplicitOutput) {
  auto spec = EinsumSpec::parse("ij,jk");
  ASSERT_TRUE(bool(spec)) << errorOf(spec.takeError());
  auto binding = bindEinsum(*spec, {{3, 4}, {4, 5}});
  ASSERT_TRUE(bool(binding)) << errorOf(binding.takeError());
  EXPECT_EQ(binding->outShape, (llvm::SmallVector<int64_t, 8>{3, 5}));
  EXPECT_FALSE(binding->hasBroadcast());
  EXPECT_TRUE(binding->operandHas(0, label('i')));
  EXPECT_FALSE(binding->operandHas(1, label('i')));
}

TEST(EinsumSpecTest, BindingErrors) {
  struct Case {
    const char *equation;
    std::vector<std::vector<int64_t>> shapes;
    const char *message;
  };
  std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}}, "names 2 operands but the node has 1"},
      {"ijk->i", {{3, 4}}, "input 0 has rank 2, which does not match rank 3"},
      {"...ijk->i", {{3, 4}}, "does not match rank 3 or more"},
      {"ii->i", {{3, 3}}, "diagonal"},
      {"ij,jk->ik", {{3, 4}, {5, 6}}, "label extents disagree: 'j' binds 4"},
      {"...i,...i->...", {{2, 3}, {4, 3}}, "'...' binds 2 and 4"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.equation);
    auto spec = EinsumSpec::parse(c.equation);
    ASSERT_TRUE(bool(spec)) << errorOf(spec.takeError());
    llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> shapes;
    for (const std::vector<int64_t> &shape : c.shapes)
      shapes.emplace_back(shape.begin(), shape.end());
    auto binding = bindEinsum(*spec, shapes);
    ASSERT_FALSE(bool(binding));
    std::string message = errorOf(binding.takeError());
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
}

} // namespace
