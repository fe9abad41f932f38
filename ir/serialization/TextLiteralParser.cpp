//===- TextLiteralParser.cpp - Literals, types, attributes ------*- C++ -*-===//
//
// The part of gmopt's text-form parser (TextParser.h) that reads the
// leaves of the grammar in TextParser.cpp's file comment: numbers (ints,
// floats, hex bits, inf and nan, each checked against its target type and
// rounded correctly), strings and keys, tensor types and their dims, dense
// constants (element lists or a hex string of the raw bytes), tensor
// literals, and attribute values, lists and dictionaries.
//
//===----------------------------------------------------------------------===//

#include "ir/SizeLimits.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextParser.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstring>

using namespace gmopt;
using namespace gmopt::text;

namespace {

/// Appends the low \p width bytes of \p value, little-endian.
void appendLittleEndian(std::vector<uint8_t> &bytes, uint64_t value,
                        unsigned width) {
  for (unsigned i = 0; i != width; ++i)
    bytes.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

bool isSignedInteger(DType dtype) {
  return dtype == DType::I8 || dtype == DType::I16 || dtype == DType::I32 ||
         dtype == DType::I64;
}

} // namespace

bool Parser::parseString(std::string &out, const llvm::Twine &what) {
  if (!tok.is(TokenKind::String))
    return errorHere("expected " + what);
  out = std::move(tok.text);
  consume();
  return false;
}

/// key ::= identifier | string
bool Parser::parseKey(std::string &out, const llvm::Twine &what) {
  if (tok.is(TokenKind::Identifier)) {
    out = tok.spelling.str();
    consume();
    return false;
  }
  return parseString(out, what);
}

bool Parser::parseNumber(NumberLiteral &lit, const llvm::Twine &what) {
  lit.loc = tok.getLoc();
  lit.negative = consumeIf(TokenKind::Minus);
  if (tok.is(TokenKind::Integer)) {
    llvm::StringRef spelling = tok.spelling;
    if (spelling.consume_front("0x") || spelling.consume_front("0X")) {
      lit.kind = NumberLiteral::Kind::Hex;
    } else {
      lit.kind = NumberLiteral::Kind::Decimal;
    }
    lit.digits = spelling;
  } else if (tok.is(TokenKind::Float)) {
    lit.kind = NumberLiteral::Kind::Float;
    lit.digits = tok.spelling;
  } else if (tok.isKeyword("inf")) {
    lit.kind = NumberLiteral::Kind::Inf;
  } else if (tok.isKeyword("nan")) {
    lit.kind = NumberLiteral::Kind::NaN;
  } else {
    return errorHere("expected " + what);
  }
  consume();
  return false;
}

bool Parser::parseInteger(int64_t &out, const llvm::Twine &what) {
  NumberLiteral lit;
  if (parseNumber(lit, what))
    return true;
  return toSignedInt(lit, 64, out);
}

/// The magnitude of an integer literal.
bool Parser::magnitudeOf(const NumberLiteral &lit, uint64_t &out) {
  if (!lit.isInteger())
    return error(lit.loc, "expected an integer");
  if (lit.digits.getAsInteger(lit.kind == NumberLiteral::Kind::Hex ? 16 : 10,
                              out))
    return error(lit.loc, "integer literal too large");
  return false;
}

bool Parser::toSignedInt(const NumberLiteral &lit, unsigned bits,
                         int64_t &out) {
  uint64_t magnitude;
  if (magnitudeOf(lit, magnitude))
    return true;
  uint64_t limit = uint64_t(1) << (bits - 1);
  if (lit.negative ? magnitude > limit : magnitude >= limit)
    return error(lit.loc,
                 "integer literal out of range for i" + llvm::Twine(bits));
  out = lit.negative ? static_cast<int64_t>(0 - magnitude)
                     : static_cast<int64_t>(magnitude);
  return false;
}

bool Parser::toUnsignedInt(const NumberLiteral &lit, unsigned bits,
                           uint64_t &out) {
  if (magnitudeOf(lit, out))
    return true;
  if ((lit.negative && out != 0) || (bits < 64 && out >= (uint64_t(1) << bits)))
    return error(lit.loc,
                 "integer literal out of range for u" + llvm::Twine(bits));
  return false;
}

/// Converts \p lit to the bits of a float of \p dtype.
bool Parser::toFloatBits(const NumberLiteral &lit, DType dtype,
                         llvm::APInt &out) {
  const llvm::fltSemantics &semantics = *floatSemantics(dtype);
  unsigned width = llvm::APFloat::semanticsSizeInBits(semantics);
  switch (lit.kind) {
  case NumberLiteral::Kind::Hex: {
    uint64_t raw;
    if (magnitudeOf(lit, raw))
      return true;
    if (lit.negative || (width < 64 && raw >= (uint64_t(1) << width)))
      return error(lit.loc, "raw bits do not fit in " + dtypeName(dtype));
    out = llvm::APInt(width, raw);
    return false;
  }
  case NumberLiteral::Kind::Inf: {
    llvm::APFloat inf = llvm::APFloat::getInf(semantics, lit.negative);
    if (!inf.isInfinity())
      return error(lit.loc, dtypeName(dtype) + " has no infinity");
    out = inf.bitcastToAPInt();
    return false;
  }
  case NumberLiteral::Kind::NaN:
    out = llvm::APFloat::getQNaN(semantics, lit.negative).bitcastToAPInt();
    return false;
  case NumberLiteral::Kind::Decimal:
  case NumberLiteral::Kind::Float: {
    std::string text = (lit.negative ? "-" : "") + lit.digits.str();
    std::optional<llvm::APFloat> value = convertDecimalLiteral(text, semantics);
    if (!value)
      return error(lit.loc,
                   "float literal out of range for " + dtypeName(dtype));
    out = value->bitcastToAPInt();
    return false;
  }
  }
  return error(lit.loc, "expected a number");
}

/// type ::= dtype '[' dims ']'
bool Parser::parseType(TensorType &out) {
  if (!tok.is(TokenKind::Identifier))
    return errorHere("expected type");
  const char *typeLoc = tok.getLoc();
  std::optional<DType> dtype = parseDType(tok.spelling);
  if (!dtype)
    return errorHere("unknown element type '" + tok.spelling + "'");
  consume();
  if (expect(TokenKind::LBracket, "after element type"))
    return true;
  if (consumeIf(TokenKind::Star)) {
    out = TensorType::unranked(*dtype);
    return expect(TokenKind::RBracket, "after '*' in unranked type");
  }
  llvm::SmallVector<Dim, 4> dims;
  if (parseCommaList(TokenKind::RBracket, "in shape",
                     [&] { return parseDim(dims); }))
    return true;
  out = TensorType(*dtype, dims);
  if (!fitsSizeLimit(out))
    return error(typeLoc, "type " + out.str() +
                              " is larger than gmopt's limit of " +
                              kMaxTensorBytesText + " per tensor");
  return false;
}

bool Parser::parseDim(llvm::SmallVectorImpl<Dim> &dims) {
  // A '-' is read as part of the number so that it is reported as a
  // negative dimension.
  if (tok.is(TokenKind::Integer) || tok.is(TokenKind::Minus)) {
    NumberLiteral lit;
    if (parseNumber(lit, "dimension"))
      return true;
    int64_t extent;
    if (toSignedInt(lit, 64, extent))
      return true;
    if (extent < 0)
      return error(lit.loc, "negative dimension " + llvm::Twine(extent));
    dims.push_back(Dim::fixed(extent));
    return false;
  }
  if (consumeIf(TokenKind::Question)) {
    dims.push_back(Dim::unknown());
    return false;
  }
  if (tok.is(TokenKind::Identifier) || tok.is(TokenKind::String)) {
    std::string symbol;
    if (parseKey(symbol, "dimension"))
      return true;
    dims.push_back(symbol.empty() ? Dim::unknown() : Dim::symbolic(symbol));
    return false;
  }
  return errorHere("expected dimension (an integer, a symbol or '?')");
}

/// Element count and byte size of a constant of \p type, or an error at
/// \p loc when the type cannot hold constant data.
bool Parser::constantSize(const TensorType &type, const char *loc,
                          uint64_t &numElements, uint64_t &numBytes) {
  if (type.getDType() == DType::Undefined)
    return error(loc, "a constant needs a defined element type");
  if (!type.hasStaticShape())
    return error(loc, "a constant needs a static shape, got " + type.str());
  numElements = 1;
  for (const Dim &dim : type.getDims())
    if (__builtin_mul_overflow(
            numElements, static_cast<uint64_t>(dim.getExtent()), &numElements))
      return error(loc, "constant of type " + type.str() + " is too large");
  unsigned width = dtypeSize(type.getDType());
  if (type.getDType() == DType::U4 || type.getDType() == DType::I4)
    numBytes = numElements / 2 + numElements % 2;
  else if (__builtin_mul_overflow(numElements, uint64_t(width), &numBytes))
    return error(loc, "constant of type " + type.str() + " is too large");
  return false;
}

/// dense ::= 'dense' '<' contents '>' for a constant of \p type.
bool Parser::parseDense(const TensorType &type, const char *typeLoc,
                        TensorData &out) {
  if (tok.is(TokenKind::Less))
    return errorHere("cannot parse an elided constant; print the module "
                     "without elideLargeConstants");
  if (expectKeyword("dense", "before constant contents"))
    return true;
  uint64_t numElements, numBytes;
  if (constantSize(type, typeLoc, numElements, numBytes))
    return true;
  if (expect(TokenKind::Less, "after 'dense'"))
    return true;
  std::vector<uint8_t> bytes;
  if (tok.is(TokenKind::String)) {
    if (parseHexBlob(type, numBytes, bytes))
      return true;
  } else if (parseElements(type, numElements, bytes)) {
    return true;
  }
  if (expect(TokenKind::Greater, "after constant contents"))
    return true;
  out = TensorData(type, std::move(bytes));
  return false;
}

bool Parser::parseHexBlob(const TensorType &type, uint64_t numBytes,
                          std::vector<uint8_t> &bytes) {
  const char *loc = tok.getLoc();
  llvm::StringRef hex = tok.text;
  if (!hex.consume_front("0x") && !hex.consume_front("0X"))
    return errorHere("expected a hex string \"0x...\" of the constant's bytes");
  if (hex.size() % 2)
    return errorHere("hex string has an odd number of digits");
  // Types without a fixed element size (strings) take any byte count.
  bool anySize = dtypeSize(type.getDType()) == 0;
  if (!anySize && hex.size() / 2 != numBytes)
    return errorHere("expected " + llvm::Twine(numBytes) + " bytes for " +
                     type.str() + ", got " + llvm::Twine(hex.size() / 2));
  bytes.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    if (!llvm::isHexDigit(hex[i]) || !llvm::isHexDigit(hex[i + 1]))
      return error(loc, "invalid hex digit in constant bytes");
    bytes.push_back(static_cast<uint8_t>(llvm::hexDigitValue(hex[i]) * 16 +
                                         llvm::hexDigitValue(hex[i + 1])));
  }
  consume();
  return false;
}

