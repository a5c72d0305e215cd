#!/usr/bin/env python3
"""apps/scripts/optim_reference.py: checks tests/test_optim_adamw_lamb.cpp's oracle against PyTorch.

The C++ test compares tandem's AdamW and LAMB with f64 formulas written in the test (the CI
oracle, since CI has no torch). This script recomputes the same problem - the same parameters,
the same gradient sequence g_t[i] = sin(i + t + k/2) * (1 + 0.3 k), the same hyperparameters - in
three ways and checks that they agree to 1e-6 relative:
  1. the formulas, in plain Python floats (f64), exactly as the test writes them;
  2. torch.optim.AdamW on float64 tensors (when torch is installed);
  3. a LAMB written with torch tensor ops following apex's FusedLAMB (bias correction, adam_w_mode,
     trust ratio ||w|| / ||u||, 1 when either norm is 0), and apex.optimizers.FusedLAMB itself on a
     GPU when apex is installed (f32 there, so checked to 1e-5).
It prints the final parameters of each run so a person can compare them with the test's numbers.
Exit status: 0 when everything that could run agreed, 1 otherwise. Without torch only (1) runs.

Usage: python3 apps/scripts/optim_reference.py
"""
import math
import sys

NAMES = ["layer.weight", "layer.bias", "head.weight"]
SHAPES = [(3, 4), (5,), (7,)]
STEPS = 6
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.1)
LAMB = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-6, wd=0.1)
# (parameter, step) whose gradient is missing in the "skip" runs: that parameter keeps its own step.
SKIPS = {"adamw": (1, 3), "lamb": (2, 2)}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def initial(k):
    n = numel(SHAPES[k])
    if k == 0:
        return [0.5 * math.cos(i) for i in range(n)]
    if k == 1:
        return [0.0] * n
    return [0.1 * (i - 3) for i in range(n)]


def grad_at(k, i, t):
    return math.sin(i + t + 0.5 * k) * (1.0 + 0.3 * k)


def formula(lamb, h, skip=(99, 0)):
    """The test's reference, line for line."""
    w = [initial(k) for k in range(len(NAMES))]
    m = [[0.0] * len(x) for x in w]
    v = [[0.0] * len(x) for x in w]
    steps = [0] * len(NAMES)
    for t in range(1, STEPS + 1):
        for k in range(len(NAMES)):
            if (k, t) == skip:
                continue
            steps[k] += 1
            s = steps[k]
            bc1, bc2 = 1 - h["beta1"] ** s, 1 - h["beta2"] ** s
            u = [0.0] * len(w[k])
            wn = un = 0.0
            for i in range(len(w[k])):
                g = grad_at(k, i, t)
                m[k][i] = h["beta1"] * m[k][i] + (1 - h["beta1"]) * g
                v[k][i] = h["beta2"] * v[k][i] + (1 - h["beta2"]) * g * g
                m_hat, v_hat = m[k][i] / bc1, v[k][i] / bc2
                if lamb:
                    u[i] = m_hat / (math.sqrt(v_hat) + h["eps"]) + h["wd"] * w[k][i]
                    wn += w[k][i] ** 2
                    un += u[i] ** 2
                else:
                    w[k][i] *= 1 - h["lr"] * h["wd"]
                    w[k][i] -= h["lr"] * m_hat / (math.sqrt(v_hat) + h["eps"])
            if lamb:
                trust = math.sqrt(wn) / math.sqrt(un) if wn > 0 and un > 0 else 1.0
                for i in range(len(w[k])):
                    w[k][i] -= h["lr"] * trust * u[i]
    return w


def torch_params(torch, dtype, device):
    return [torch.tensor(initial(k), dtype=dtype, device=device).reshape(SHAPES[k]).requires_grad_(True)
            for k in range(len(NAMES))]


def set_grads(torch, params, t, skip):
    for k, p in enumerate(params):
        if (k, t) == skip:
            p.grad = None
        else:
            g = [grad_at(k, i, t) for i in range(numel(SHAPES[k]))]
            p.grad = torch.tensor(g, dtype=p.dtype, device=p.device).reshape(SHAPES[k])


def torch_adamw(torch, skip=(99, 0)):
    h = ADAMW
    params = torch_params(torch, torch.float64, "cpu")
    opt = torch.optim.AdamW(params, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                            weight_decay=h["wd"], amsgrad=False)
    for t in range(1, STEPS + 1):
        set_grads(torch, params, t, skip)
        opt.step()
    return [p.detach().reshape(-1).tolist() for p in params]


