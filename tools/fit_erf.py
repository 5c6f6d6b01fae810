#!/usr/bin/env python3
"""Coefficients of the vectorisable fp32 erf (src/kernels/cpu/cpu_rows.h, erf_f32), and its error.

erf_f32(x), a = |x| clamped to [0, 4] (erf(4) rounds to 1 in fp32), sign restored at the end:
  a < 1:  erf(a) = a + a * P(a^2)            P fits erf(a)/a - 1, degree 6 in s = a^2
  a >= 1: erf(a) = 1 - exp(-a^2) * G(1/a)    G fits erfc(a) exp(a^2), degree 9 in u = 1/a
Least squares on 6000 Chebyshev nodes of each interval (near-minimax), truth from math.erf/erfc in
double. Prints the C++ constants and the largest error of an fp32 evaluation (Horner with FMA, as
the compiler emits for x86-64-v3/v4) in ulps of the fp32 result, over a dense grid.
Run: .venv-dev/bin/python tools/fit_erf.py   (numpy; tools/setup_dev_venv.sh installs it)
"""
import math

import numpy as np

F32 = np.float32


def fit(fun, lo, hi, deg, var, n=6000):
    k = np.arange(n)
    xs = 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * (k + 0.5) / n)
    return np.polynomial.polynomial.polyfit(var(xs), np.array([fun(x) for x in xs]), deg)


def fma(a, b, c):  # one rounding, as a fused multiply-add
    return (a.astype(np.float64) * b + c).astype(F32)


def horner(c, v):
    p = np.full_like(v, F32(c[-1]))
    for a in c[-2::-1]:
        p = fma(p, v, F32(a))
    return p


def main():
    p = fit(lambda a: math.erf(a) / a - 1 if a > 0 else 2 / math.sqrt(math.pi) - 1, 1e-6, 1.0, 6, lambda a: a * a)
    g = fit(lambda a: math.erfc(a) * math.exp(a * a), 1.0, 4.0, 9, lambda a: 1 / a)
    for name, c in (("kErfP", p), ("kErfcG", g)):
        print(f"constexpr float {name}[{len(c)}] = {{" + ", ".join(f"{float(F32(v)):.9e}f" for v in c) + "};")
    a = np.linspace(0, 1, 400001, endpoint=False).astype(F32)
    e1 = fma(a, horner(p, (a * a).astype(F32)), a)
    b = np.linspace(1, 4, 300001).astype(F32)
    ex = np.exp(-(b * b).astype(F32).astype(np.float64)).astype(F32)
    e2 = fma(-ex, horner(g, (F32(1) / b).astype(F32)), F32(1))
    for label, x, e in (("[0, 1)", a, e1), ("[1, 4]", b, e2)):
        t = np.array([math.erf(float(v)) for v in x])
        ulp = np.spacing(np.maximum(np.abs(t), 1e-30).astype(F32))
        print(f"max error on {label}: {np.max(np.abs(e - t) / ulp):.3f} ulp, {np.max(np.abs(e - t)):.3e} absolute")


if __name__ == "__main__":
    main()