bool Parser::parseElements(const TensorType &type, uint64_t numElements,
                           std::vector<uint8_t> &bytes) {
  DType dtype = type.getDType();
  bool readable =
      floatSemantics(dtype) || dtype == DType::Bool ||
      (isInteger(dtype) && dtype != DType::U4 && dtype != DType::I4);
  if (!readable)
    return errorHere("constants of type " + dtypeName(dtype) +
                     " are written as a hex string \"0x...\"");
  uint64_t count = 0;
  auto parseOne = [&]() -> bool {
    if (count == numElements)
      return errorHere("too many elements for " + type.str() + " (expected " +
                       llvm::Twine(numElements) + ")");
    ++count;
    return parseElement(dtype, bytes);
  };
  const char *start = tok.getLoc();
  if (consumeIf(TokenKind::LBracket)) {
    if (parseCommaList(TokenKind::RBracket, "in constant elements", parseOne))
      return true;
  } else if (parseOne()) {
    return true;
  }
  if (count != numElements)
    return error(start, "expected " + llvm::Twine(numElements) +
                            " elements for " + type.str() + ", got " +
                            llvm::Twine(count));
  return false;
}

bool Parser::parseElement(DType dtype, std::vector<uint8_t> &bytes) {
  unsigned width = dtypeSize(dtype);
  if (dtype == DType::Bool) {
    if (consumeKeywordIf("true")) {
      bytes.push_back(1);
      return false;
    }
    if (consumeKeywordIf("false")) {
      bytes.push_back(0);
      return false;
    }
    NumberLiteral lit;
    uint64_t value;
    if (parseNumber(lit, "'true' or 'false'") || magnitudeOf(lit, value))
      return true;
    if (value > 1 || (lit.negative && value != 0))
      return error(lit.loc, "expected 'true', 'false', 0 or 1");
    bytes.push_back(static_cast<uint8_t>(value));
    return false;
  }
  NumberLiteral lit;
  if (parseNumber(lit, "constant element"))
    return true;
  if (floatSemantics(dtype)) {
    llvm::APInt bits;
    if (toFloatBits(lit, dtype, bits))
      return true;
    appendLittleEndian(bytes, bits.getZExtValue(), width);
    return false;
  }
  if (isSignedInteger(dtype)) {
    int64_t value;
    if (toSignedInt(lit, width * 8, value))
      return true;
    appendLittleEndian(bytes, static_cast<uint64_t>(value), width);
    return false;
  }
  uint64_t value;
  if (toUnsignedInt(lit, width * 8, value))
    return true;
  appendLittleEndian(bytes, value, width);
  return false;
}

