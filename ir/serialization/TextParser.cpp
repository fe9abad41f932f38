//===- TextParser.cpp - Parsing the text form of a module -----------------===//
//
// A recursive-descent parser for gmopt's textual IR, the inverse of
// TextPrinter.cpp. It builds the module exactly as written: node order is
// the schedule, result types are taken from the text (no inference runs
// here; tools verify afterwards), names, attributes and constant bytes are
// kept bit for bit. The grammar has no unbounded nesting, so no input can
// exhaust the stack; every malformed input yields one error
// `BUFFER:LINE:COL: message` (1-based) instead of a crash.
//
// Grammar (EBNF; `//` starts a comment that runs to the end of the line):
//
//   module        ::= 'module' ['attributes' module-attrs] '{' graph
//                     [signature] '}'
//   module-attrs  ::= '{' [module-attr (',' module-attr)*] '}'
//   module-attr   ::= 'ir_version' '=' int
//                   | 'opsets' '=' '{' [key '=' int (',' key '=' int)*] '}'
//                   | 'producer' '=' string | 'producer_version' '=' string
//                   | 'domain' '=' string | 'model_version' '=' int
//                   | 'doc' '=' string
//                   | 'metadata' '=' '{' [key '=' string (',' ...)*] '}'
//                   | 'dims' '=' '{' [key '=' int (',' key '=' int)*] '}'
//   key           ::= identifier | string
//
//   graph         ::= 'graph' graph-name '(' [input (',' input)*] ')'
//                     '{' statement* return '}'
//   graph-name    ::= '@' identifier | '@' string
//   input         ::= value-name ':' type ['=' (dense | tensor-literal)]
//   statement     ::= initializer | node
//   initializer   ::= value-name '=' 'constant' ['literal'] tensor-literal
//                     [':' type]
//   node          ::= [result (',' result)* '='] op-name
//                     '(' [operand (',' operand)*] ')' [attr-dict]
//                     [':' result-types] ['name' string]
//                     ['phase' phase] ['stream' int]
//   phase         ::= 'forward' | 'backward' | 'optimizer' | 'recompute'
//                     // absent: forward
//   // A random node without 'stream' gets a fresh id at parse
//   // (computeStreamId of its name and position, distinct from every other
//   // stream of the module); phases are never derived from names.
//   result        ::= value-name | '_'
//   operand       ::= value-name | '_'
//   op-name       ::= identifier            // Gemm, com.microsoft.FooGrad
//                   | string '.' (string | identifier)  // "domain"."type"
//   result-types  ::= type | '(' type (',' type)* ')'
//   return        ::= 'return' [operand (',' operand)*]
//
//   attr-dict     ::= '{' [key '=' attr-value (',' key '=' attr-value)*] '}'
//   attr-value    ::= int [':' 'i64'] | (int | float) [':' 'f32'] | string
//                   | '[' [scalar (',' scalar)*] ']'
//                     [':' ('ints' | 'floats' | 'strings')]
//                   | tensor-literal
//   scalar        ::= int | float | string
//
//   type          ::= dtype '[' [dim (',' dim)*] ']' | dtype '[' '*' ']'
//   dim           ::= int | '?' | identifier | string
//   tensor-literal::= type dense   // `<elided N bytes>` is rejected
//   dense         ::= 'dense' '<' ('[' [element (',' element)*] ']'
//                                  | element | hex-string) '>'
//   element       ::= int | float | 'true' | 'false'
//   int           ::= ['-'] (digits | '0x' hex-digits)
//   float         ::= ['-'] (digits '.' [digits] [exponent]
//                           | digits exponent | 'inf' | 'nan')
//   hex-string    ::= '"0x' hex-digits '"'     // the raw little-endian bytes
//
//   signature     ::= 'signature' '{' sig-entry* '}'
//   sig-entry     ::= 'param' operand ('trainable' | 'frozen')
//                     ['grad' operand] ['accumulator' operand]
//                     ['via' node-ref] ['state' operand (',' operand)*]
//                   | 'data' operand (',' operand)*
//                   | 'loss' operand | 'loss_grad_seed' operand
//                   | 'lazy_reset_grad' operand
//                   | step-slot operand
//   step-slot     ::= 'learning_rate' | 'step_count' | 'loss_scale'
//                   | 'loss_scale_good_steps'
//   node-ref      ::= value-name   // the node defining that value
//                   | string       // the node with that (unique) name
//                   | int          // the node's position in the schedule
//
// Lexical rules:
//   value-name    ::= '%' name-chars ['#' digits]  // [A-Za-z0-9_.:/-]+
//                   | '%' string ['#' digits] | '%' digits
//   identifier    ::= [A-Za-z_][A-Za-z0-9_.]*
//   string        ::= '"' ... '"' with escapes \" \\ \n \t \r \xHH \ooo
//
// Semantics:
//   - ir_version and the opsets follow ONNX import's rules
//   (ir/serialization/Onnx.h), so
//     every module that parses exports to a model that imports again.
//   - `%17` (all digits) is an unnamed value; `%x` and `%"x"` are the value
//     with ONNX name "x"; `%x#1` is a second value that is also named "x".
//     Inputs, initializers and results share one namespace; a value must be
//     defined before it is used (the text order is the schedule). A ':'
//     continues a bare name only when a name character follows, so write
//     `%x: f32[4]` with a space.
//   - A bare op name is split at its last '.': `com.microsoft.FooGrad` is
//     type FooGrad in domain com.microsoft; `Relu` is in the standard
//     domain "". Standard ops named return, constant, name or _ must be
//     quoted.
//   - Result types list the present results, in order; when omitted the
//     results have the unknown type `undef[*]`.
//   - Floats are read with correct rounding for their element type; in a
//     float position a hex int gives the raw bits (e.g. a NaN payload).
//     An attribute list of numbers is floats if any element is a float
//     literal, ints otherwise; an empty list needs its kind.
//   - In an input, `= dense<...>` takes the input's type; initializers and
//     attributes spell the constant's type.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"
#include "ir/SizeLimits.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"
#include "ir/serialization/TextLexer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <functional>
#include <map>
#include <tuple>