def torch_lamb(torch, skip=(99, 0)):
    """LAMB with torch ops, as apex FusedLAMB (adam_w_mode=True, bias_correction=True, no clipping)."""
    h = LAMB
    params = torch_params(torch, torch.float64, "cpu")
    state = [dict(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p)) for p in params]
    with torch.no_grad():
        for t in range(1, STEPS + 1):
            set_grads(torch, params, t, skip)
            for p, st in zip(params, state):
                if p.grad is None:
                    continue
                st["step"] += 1
                s = st["step"]
                st["m"].mul_(h["beta1"]).add_(p.grad, alpha=1 - h["beta1"])
                st["v"].mul_(h["beta2"]).addcmul_(p.grad, p.grad, value=1 - h["beta2"])
                m_hat = st["m"] / (1 - h["beta1"] ** s)
                v_hat = st["v"] / (1 - h["beta2"] ** s)
                u = m_hat / (v_hat.sqrt() + h["eps"]) + h["wd"] * p
                wn, un = p.norm().item(), u.norm().item()
                trust = wn / un if wn > 0 and un > 0 else 1.0
                p.add_(u, alpha=-h["lr"] * trust)
    return [p.detach().reshape(-1).tolist() for p in params]


def apex_lamb(torch):
    """apex's own FusedLAMB on the GPU (f32), or None when apex or a GPU is missing."""
    try:
        from apex.optimizers import FusedLAMB  # noqa: PLC0415 - optional dependency
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    h = LAMB
    params = torch_params(torch, torch.float32, "cuda")
    # max_grad_norm=0 disables apex's built-in clipping; use_nvlamb=True applies the trust ratio to
    # every parameter, as tandem does (apex skips it for weight_decay == 0 groups otherwise).
    opt = FusedLAMB(params, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"], weight_decay=h["wd"],
                    bias_correction=True, adam_w_mode=True, max_grad_norm=0.0, use_nvlamb=True)
    for t in range(1, STEPS + 1):
        set_grads(torch, params, t, (99, 0))
        opt.step()
    return [p.detach().double().cpu().reshape(-1).tolist() for p in params]


def compare(what, got, want, rtol, atol):
    worst = 0.0
    ok = True
    for k in range(len(want)):
        for i in range(len(want[k])):
            d = abs(got[k][i] - want[k][i])
            worst = max(worst, d / max(abs(want[k][i]), 1e-300))
            if d > atol + rtol * abs(want[k][i]):
                if ok:
                    print(f"  MISMATCH {what}: {NAMES[k]}[{i}] got {got[k][i]!r} want {want[k][i]!r}")
                ok = False
    print(f"{'ok  ' if ok else 'FAIL'} {what}: worst relative difference {worst:.3g} (tolerance {rtol:g})")
    return ok


def show(what, w):
    print(f"{what}:")
    for k, name in enumerate(NAMES):
        print(f"  {name}: {{{', '.join(f'{x:.17g}' for x in w[k])}}}")


def main():
    ok = True
    ref = {
        "adamw": formula(False, ADAMW),
        "lamb": formula(True, LAMB),
        "adamw_skip": formula(False, ADAMW, SKIPS["adamw"]),
        "lamb_skip": formula(True, LAMB, SKIPS["lamb"]),
    }
    show("formula AdamW (f64)", ref["adamw"])
    show("formula LAMB (f64)", ref["lamb"])
    try:
        import torch  # noqa: PLC0415 - optional dependency
    except ImportError:
        print("torch is not installed: only the formulas ran (the C++ test checks tandem against them).")
        return 0
    print(f"torch {torch.__version__}")
    ok &= compare("torch.optim.AdamW vs formula", torch_adamw(torch), ref["adamw"], 1e-6, 1e-12)
    ok &= compare("torch.optim.AdamW, skipped gradient", torch_adamw(torch, SKIPS["adamw"]), ref["adamw_skip"],
                  1e-6, 1e-12)
    ok &= compare("torch LAMB vs formula", torch_lamb(torch), ref["lamb"], 1e-6, 1e-12)
    ok &= compare("torch LAMB, skipped gradient", torch_lamb(torch, SKIPS["lamb"]), ref["lamb_skip"], 1e-6, 1e-12)
    apex = apex_lamb(torch)
    if apex is None:
        print("apex (or a GPU) is not available: skipped apex FusedLAMB")
    else:
        ok &= compare("apex FusedLAMB (f32, GPU) vs formula", apex, ref["lamb"], 1e-5, 1e-7)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