/// tensor-literal ::= type dense
bool Parser::parseTensorLiteral(TensorData &out) {
  const char *typeLoc = tok.getLoc();
  TensorType type;
  if (parseType(type))
    return true;
  return parseDense(type, typeLoc, out);
}

bool Parser::parseAttributeValue(Attribute &out) {
  if (tok.is(TokenKind::String)) {
    out = Attribute::getString(std::move(tok.text));
    consume();
    return false;
  }
  if (tok.is(TokenKind::LBracket))
    return parseAttributeList(out);
  if (tok.is(TokenKind::Identifier) && parseDType(tok.spelling)) {
    TensorData data;
    if (parseTensorLiteral(data))
      return true;
    out = Attribute::getTensor(std::move(data));
    return false;
  }
  NumberLiteral lit;
  if (parseNumber(lit, "attribute value"))
    return true;
  bool asFloat = !lit.isInteger();
  if (consumeIf(TokenKind::Colon)) {
    if (consumeKeywordIf("f32"))
      asFloat = true;
    else if (consumeKeywordIf("i64"))
      asFloat = false;
    else
      return errorHere("expected 'i64' or 'f32' after ':' in attribute");
  }
  if (asFloat) {
    float value;
    if (toFloat(lit, value))
      return true;
    out = Attribute::getFloat(value);
    return false;
  }
  int64_t value;
  if (toSignedInt(lit, 64, value))
    return true;
  out = Attribute::getInt(value);
  return false;
}