using namespace gmopt;
using namespace gmopt::text;

namespace {

/// A numeric literal as written, converted once its target type is known.
struct NumberLiteral {
  enum class Kind { Decimal, Hex, Float, Inf, NaN };
  Kind kind = Kind::Decimal;
  bool negative = false;
  /// The digits (without "0x" for Hex), or the float literal.
  llvm::StringRef digits;
  /// Where the literal (including its sign) starts.
  const char *loc = nullptr;

  bool isInteger() const { return kind == Kind::Decimal || kind == Kind::Hex; }
};

/// An attribute list element before the list's kind is known.
struct ListElement {
  bool isString = false;
  std::string string;
  NumberLiteral number;
};

/// The textual identity of a value: (numbered, name-or-digits, suffix).
using ValueKey = std::tuple<bool, std::string, std::string>;

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

/// Parses one module; see the grammar above.
class Parser {
public:
  Parser(llvm::StringRef buffer, llvm::StringRef bufferName)
      : lexer(buffer), bufferName(bufferName),
        module(std::make_unique<Module>()), graph(module->getGraph()) {
    consume();
  }

  llvm::Expected<std::unique_ptr<Module>> run() {
    if (parseModule())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     errorMessage);
    assignMissingStreamIds(module->getGraph());
    return std::move(module);
  }

private:
  //===--------------------------------------------------------------------===//
  // Tokens and errors
  //===--------------------------------------------------------------------===//

  void consume() { tok = lexer.lex(); }

  bool consumeIf(TokenKind kind) {
    if (!tok.is(kind))
      return false;
    consume();
    return true;
  }

  bool consumeKeywordIf(llvm::StringRef keyword) {
    if (!tok.isKeyword(keyword))
      return false;
    consume();
    return true;
  }

  /// Records the first error at \p loc; always returns true (failure).
  [[nodiscard]] bool error(const char *loc, const llvm::Twine &message) {
    if (failed)
      return true;
    failed = true;
    llvm::StringRef buffer = lexer.getBuffer();
    size_t offset = loc ? loc - buffer.begin() : buffer.size();
    llvm::StringRef before = buffer.take_front(offset);
    size_t line = before.count('\n') + 1;
    size_t lineStart = before.rfind('\n');
    size_t column =
        lineStart == llvm::StringRef::npos ? offset + 1 : offset - lineStart;
    errorMessage = (bufferName + ":" + llvm::Twine(line) + ":" +
                    llvm::Twine(column) + ": " + message)
                       .str();
    return true;
  }

