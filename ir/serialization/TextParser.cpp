//===- TextParser.cpp - Parsing the text form of a module -----------------===//
//
// A recursive-descent parser for gmopt's textual IR, the inverse of
// TextPrinter.cpp. It builds the module exactly as written: node order is
// the schedule, result types are taken from the text (no inference runs
// here; tools verify afterwards), names, attributes and constant bytes are
// kept bit for bit. The grammar has no unbounded nesting, so no input can
// exhaust the stack; every malformed input yields one error
// `BUFFER:LINE:COL: message` (1-based) instead of a crash. The Parser class
// is declared in TextParser.h; this file reads values, the module, its
// graph, nodes and signature, TextLiteralParser.cpp the numbers, strings,
// types, dense constants and attributes they contain.
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

#include "ir/serialization/TextParser.h"
#include "ir/Module.h"
#include "ir/SizeLimits.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"

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

bool Parser::isNumbered(const Token &token) {
  return !token.quoted && llvm::all_of(token.text, llvm::isDigit);
}

ValueKey Parser::keyOf(const Token &token) {
  return ValueKey(isNumbered(token), token.text, token.suffix.str());
}

/// Checks that the ValueName token \p token may define a new value and
/// reserves its id (so later uses before the definition completes are
/// still "undefined"). Returns the ONNX name in \p name.
bool Parser::declareValue(const Token &token, std::string &name) {
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

void Parser::defineValue(const Token &token, Value *value) {
  values[keyOf(token)] = value;
}

/// operand ::= value-name | '_'
bool Parser::parseOperand(Value *&out) {
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

bool Parser::parseModule() {
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

bool Parser::parseModuleAttributes() {
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
bool Parser::parseIntMap(std::map<std::string, int64_t> &out,
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
    if (expect(TokenKind::Equal, "after key") || parseInteger(value, "integer"))
      return true;
    out[key] = value;
    return false;
  });
}

/// '{' [domain '=' int (',' ...)*] '}' under ONNX import's rules: the
/// standard domain (also spelled "ai.onnx", stored as "") at an opset
/// gmopt supports, every version at least 1, each domain once.
bool Parser::parseOpsets() {
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
    if (domain.empty() && (version < kMinOnnxOpset || version > kMaxOnnxOpset))
      return error(loc, llvm::formatv("unsupported opset {0} for domain '' "
                                      "(gmopt supports opsets {1} to {2})",
                                      version, kMinOnnxOpset, kMaxOnnxOpset)
                            .str());
    module->opsetImports[domain] = version;
    return false;
  });
}

bool Parser::parseMetadata() {
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

bool Parser::parseGraph() {
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
bool Parser::parseInput() {
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
bool Parser::parseStatement() {
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
bool Parser::parseInitializer(const Token &nameToken, const std::string &name) {
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
bool Parser::parseOpName(OpName &op) {
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

bool Parser::parseNode(llvm::ArrayRef<Token> results,
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

bool Parser::parseSignature() {
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
bool Parser::parseValueList(llvm::SmallVectorImpl<Value *> &out) {
  while (true) {
    if (parseOperand(out.emplace_back()))
      return true;
    if (!consumeIf(TokenKind::Comma))
      return false;
  }
}

/// 'param' operand ('trainable' | 'frozen') ['grad' operand]
/// ['accumulator' operand] ['via' node-ref] ['state' operand-list]
bool Parser::parseParam() {
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
bool Parser::parseNodeRef(Node *&out) {
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

llvm::Expected<std::unique_ptr<Module>>
gmopt::parseModule(llvm::StringRef text, llvm::StringRef bufferName) {
  return Parser(text, bufferName).run();
}
