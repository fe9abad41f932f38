"""Writes a forward-only Llama-style decoder as gmopt text IR, without weights.

The graph is what a forward export holds: token embedding, per layer an RMS
norm (Pow, ReduceMean, Add, Sqrt, Div, Mul), q/k/v projections, rotary
embeddings (rotate-half with Slice, Neg, Concat; cos/sin tables as inputs),
causal attention (MatMul, Div, Add of a mask input - or, with --mask where,
a Where of a bool causal input and a constant fill, as GPT-2 exports it -
then Softmax, MatMul), the output projection, a SwiGLU FFN (Sigmoid, Mul) and residual Adds; a final
norm and an untied LM head whose logits are the only output. Every weight
is a graph input with a shape and no value, so compiling it needs shapes
only. Defaults: Llama-2 7B's width (d_model 4096, 32 heads, FFN 11008,
vocabulary 32000).

    python3 llama_forward.py --layers 2 --seq 2048 > llama.gmir
"""

import argparse


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--ffn", type=int, default=11008)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--mask", choices=["add", "where"], default="add",
                        help="add: an f32 mask input added to the scores; where: a bool "
                             "causal input selecting the scores or a constant fill, as "
                             "GPT-2's export does")
    args = parser.parse_args()

    b, s, d, h, f, v = (args.batch, args.seq, args.d_model, args.heads,
                        args.ffn, args.vocab)
    hd = d // h
    half = hd // 2
    inputs = [
        f"%input_ids: i64[{b},{s}]",
        f"%input_mask: f32[1,1,{s},{s}]" if args.mask == "add"
        else f"%input_keep: bool[1,1,{s},{s}]",
        f"%cos: f32[1,1,{s},{hd}]",
        f"%sin: f32[1,1,{s},{hd}]",
        f"%embed.weight: f32[{v},{d}]",
    ]
    body = []
    consts = {}

    def const(values):
        key = tuple(values)
        if key not in consts:
            name = f"%c{len(consts)}"
            consts[key] = name
            body.append(f"{name} = constant i64[{len(values)}] dense<[{', '.join(map(str, values))}]>")
        return consts[key]

    counter = [0]

    def node(op, operands, type_, attrs=""):
        counter[0] += 1
        name = f"%t{counter[0]}"
        attr_text = f" {{{attrs}}}" if attrs else ""
        body.append(f"{name} = {op}({', '.join(operands)}){attr_text} : {type_}")
        return name

    body.append("%two = constant f32[] dense<2.0>")
    body.append("%eps = constant f32[] dense<1e-05>")
    body.append(f"%scale = constant f32[] dense<{float(hd) ** 0.5}>")
    act = f"f32[{b},{s},{d}]"

    def rms_norm(x, weight):
        square = node("Pow", [x, "%two"], act)
        mean = node("ReduceMean", [square], f"f32[{b},{s},1]", "axes = [-1], keepdims = 1")
        shifted = node("Add", [mean, "%eps"], f"f32[{b},{s},1]")
        root = node("Sqrt", [shifted], f"f32[{b},{s},1]")
        normed = node("Div", [x, root], act)
        return node("Mul", [normed, weight], act)

    def heads(x):
        split = node("Reshape", [x, const([b, s, h, hd])], f"f32[{b},{s},{h},{hd}]")
        return node("Transpose", [split], f"f32[{b},{h},{s},{hd}]", "perm = [0, 2, 1, 3]")

    def rotary(x):
        t = f"f32[{b},{h},{s},{hd}]"
        ht = f"f32[{b},{h},{s},{half}]"
        first = node("Slice", [x, const([0]), const([half]), const([3])], ht)
        second = node("Slice", [x, const([half]), const([hd]), const([3])], ht)
        negated = node("Neg", [second], ht)
        rotated = node("Concat", [negated, first], t, "axis = 3")
        return node("Add", [node("Mul", [x, "%cos"], t), node("Mul", [rotated, "%sin"], t)], t)

    x = node("Gather", ["%embed.weight", "%input_ids"], act, "axis = 0")
    for layer in range(args.layers):
        p = f"layers.{layer}"
        for name, shape in [("attn_norm.weight", [d]), ("q.weight", [d, d]), ("k.weight", [d, d]),
                            ("v.weight", [d, d]), ("o.weight", [d, d]), ("ffn_norm.weight", [d]),
                            ("gate.weight", [d, f]), ("up.weight", [d, f]), ("down.weight", [f, d])]:
            inputs.append(f"%{p}.{name}: f32[{','.join(map(str, shape))}]")
        normed = rms_norm(x, f"%{p}.attn_norm.weight")
        q = rotary(heads(node("MatMul", [normed, f"%{p}.q.weight"], act)))
        k = rotary(heads(node("MatMul", [normed, f"%{p}.k.weight"], act)))
        vv = heads(node("MatMul", [normed, f"%{p}.v.weight"], act))
        kt = node("Transpose", [k], f"f32[{b},{h},{hd},{s}]", "perm = [0, 1, 3, 2]")
        st = f"f32[{b},{h},{s},{s}]"
        scores = node("Div", [node("MatMul", [q, kt], st), "%scale"], st)
        if args.mask == "add":
            masked = node("Add", [scores, "%input_mask"], st)
        else:
            if layer == 0:
                body.append("%fill = constant f32[] dense<-10000.0>")
            masked = node("Where", ["%input_keep", scores, "%fill"], st)
        probs = node("Softmax", [masked], st, "axis = -1")
        context = node("MatMul", [probs, vv], f"f32[{b},{h},{s},{hd}]")
        merged = node("Reshape", [node("Transpose", [context], f"f32[{b},{s},{h},{hd}]", "perm = [0, 2, 1, 3]"),
                                  const([b, s, d])], act)
        x = node("Add", [x, node("MatMul", [merged, f"%{p}.o.weight"], act)], act)
        normed = rms_norm(x, f"%{p}.ffn_norm.weight")
        ft = f"f32[{b},{s},{f}]"
        gate = node("MatMul", [normed, f"%{p}.gate.weight"], ft)
        silu = node("Mul", [gate, node("Sigmoid", [gate], ft)], ft)
        up = node("MatMul", [normed, f"%{p}.up.weight"], ft)
        x = node("Add", [x, node("MatMul", [node("Mul", [silu, up], ft), f"%{p}.down.weight"], act)], act)
    inputs += [f"%norm.weight: f32[{d}]", f"%lm_head.weight: f32[{d},{v}]"]
    x = rms_norm(x, "%norm.weight")
    body.append(f"%logits = MatMul({x}, %lm_head.weight) : f32[{b},{s},{v}]")

    print('module attributes {opsets = {"" = 17}} {')
    print("  graph @llama_forward(")
    print(",\n".join("      " + i for i in inputs))
    print("  ) {")
    for line in body:
        print("    " + line)
    print("    return %logits")
    print("  }")
    print("}")


if __name__ == "__main__":
    main()