  /// An error at the current token; a lexical error takes precedence.
  [[nodiscard]] bool errorHere(const llvm::Twine &message) {
    if (tok.is(TokenKind::Error))
      return error(tok.getLoc(), tok.text);
    return error(tok.getLoc(), message);
  }

  [[nodiscard]] bool expect(TokenKind kind, const llvm::Twine &context) {
    if (consumeIf(kind))
      return false;
    return errorHere("expected " + tokenKindName(kind) + " " + context);
  }

  [[nodiscard]] bool expectKeyword(llvm::StringRef keyword,
                                   const llvm::Twine &context) {
    if (consumeKeywordIf(keyword))
      return false;
    return errorHere("expected '" + keyword + "' " + context);
  }

  /// Parses `open item (',' item)* close` or `open close`.
  template <typename ParseItem>
  [[nodiscard]] bool parseCommaList(TokenKind close, llvm::StringRef context,
                                    ParseItem parseItem) {
    if (consumeIf(close))
      return false;
    while (true) {
      if (parseItem())
        return true;
      if (consumeIf(close))
        return false;
      if (!tok.is(TokenKind::Comma))
        return errorHere("expected ',' or " + tokenKindName(close) + " " +
                         context);
      consume();
    }
  }

  //===--------------------------------------------------------------------===//
  // Literals
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseString(std::string &out, const llvm::Twine &what) {
    if (!tok.is(TokenKind::String))
      return errorHere("expected " + what);
    out = std::move(tok.text);
    consume();
    return false;
  }

  /// key ::= identifier | string
  [[nodiscard]] bool parseKey(std::string &out, const llvm::Twine &what) {
    if (tok.is(TokenKind::Identifier)) {
      out = tok.spelling.str();
      consume();
      return false;
    }
    return parseString(out, what);
  }

  [[nodiscard]] bool parseNumber(NumberLiteral &lit, const llvm::Twine &what) {
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

  [[nodiscard]] bool parseInteger(int64_t &out, const llvm::Twine &what) {
    NumberLiteral lit;
    if (parseNumber(lit, what))
      return true;
    return toSignedInt(lit, 64, out);
  }

  /// The magnitude of an integer literal.
  [[nodiscard]] bool magnitudeOf(const NumberLiteral &lit, uint64_t &out) {
    if (!lit.isInteger())
      return error(lit.loc, "expected an integer");
    if (lit.digits.getAsInteger(lit.kind == NumberLiteral::Kind::Hex ? 16 : 10,
                                out))
      return error(lit.loc, "integer literal too large");
    return false;
  }

  [[nodiscard]] bool toSignedInt(const NumberLiteral &lit, unsigned bits,
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

  [[nodiscard]] bool toUnsignedInt(const NumberLiteral &lit, unsigned bits,
                                   uint64_t &out) {
    if (magnitudeOf(lit, out))
      return true;
    if ((lit.negative && out != 0) ||
        (bits < 64 && out >= (uint64_t(1) << bits)))
      return error(lit.loc,
                   "integer literal out of range for u" + llvm::Twine(bits));
    return false;
  }

  /// Converts \p lit to the bits of a float of \p dtype.
  [[nodiscard]] bool toFloatBits(const NumberLiteral &lit, DType dtype,
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
      std::optional<llvm::APFloat> value =
          convertDecimalLiteral(text, semantics);
      if (!value)
        return error(lit.loc,
                     "float literal out of range for " + dtypeName(dtype));
      out = value->bitcastToAPInt();
      return false;
    }
    }
    return error(lit.loc, "expected a number");
  }

  //===--------------------------------------------------------------------===//
  // Types and constants
  //===--------------------------------------------------------------------===//

