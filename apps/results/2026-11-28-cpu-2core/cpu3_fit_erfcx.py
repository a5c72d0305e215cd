#!/usr/bin/env python3
"""The fit behind core/ops/common/cpu/f32_math.h's normal_cdf: erfcx(a) = e^(a^2) erfc(a) as a
degree-9 polynomial R(t) in t = 1 / (1 + 0.3 a), for 0 <= a <= 9.5 (beyond, e^(-a^2) underflows f32
and Phi is exactly 0 or 1). Lawson's iteration (reweighted least squares) towards the minimax fit
in relative error, on Chebyshev nodes. Prints the f32 coefficients (highest degree first, the
Horner order of the header) and their worst relative error on a dense grid (2.1e-8).
Run with /usr/bin/python3 (Debian's numpy and scipy)."""
import numpy as np
from scipy.special import erfcx

P, DEG, AMAX = 0.3, 9, 9.5
t0 = 1 / (1 + P * AMAX)
n = 600
u = 0.5 * (1 - np.cos(np.pi * (np.arange(n) + 0.5) / n))
t = t0 + (1 - t0) * u
y = erfcx((1 / t - 1) / P)
V = np.vander(t, DEG + 1, increasing=True) / y[:, None]  # relative error: divide by the target
w = np.ones_like(t)
for _ in range(200):
    c, *_ = np.linalg.lstsq(V * np.sqrt(w)[:, None], np.sqrt(w), rcond=None)
    e = np.abs(V @ c - 1)
    w = w * e
    w /= w.sum()
cf = c.astype(np.float32)
tt = np.linspace(t0, 1, 400001)
err = np.max(np.abs(np.polyval(cf.astype(np.float64)[::-1], tt) / erfcx((1 / tt - 1) / P) - 1))
print("coefficients, highest degree first:", ", ".join(f"{v:.7e}f" for v in cf[::-1]))
print(f"worst relative error (f32 coefficients, exact arithmetic): {err:.2e}")
