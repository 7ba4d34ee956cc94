#!/usr/bin/python3
"""tests/sim/gpt_reference.py: trickle-sim's GPT (examples/sim/gpt.hpp) rebuilt in PyTorch, for tests/sim/test_gpt.cpp.

Builds the same decoder-only transformer as the C++ model — token and position
embeddings, pre-LayerNorm blocks of causal multi-head attention and a 4x GELU (tanh
approximation) MLP, a final LayerNorm, an output layer tied to the token embedding — with
the same deterministic weights and tokens (formulas both sides compute: see `weights`
and `tokens`), runs it in float64 and prints the loss and gradients as the C++
initialisers test_gpt.cpp records.

To regenerate the recorded values (needs torch; Debian's /usr/bin/python3 has it here):
    /usr/bin/python3 tests/sim/gpt_reference.py
and paste the output over the `recorded` block in tests/sim/test_gpt.cpp.
"""
import math

import torch

# The tiny configuration; test_gpt.cpp's reference_config() must say the same.
VOCAB, CONTEXT, D_MODEL, HEADS, LAYERS = 7, 6, 8, 2, 2
TEXT_LEN, POSITIONS = 16, (6, 13)  # windows end at these target positions
EPS = 1e-5


def layout():
    """(name, rows, cols) of every tensor, in gpt.hpp's order; weights are [in x out]."""
    d, f = D_MODEL, 4 * D_MODEL
    t = [("tok_embedding", VOCAB, d), ("pos_embedding", CONTEXT, d)]
    for l in range(LAYERS):
        p = f"block{l}."
        t += [(p + "ln1.weight", 1, d), (p + "ln1.bias", 1, d),
              (p + "attn.qkv.weight", d, 3 * d), (p + "attn.qkv.bias", 1, 3 * d),
              (p + "attn.proj.weight", d, d), (p + "attn.proj.bias", 1, d),
              (p + "ln2.weight", 1, d), (p + "ln2.bias", 1, d),
              (p + "mlp.fc.weight", d, f), (p + "mlp.fc.bias", 1, f),
              (p + "mlp.proj.weight", f, d), (p + "mlp.proj.bias", 1, d)]
    t += [("ln_f.weight", 1, d), ("ln_f.bias", 1, d)]
    return t


def formula(name, j, i):
    """Element i of tensor j: LayerNorm gains near 1, biases small, matrices of order 1,
    so attention is far from uniform and every tensor's gradient is sizeable."""
    s = math.sin(1.3 * i + 0.7 * j + 0.1)
    if name.startswith("ln") or ".ln" in name:
        return 1.0 + 0.2 * s if name.endswith("weight") else 0.1 * s
    if name.endswith("bias"):
        return 0.1 * s
    return 0.5 * s


def weights():
    out = {}
    for j, (name, rows, cols) in enumerate(layout()):
        # Rounded to float32 as the C++ side stores them, then used in float64.
        vals = [float(torch.tensor(formula(name, j, i), dtype=torch.float32)) for i in range(rows * cols)]
        out[name] = torch.tensor(vals, dtype=torch.float64).reshape(rows, cols).requires_grad_(True)
    return out


def tokens():
    return [(3 * i * i + 5 * i + 1) % VOCAB for i in range(TEXT_LEN)]


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (D_MODEL,), w.reshape(-1), b.reshape(-1), EPS)


def loss(w):
    tok = tokens()
    T, D, H = CONTEXT, D_MODEL, HEADS
    hd = D // H
    inputs = torch.tensor([[tok[p - T + t] for t in range(T)] for p in POSITIONS])
    targets = torch.tensor([[tok[p - T + 1 + t] for t in range(T)] for p in POSITIONS])
    B = len(POSITIONS)
    x = w["tok_embedding"][inputs] + w["pos_embedding"][torch.arange(T)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(LAYERS):
        p = f"block{l}."
        h = layer_norm(x, w[p + "ln1.weight"], w[p + "ln1.bias"])
        qkv = h @ w[p + "attn.qkv.weight"] + w[p + "attn.qkv.bias"].reshape(-1)
        q, k, v = qkv.split(D, dim=-1)
        q = q.reshape(B, T, H, hd).transpose(1, 2)
        k = k.reshape(B, T, H, hd).transpose(1, 2)
        v = v.reshape(B, T, H, hd).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores.masked_fill(~mask, float("-inf"))
        att = torch.softmax(scores, dim=-1) @ v
        att = att.transpose(1, 2).reshape(B, T, D)
        x = x + att @ w[p + "attn.proj.weight"] + w[p + "attn.proj.bias"].reshape(-1)
        h = layer_norm(x, w[p + "ln2.weight"], w[p + "ln2.bias"])
        h = gelu(h @ w[p + "mlp.fc.weight"] + w[p + "mlp.fc.bias"].reshape(-1))
        x = x + h @ w[p + "mlp.proj.weight"] + w[p + "mlp.proj.bias"].reshape(-1)
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    logits = x @ w["tok_embedding"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def main():
    w = weights()
    L = loss(w)
    L.backward()
    print(f"// torch {torch.__version__}, float64: /usr/bin/python3 tests/sim/gpt_reference.py")
    print(f"constexpr double recorded_loss = {L.item():.17g};")
    print("// name, gradient element 0, element size/2, last element, L2 norm")
    print("const recorded_grad recorded[] = {")
    for name, rows, cols in layout():
        g = w[name].grad.reshape(-1)
        n = rows * cols
        print(f'    {{"{name}", {g[0].item():.17g}, {g[n // 2].item():.17g}, {g[n - 1].item():.17g}, '
              f"{g.norm().item():.17g}}},")
    print("};")


if __name__ == "__main__":
    main()