  /// type ::= dtype '[' dims ']'
  [[nodiscard]] bool parseType(TensorType &out) {
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

  [[nodiscard]] bool parseDim(llvm::SmallVectorImpl<Dim> &dims) {
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
  [[nodiscard]] bool constantSize(const TensorType &type, const char *loc,
                                  uint64_t &numElements, uint64_t &numBytes) {
    if (type.getDType() == DType::Undefined)
      return error(loc, "a constant needs a defined element type");
    if (!type.hasStaticShape())
      return error(loc, "a constant needs a static shape, got " + type.str());
    numElements = 1;
    for (const Dim &dim : type.getDims())
      if (__builtin_mul_overflow(numElements,
                                 static_cast<uint64_t>(dim.getExtent()),
                                 &numElements))
        return error(loc, "constant of type " + type.str() + " is too large");
    unsigned width = dtypeSize(type.getDType());
    if (type.getDType() == DType::U4 || type.getDType() == DType::I4)
      numBytes = numElements / 2 + numElements % 2;
    else if (__builtin_mul_overflow(numElements, uint64_t(width), &numBytes))
      return error(loc, "constant of type " + type.str() + " is too large");
    return false;
  }

  /// dense ::= 'dense' '<' contents '>' for a constant of \p type.
  [[nodiscard]] bool parseDense(const TensorType &type, const char *typeLoc,
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

  [[nodiscard]] bool parseHexBlob(const TensorType &type, uint64_t numBytes,
                                  std::vector<uint8_t> &bytes) {
    const char *loc = tok.getLoc();
    llvm::StringRef hex = tok.text;
    if (!hex.consume_front("0x") && !hex.consume_front("0X"))
      return errorHere(
          "expected a hex string \"0x...\" of the constant's bytes");
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

  [[nodiscard]] bool parseElements(const TensorType &type, uint64_t numElements,
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

  [[nodiscard]] bool parseElement(DType dtype, std::vector<uint8_t> &bytes) {
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
  [[nodiscard]] bool parseTensorLiteral(TensorData &out) {
    const char *typeLoc = tok.getLoc();
    TensorType type;
    if (parseType(type))
      return true;
    return parseDense(type, typeLoc, out);
  }

  //===--------------------------------------------------------------------===//
  // Attributes
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseAttributeValue(Attribute &out) {
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

  [[nodiscard]] bool toFloat(const NumberLiteral &lit, float &out) {
    llvm::APInt bits;
    if (toFloatBits(lit, DType::F32, bits))
      return true;
    uint32_t raw = static_cast<uint32_t>(bits.getZExtValue());
    std::memcpy(&out, &raw, sizeof(out));
    return false;
  }

  [[nodiscard]] bool parseAttributeList(Attribute &out) {
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
  [[nodiscard]] bool parseAttributeDict(Node *node) {
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

  //===--------------------------------------------------------------------===//
  // Values
  //===--------------------------------------------------------------------===//

  static bool isNumbered(const Token &token) {
    return !token.quoted && llvm::all_of(token.text, llvm::isDigit);
  }

  static ValueKey keyOf(const Token &token) {
    return ValueKey(isNumbered(token), token.text, token.suffix.str());
  }

  /// Checks that the ValueName token \p token may define a new value and
  /// reserves its id (so later uses before the definition completes are
  /// still "undefined"). Returns the ONNX name in \p name.
  [[nodiscard]] bool declareValue(const Token &token, std::string &name) {
    if (token.quoted && token.text.empty())
      return error(token.getLoc(), "empty value name; unnamed values are "
                                   "written as numbers such as %0");
    if (isNumbered(token) && !token.suffix.empty())
      return error(token.getLoc(),
                   "unnamed value " +
                       token.spelling.drop_back(token.suffix.size() + 1) +
                       " cannot have a '#' suffix");
    auto inserted = values.emplace(keyOf(token), nullptr);
    if (!inserted.second)
      return error(token.getLoc(), "redefinition of value " + token.spelling);
    name = isNumbered(token) ? std::string() : token.text;
    return false;
  }

  void defineValue(const Token &token, Value *value) {
    values[keyOf(token)] = value;
  }

  /// operand ::= value-name | '_'
  [[nodiscard]] bool parseOperand(Value *&out) {
    if (consumeKeywordIf("_")) {
      out = nullptr;
      return false;
    }
    if (!tok.is(TokenKind::ValueName))
      return errorHere("expected value name or '_'");
    auto it = values.find(keyOf(tok));
    if (it == values.end() || !it->second)
      return errorHere("use of undefined value " + tok.spelling);
    out = it->second;
    consume();
    return false;
  }

  //===--------------------------------------------------------------------===//
  // Module
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseModule() {
    if (expectKeyword("module", "at the start of the module"))
      return true;
    if (consumeKeywordIf("attributes") && parseModuleAttributes())
      return true;
    if (expect(TokenKind::LBrace, "to open the module body") ||
        expectKeyword("graph", "in the module body") || parseGraph())
      return true;
    if (consumeKeywordIf("signature") && parseSignature())
      return true;
    if (expect(TokenKind::RBrace, "to close the module"))
      return true;
    if (!tok.is(TokenKind::Eof))
      return errorHere("unexpected text after the end of the module");
    return false;
  }

  [[nodiscard]] bool parseModuleAttributes() {
    if (expect(TokenKind::LBrace, "after 'attributes'"))
      return true;
    llvm::StringSet<> seen;
    return parseCommaList(TokenKind::RBrace, "in module attributes", [&] {
      if (!tok.is(TokenKind::Identifier))
        return errorHere("expected module attribute name");
      llvm::StringRef key = tok.spelling;
      if (!seen.insert(key).second)
        return errorHere("duplicate module attribute '" + key + "'");
      const char *keyLoc = tok.getLoc();
      consume();
      if (expect(TokenKind::Equal, "after module attribute name"))
        return true;
      if (key == "ir_version") {
        const char *valueLoc = tok.getLoc();
        if (parseInteger(module->irVersion, "ir_version"))
          return true;
        if (module->irVersion < kMinIrVersion ||
            module->irVersion > kMaxIrVersion)
          return error(valueLoc,
                       llvm::formatv("unsupported ONNX ir_version {0} (gmopt "
                                     "reads ir_version {1} to {2})",
                                     module->irVersion, kMinIrVersion,
                                     kMaxIrVersion)
                           .str());
        return false;
      }
      if (key == "model_version")
        return parseInteger(module->modelVersion, "model_version");
      if (key == "producer")
        return parseString(module->producerName, "producer name string");
      if (key == "producer_version")
        return parseString(module->producerVersion, "producer version string");
      if (key == "domain")
        return parseString(module->modelDomain, "domain string");
      if (key == "doc")
        return parseString(module->docString, "doc string");
      if (key == "opsets")
        return parseOpsets();
      if (key == "dims")
        return parseIntMap(module->dimBindings, "dimension symbol");
      if (key == "metadata")
        return parseMetadata();
      return error(keyLoc, "unknown module attribute '" + key + "'");
    });
  }

  /// '{' [key '=' int (',' ...)*] '}' with unique keys.
  [[nodiscard]] bool parseIntMap(std::map<std::string, int64_t> &out,
                                 llvm::StringRef what) {
    if (expect(TokenKind::LBrace, "to open the map"))
      return true;
    return parseCommaList(TokenKind::RBrace, "in map", [&] {
      const char *loc = tok.getLoc();
      std::string key;
      if (parseKey(key, what))
        return true;
      if (out.count(key))
        return error(loc, "duplicate " + what + " '" + key + "'");
      int64_t value;
      if (expect(TokenKind::Equal, "after key") ||
          parseInteger(value, "integer"))
        return true;
      out[key] = value;
      return false;
    });
  }

  /// '{' [domain '=' int (',' ...)*] '}' under ONNX import's rules: the
  /// standard domain (also spelled "ai.onnx", stored as "") at an opset
  /// gmopt supports, every version at least 1, each domain once.
  [[nodiscard]] bool parseOpsets() {
    if (expect(TokenKind::LBrace, "to open the map"))
      return true;
    return parseCommaList(TokenKind::RBrace, "in map", [&] {
      const char *loc = tok.getLoc();
      std::string domain;
      if (parseKey(domain, "opset domain"))
        return true;
      if (domain == "ai.onnx")
        domain = kOnnxDomain.str();
      if (module->opsetImports.count(domain))
        return error(loc, "duplicate opset domain '" + domain + "'");
      int64_t version;
      if (expect(TokenKind::Equal, "after key") ||
          parseInteger(version, "integer"))
        return true;
      if (version < 1)
        return error(loc, llvm::formatv("invalid opset version {0} for "
                                        "domain '{1}'",
                                        version, domain)
                              .str());
      if (domain.empty() &&
          (version < kMinOnnxOpset || version > kMaxOnnxOpset))
        return error(loc, llvm::formatv("unsupported opset {0} for domain '' "
                                        "(gmopt supports opsets {1} to {2})",
                                        version, kMinOnnxOpset, kMaxOnnxOpset)
                              .str());
      module->opsetImports[domain] = version;
      return false;
    });
  }

  [[nodiscard]] bool parseMetadata() {
    if (expect(TokenKind::LBrace, "to open the metadata"))
      return true;
    return parseCommaList(TokenKind::RBrace, "in metadata", [&] {
      std::string key, value;
      if (parseKey(key, "metadata key") ||
          expect(TokenKind::Equal, "after metadata key") ||
          parseString(value, "metadata value string"))
        return true;
      module->metadata.emplace_back(std::move(key), std::move(value));
      return false;
    });
  }

  //===--------------------------------------------------------------------===//
  // Graph
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseGraph() {
    if (!tok.is(TokenKind::GraphName))
      return errorHere("expected graph name such as @main");
    graph.setName(tok.text);
    consume();
    if (expect(TokenKind::LParen, "to open the graph inputs") ||
        parseCommaList(TokenKind::RParen, "in graph inputs",
                       [&] { return parseInput(); }) ||
        expect(TokenKind::LBrace, "to open the graph body"))
      return true;
    while (!tok.isKeyword("return")) {
      if (tok.is(TokenKind::RBrace) || tok.is(TokenKind::Eof))
        return errorHere("expected 'return' at the end of the graph body");
      if (parseStatement())
        return true;
    }
    consume();
    if (!tok.is(TokenKind::RBrace)) {
      while (true) {
        Value *output;
        if (parseOperand(output))
          return true;
        graph.addOutput(output);
        if (!consumeIf(TokenKind::Comma))
          break;
      }
    }
    return expect(TokenKind::RBrace, "after the return statement");
  }

  /// input ::= value-name ':' type ['=' (dense | tensor-literal)]
  [[nodiscard]] bool parseInput() {
    if (!tok.is(TokenKind::ValueName))
      return errorHere("expected graph input name");
    Token nameToken = tok;
    std::string name;
    if (declareValue(nameToken, name))
      return true;
    consume();
    if (!tok.is(TokenKind::Colon)) {
      if (!nameToken.quoted && llvm::StringRef(nameToken.text).contains(':'))
        return errorHere("expected ':' after value name (a ':' followed by a "
                         "name character continues the name: write '%x: "
                         "f32[...]')");
      return errorHere("expected ':' after value name");
    }
    consume();
    TensorType type;
    const char *typeLoc = tok.getLoc();
    if (parseType(type))
      return true;
    TensorData data;
    if (consumeIf(TokenKind::Equal)) {
      if (tok.is(TokenKind::Identifier) && !tok.isKeyword("dense")) {
        if (parseTensorLiteral(data))
          return true;
      } else if (parseDense(type, typeLoc, data)) {
        return true;
      }
    }
    Value *input = graph.addInput(type, name);
    if (!data.isNull())
      input->setData(std::move(data));
    defineValue(nameToken, input);
    return false;
  }

  /// statement ::= initializer | node
  [[nodiscard]] bool parseStatement() {
    // Result tokens; an absent result is a token of kind Eof.
    llvm::SmallVector<Token, 2> results;
    if (tok.is(TokenKind::ValueName) || tok.isKeyword("_")) {
      while (true) {
        if (consumeKeywordIf("_")) {
          results.emplace_back();
        } else if (tok.is(TokenKind::ValueName)) {
          results.push_back(tok);
          consume();
        } else {
          return errorHere("expected result name or '_'");
        }
        if (!consumeIf(TokenKind::Comma))
          break;
      }
      if (expect(TokenKind::Equal, "after results"))
        return true;
    }
    llvm::SmallVector<std::string, 2> names(results.size());
    for (size_t i = 0, e = results.size(); i != e; ++i)
      if (results[i].is(TokenKind::ValueName) &&
          declareValue(results[i], names[i]))
        return true;

    if (tok.isKeyword("constant")) {
      if (results.size() != 1 || !results[0].is(TokenKind::ValueName))
        return errorHere("'constant' defines exactly one named value");
      consume();
      return parseInitializer(results[0], names[0]);
    }
    return parseNode(results, names);
  }

  /// initializer ::= value-name '=' 'constant' ['literal'] tensor-literal
  ///                   [':' type]
  [[nodiscard]] bool parseInitializer(const Token &nameToken,
                                      const std::string &name) {
    bool literal = false;
    if (tok.isKeyword("literal")) {
      literal = true;
      consume();
    }
    TensorData data;
    if (parseTensorLiteral(data))
      return true;
    TensorType type = data.getType();
    if (consumeIf(TokenKind::Colon) && parseType(type))
      return true;
    Value *init = graph.addInitializer(std::move(data), name);
    init->setType(type);
    init->setLiteral(literal);
    defineValue(nameToken, init);
    return false;
  }

  /// op-name ::= identifier | string '.' string
  [[nodiscard]] bool parseOpName(OpName &op) {
    if (tok.is(TokenKind::Identifier)) {
      llvm::StringRef spelling = tok.spelling;
      size_t dot = spelling.rfind('.');
      if (dot == llvm::StringRef::npos) {
        op.type = spelling.str();
      } else {
        op.domain = spelling.take_front(dot).str();
        op.type = spelling.drop_front(dot + 1).str();
      }
      if (op.type.empty())
        return errorHere("op name '" + spelling + "' has no op type after '.'");
      consume();
      return false;
    }
    if (tok.is(TokenKind::String)) {
      op.domain = std::move(tok.text);
      consume();
      if (expect(TokenKind::Dot, "between quoted op domain and type"))
        return true;
      return parseKey(op.type, "op type after the quoted domain");
    }
    return errorHere("expected op name");
  }

  [[nodiscard]] bool parseNode(llvm::ArrayRef<Token> results,
                               llvm::ArrayRef<std::string> names) {
    OpName op;
    llvm::SmallVector<Value *, 4> operands;
    if (parseOpName(op) || expect(TokenKind::LParen, "after op name") ||
        parseCommaList(TokenKind::RParen, "in operand list", [&] {
          Value *operand;
          if (parseOperand(operand))
            return true;
          operands.push_back(operand);
          return false;
        }))
      return true;
    Node *node =
        graph.createNode(graph.end(), std::move(op), operands, results.size());
    if (consumeIf(TokenKind::LBrace) && parseAttributeDict(node))
      return true;

    unsigned numPresent = 0;
    for (const Token &result : results)
      numPresent += result.is(TokenKind::ValueName);
    llvm::SmallVector<TensorType, 2> types;
    if (tok.is(TokenKind::Colon)) {
      const char *colonLoc = tok.getLoc();
      consume();
      if (consumeIf(TokenKind::LParen)) {
        if (parseCommaList(TokenKind::RParen, "in result types",
                           [&] { return parseType(types.emplace_back()); }))
          return true;
      } else if (parseType(types.emplace_back())) {
        return true;
      }
      if (types.size() != numPresent)
        return error(colonLoc, "node has " + llvm::Twine(numPresent) +
                                   " results but " + llvm::Twine(types.size()) +
                                   " result types");
    }
    if (consumeKeywordIf("name")) {
      std::string nodeName;
      if (parseString(nodeName, "node name string"))
        return true;
      node->setName(nodeName);
    }
    if (consumeKeywordIf("phase")) {
      std::optional<Phase> phase;
      if (tok.is(TokenKind::Identifier))
        phase = parsePhaseName(tok.spelling);
      if (!phase)
        return errorHere("expected 'forward', 'backward', 'optimizer' or "
                         "'recompute' after 'phase'");
      consume();
      node->setPhase(*phase);
    }
    if (consumeKeywordIf("stream")) {
      NumberLiteral lit;
      uint64_t stream;
      if (parseNumber(lit, "stream id") || magnitudeOf(lit, stream))
        return true;
      if (lit.negative)
        return error(lit.loc, "a stream id is not negative");
      node->setStreamId(stream);
    }

    unsigned typeIndex = 0;
    for (unsigned i = 0, e = results.size(); i != e; ++i) {
      if (!results[i].is(TokenKind::ValueName)) {
        graph.dropResult(node, i);
        continue;
      }
      Value *result = node->getResult(i);
      result->setName(names[i]);
      if (!types.empty())
        result->setType(types[typeIndex++]);
      defineValue(results[i], result);
    }
    return false;
  }

  //===--------------------------------------------------------------------===//
  // Signature
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseSignature() {
    if (expect(TokenKind::LBrace, "after 'signature'"))
      return true;
    TrainingSignature &sig = module->getSignature();
    llvm::StringSet<> seen;
    while (!consumeIf(TokenKind::RBrace)) {
      if (consumeKeywordIf("param")) {
        if (parseParam())
          return true;
        continue;
      }
      if (consumeKeywordIf("data")) {
        llvm::SmallVector<Value *, 4> dataInputs;
        if (parseValueList(dataInputs))
          return true;
        for (Value *data : dataInputs)
          sig.addDataInput(data);
        continue;
      }
      std::function<void(Value *)> set;
      if (tok.isKeyword("loss"))
        set = [&](Value *v) { sig.setLoss(v); };
      else if (tok.isKeyword("loss_grad_seed"))
        set = [&](Value *v) { sig.setLossGradSeed(v); };
      else if (tok.isKeyword("lazy_reset_grad"))
        set = [&](Value *v) { sig.setLazyResetGrad(v); };
      else if (tok.is(TokenKind::Identifier))
        if (std::optional<StepSlot> slot = parseStepSlotName(tok.spelling))
          set = [&sig, slot = *slot](Value *v) { sig.setStepSlot(slot, v); };
      if (!set)
        return errorHere("expected 'param', 'data', 'loss', "
                         "'loss_grad_seed', 'lazy_reset_grad', "
                         "'learning_rate', 'step_count', 'loss_scale', "
                         "'loss_scale_good_steps' or "
                         "'}' in signature");
      if (!seen.insert(tok.spelling).second)
        return errorHere("duplicate '" + tok.spelling + "' in signature");
      consume();
      Value *value;
      if (parseOperand(value))
        return true;
      set(value);
    }
    return false;
  }

  /// operand (',' operand)*
  [[nodiscard]] bool parseValueList(llvm::SmallVectorImpl<Value *> &out) {
    while (true) {
      if (parseOperand(out.emplace_back()))
        return true;
      if (!consumeIf(TokenKind::Comma))
        return false;
    }
  }

  /// 'param' operand ('trainable' | 'frozen') ['grad' operand]
  /// ['accumulator' operand] ['via' node-ref] ['state' operand-list]
  [[nodiscard]] bool parseParam() {
    ParamInfo param;
    if (parseOperand(param.param))
      return true;
    if (consumeKeywordIf("trainable"))
      param.trainable = true;
    else if (consumeKeywordIf("frozen"))
      param.trainable = false;
    else
      return errorHere("expected 'trainable' or 'frozen' after parameter");
    if (consumeKeywordIf("grad") && parseOperand(param.grad))
      return true;
    if (consumeKeywordIf("accumulator") && parseOperand(param.accumulator))
      return true;
    if (consumeKeywordIf("via") && parseNodeRef(param.accumulateNode))
      return true;
    if (consumeKeywordIf("state")) {
      llvm::SmallVector<Value *, 2> state;
      if (parseValueList(state))
        return true;
      param.optimizerState.assign(state.begin(), state.end());
    }
    module->getSignature().appendParam(std::move(param));
    return false;
  }

  /// node-ref ::= value-name | string | int
  [[nodiscard]] bool parseNodeRef(Node *&out) {
    if (tok.is(TokenKind::ValueName)) {
      Token valueToken = tok;
      Value *value;
      if (parseOperand(value))
        return true;
      out = value->getDefiningNode();
      if (!out)
        return error(valueToken.getLoc(),
                     "value " + valueToken.spelling + " is not a node result");
      return false;
    }
    if (tok.is(TokenKind::String)) {
      out = nullptr;
      for (Node &node : graph.getNodes()) {
        if (node.getName() != tok.text)
          continue;
        if (out)
          return errorHere("more than one node is named '" + tok.text + "'");
        out = &node;
      }
      if (!out)
        return errorHere("no node is named '" + tok.text + "'");
      consume();
      return false;
    }
    if (tok.is(TokenKind::Integer)) {
      const char *loc = tok.getLoc();
      int64_t index;
      if (parseInteger(index, "node index"))
        return true;
      if (index < 0 || static_cast<uint64_t>(index) >= graph.getNumNodes())
        return error(loc,
                     "node index " + llvm::Twine(index) + " is out of range");
      auto it = graph.getNodes().begin();
      std::advance(it, index);
      out = &*it;
      return false;
    }
    return errorHere("expected a node: a result value, a node name string or "
                     "a node index");
  }

  Lexer lexer;
  Token tok;
  llvm::StringRef bufferName;
  std::unique_ptr<Module> module;
  Graph &graph;
  std::map<ValueKey, Value *> values;
  bool failed = false;
  std::string errorMessage;
};

} // namespace

llvm::Expected<std::unique_ptr<Module>>
gmopt::parseModule(llvm::StringRef text, llvm::StringRef bufferName) {
  return Parser(text, bufferName).run();
}