bool Parser::toFloat(const NumberLiteral &lit, float &out) {
  llvm::APInt bits;
  if (toFloatBits(lit, DType::F32, bits))
    return true;
  uint32_t raw = static_cast<uint32_t>(bits.getZExtValue());
  std::memcpy(&out, &raw, sizeof(out));
  return false;
}

bool Parser::parseAttributeList(Attribute &out) {
  const char *listLoc = tok.getLoc();
  consume();
  std::vector<ListElement> elements;
  bool anyString = false, anyNumber = false, anyFloat = false;
  if (parseCommaList(TokenKind::RBracket, "in attribute list", [&] {
        ListElement element;
        if (tok.is(TokenKind::String)) {
          element.isString = true;
          element.string = std::move(tok.text);
          anyString = true;
          consume();
        } else {
          if (parseNumber(element.number, "list element"))
            return true;
          anyNumber = true;
          anyFloat |= !element.number.isInteger();
        }
        elements.push_back(std::move(element));
        return false;
      }))
    return true;

  Attribute::Kind kind;
  if (consumeIf(TokenKind::Colon)) {
    if (consumeKeywordIf("ints"))
      kind = Attribute::Kind::Ints;
    else if (consumeKeywordIf("floats"))
      kind = Attribute::Kind::Floats;
    else if (consumeKeywordIf("strings"))
      kind = Attribute::Kind::Strings;
    else
      return errorHere(
          "expected 'ints', 'floats' or 'strings' after ':' in attribute");
  } else if (elements.empty()) {
    return error(listLoc, "the kind of an empty list must be given, as in "
                          "'[] : ints'");
  } else if (anyString) {
    kind = Attribute::Kind::Strings;
  } else {
    kind = anyFloat ? Attribute::Kind::Floats : Attribute::Kind::Ints;
  }
  if (kind == Attribute::Kind::Strings ? anyNumber : anyString)
    return error(listLoc, "list mixes strings and numbers");

  switch (kind) {
  case Attribute::Kind::Strings: {
    std::vector<std::string> values;
    for (ListElement &element : elements)
      values.push_back(std::move(element.string));
    out = Attribute::getStrings(std::move(values));
    return false;
  }
  case Attribute::Kind::Floats: {
    std::vector<float> values(elements.size());
    for (size_t i = 0, e = elements.size(); i != e; ++i)
      if (toFloat(elements[i].number, values[i]))
        return true;
    out = Attribute::getFloats(std::move(values));
    return false;
  }
  default: {
    std::vector<int64_t> values(elements.size());
    for (size_t i = 0, e = elements.size(); i != e; ++i)
      if (toSignedInt(elements[i].number, 64, values[i]))
        return true;
    out = Attribute::getInts(std::move(values));
    return false;
  }
  }
}

/// attr-dict ::= '{' [key '=' attr-value (',' ...)*] '}'
bool Parser::parseAttributeDict(Node *node) {
  llvm::StringSet<> seen;
  return parseCommaList(TokenKind::RBrace, "in attribute dictionary", [&] {
    const char *loc = tok.getLoc();
    std::string name;
    if (parseKey(name, "attribute name"))
      return true;
    if (!seen.insert(name).second)
      return error(loc, "duplicate attribute '" + name + "'");
    if (expect(TokenKind::Equal, "after attribute name"))
      return true;
    Attribute value;
    if (parseAttributeValue(value))
      return true;
    node->setAttr(name, std::move(value));
    return false;
  });
}
