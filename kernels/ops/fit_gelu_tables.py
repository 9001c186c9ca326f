#!/usr/bin/env python3
"""Writes kernels/ops/gelu_tables.hpp: the piecewise fits behind spw::ops::gelu_*.

    python3 kernels/ops/fit_gelu_tables.py > kernels/ops/gelu_tables.hpp
    python3 kernels/ops/fit_gelu_tables.py --avx2 > kernels/ops/gelu_tables_avx2.hpp
    python3 kernels/ops/fit_gelu_tables.py --avx512 > kernels/ops/gelu_tables_avx512.hpp

With t = |x| and Q(t) = Phi(-t) (the normal tail), GELU is x Phi(x) = max(x, 0) - t Q(t),
and Q is computed as 2^L(t) so that its relative error stays small however far the tail goes.
L = log2 Q (its integer part at the interval's middle kept apart) is fitted on 16 intervals of t in [0, 14.5] whose index is the exponent and
the top two mantissa bits of t + 1 (so the intervals widen with t: 0.25 up to t = 1, 0.5 up
to 3, then 1 and 2); each by a polynomial of degree 4 in u = t - c (c the interval's middle,
rounded to float), interpolating at the Chebyshev points of the first kind (within a small
factor of minimax), in 40-digit arithmetic with mpmath, coefficients rounded to float.
Also 2^f on [-1/2, 1/2], degree 4, for the smallest relative error (Lawson's iteratively
reweighted least squares, 2.6e-6; degree 5 would be 1.6e-7 for one more fma per vector, which
the 1e-5 goal does not need). Standard library and mpmath only.

--avx2 writes the tables of the AVX2 kernel: 8 intervals (the exponent and the top mantissa
bit of t + 1, so 0.5 wide up to t = 1, then 1, 2 and 4) and degree 5. vpermps on a ymm
register indexes 8 entries, so each coefficient is one lookup there instead of two and a
blend; the wider intervals need the one more degree (fit error at most 7e-7 in log2, about
the 16 intervals' 4e-7). It also writes the one polynomial of degree 10 that replaces the
tables for t <= 5.5, which covers every x >= -5.5 (absolute minimax by Lawson's reweighting).

--avx512 writes the AVX-512 kernel's path for t <= 5.5: Q itself, no logarithm and no 2^L, on
32 intervals that are equal steps of g = t (t + 3) (so they narrow as Q falls faster: each
spans at most 0.6 of a factor e), each a polynomial of degree 4 in g's fraction, interpolated
at Chebyshev points. vpermt2ps looks up 32 entries from two registers in one instruction, so
a coefficient costs one lookup.
"""
import struct
import sys

import mpmath as mp

mp.mp.dps = 40
EXP2_DEGREE = 4
T_MAX = mp.mpf("14.5")  # L(14.5) < -156: 2^L underflows to 0 from here on
FAST_MAX_T = mp.mpf("5.5")  # 5.5 Q(5.5) = 1.1e-7, under half an ulp of 5.5
FAST_DEGREE = 10
QUAD_SHIFT = 3  # g = t (t + QUAD_SHIFT): see --avx512
QUAD_INTERVALS = 32
QUAD_DEGREE = 4
DERIV_MAX_T = 6  # GELU's derivative is within 4e-8 of 0 or 1 from here on


def f32(x):
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def q(t):
    return mp.erfc(t / mp.sqrt(2)) / 2


def log2_q(t):
    return mp.log(q(t), 2)


def intervals(count):
    """count (8 or 16) intervals [lo, hi) of t, at the index the kernels compute from t + 1's
    bits."""
    per_octave = count // 4
    out = [None] * count
    for e in range(4):
        for m in range(per_octave):
            lo = 2**e * (1 + mp.mpf(m) / per_octave) - 1
            hi = min(2**e * (1 + mp.mpf(m + 1) / per_octave) - 1, T_MAX)
            # With 16, (t + 1)'s bits >> 21 are (127 + e) * 4 + m (with 8, >> 22 and
            # (127 + e) * 2 + m); a permute reads the low 4 (3) bits.
            out[((127 + e) * per_octave + m) % count] = (lo, hi)
    return out


def interpolate(f, lo, hi, centre, degree):
    n = degree + 1
    nodes = [(lo + hi) / 2 + (hi - lo) / 2 * mp.cos(mp.pi * (2 * k + 1) / (2 * n)) for k in range(n)]
    a = mp.matrix([[(x - centre) ** j for j in range(n)] for x in nodes])
    return list(mp.lu_solve(a, mp.matrix([f(x) for x in nodes])))


def lawson(rows, targets, iterations):
    """Minimax coefficients c of rows . c - targets by Lawson's algorithm: weighted least
    squares, each point's weight multiplied by its error after every pass."""
    n = len(rows[0])
    weights = [mp.mpf(1)] * len(rows)
    coef = None
    for _ in range(iterations):
        a = mp.matrix(n, n)
        b = mp.matrix(n, 1)
        for row, y, wt in zip(rows, targets, weights):
            for i in range(n):
                b[i] += wt * row[i] * y
                for j in range(n):
                    a[i, j] += wt * row[i] * row[j]
        coef = mp.lu_solve(a, b)
        errs = [abs(sum(coef[j] * row[j] for j in range(n)) - y) for row, y in zip(rows, targets)]
        total = sum(wt * e for wt, e in zip(weights, errs))
        weights = [wt * e / total for wt, e in zip(weights, errs)]
    return [coef[j] for j in range(n)]


def relative_minimax(f, lo, hi, degree, iterations=60, points=400):
    """p in powers of x with the smallest largest p/f - 1, on evenly spaced points."""
    xs = [lo + (hi - lo) * k / points for k in range(points + 1)]
    rows = [[x**j / f(x) for j in range(degree + 1)] for x in xs]
    return lawson(rows, [mp.mpf(1)] * len(xs), iterations)


def absolute_minimax(f, lo, hi, centre, degree, iterations=40, points=400):
    """p in powers of x - centre with the smallest largest p - f, on Chebyshev-spaced points."""
    xs = [lo + (hi - lo) * (1 - mp.cos(mp.pi * k / points)) / 2 for k in range(points + 1)]
    rows = [[(x - centre) ** j for j in range(degree + 1)] for x in xs]
    return lawson(rows, [f(x) for x in xs], iterations)


def worst(f, coef, lo, hi, centre, relative=False):
    err = 0
    for k in range(801):
        x = lo + (hi - lo) * k / 800
        p = 0
        for c in reversed(coef):
            p = p * (x - centre) + c
        e = abs(p - f(x))
        err = max(err, e / abs(f(x)) if relative else e)
    return err


def emit(name, rows, comment):
    print(f"// {comment}")
    print(f"alignas(64) inline constexpr float {name}[{len(rows)}][{len(rows[0])}] = {{")
    for row in rows:
        print("    {" + ", ".join(f"{v!r}f" for v in row) + "},")
    print("};")


def emit_fast():
    """The AVX2 kernel's lookup-free path: L on [0, FAST_MAX_T] as one polynomial."""
    centre = FAST_MAX_T / 2
    coef = absolute_minimax(log2_q, mp.mpf(0), FAST_MAX_T, centre, FAST_DEGREE)
    whole = mp.nint(coef[0])
    coef[0] -= whole
    rounded = [mp.mpf(f32(c)) for c in coef]
    rounded[0] += whole
    err = worst(log2_q, rounded, mp.mpf(0), FAST_MAX_T, centre)
    print("// Lanes with x >= -kFastMaxT skip the tables: L(t) = kFastLog2QWhole + sum_j")
    print("// kFastLog2Q[j] u^j, u = t - kFastCentre, for t in [0, kFastMaxT], "
          f"degree {FAST_DEGREE} (absolute")
    print(f"// minimax by Lawson's reweighting; error {float(err):.1e} in log2 "
          "with the coefficients rounded).")
    print("// Past kFastMaxT, t Q(t) is under half an ulp of x: x > kFastMaxT rounds to x.")
    print(f"inline constexpr float kFastMaxT = {f32(FAST_MAX_T)!r}f;")
    print(f"inline constexpr float kFastCentre = {f32(centre)!r}f;")
    print(f"inline constexpr int kFastLog2QWhole = {int(whole)};")
    print("inline constexpr float kFastLog2Q[] = {" +
          ", ".join(f"{f32(c)!r}f" for c in coef) + "};")


def fma_f32(a, b, c):
    return f32(mp.mpf(a) * mp.mpf(b) + mp.mpf(c))


def emit_avx512():
    """Q on [0, FAST_MAX_T] in QUAD_INTERVALS pieces indexed by the integer part of
    g = t (kQuadScale t + kQuadShiftScale), a polynomial in its fraction on each."""
    # The largest scale whose g, computed in float as the kernel does, stays under the
    # interval count at t = FAST_MAX_T, so that its integer part indexes 0..31.
    scale = f32(QUAD_INTERVALS / (FAST_MAX_T * (FAST_MAX_T + QUAD_SHIFT)))
    while True:
        shift_scale = f32(mp.mpf(scale) * QUAD_SHIFT)
        top = f32(mp.mpf(f32(FAST_MAX_T)) * fma_f32(f32(FAST_MAX_T), scale, shift_scale))
        if top < QUAD_INTERVALS:
            break
        scale = struct.unpack("f", struct.pack("I", struct.unpack("I", struct.pack("f", scale))[0] - 1))[0]
    a, b = mp.mpf(scale), mp.mpf(shift_scale)

    def t_of(g):  # the root of a t^2 + b t = g, in exact arithmetic
        return (-b + mp.sqrt(b * b + 4 * a * g)) / (2 * a)

    rows = [[] for _ in range(QUAD_DEGREE + 1)]
    worst_rel = 0
    for k in range(QUAD_INTERVALS):
        hi = min(mp.mpf(1), mp.mpf(top) - k) if k == QUAD_INTERVALS - 1 else mp.mpf(1)
        f = lambda u, k=k: q(t_of(k + u))
        coef = interpolate(f, mp.mpf(0), hi, mp.mpf(0), QUAD_DEGREE)
        rounded = [mp.mpf(f32(c)) for c in coef]
        worst_rel = max(worst_rel, worst(f, rounded, mp.mpf(0), hi, mp.mpf(0), True))
        for j in range(QUAD_DEGREE + 1):
            rows[j].append(f32(coef[j]))
    print("// Generated by kernels/ops/fit_gelu_tables.py --avx512; do not edit. The AVX-512 forward's")
    print("// path for x >= -kFastMaxT (gelu_avx512.hpp): Q(t) = Phi(-t) on 32 intervals of")
    print(f"// g = t (kQuadScale t + kQuadShiftScale), t (t + {QUAD_SHIFT}) up to a scale, interval i the")
    print(f"// g in [i, i + 1); Q = sum_j kQuad[j][i] u^j with u = g - i, degree {QUAD_DEGREE}. Largest")
    print(f"// relative error of the fits with their coefficients rounded to float: {float(worst_rel):.1e}.")
    print("#pragma once\n\nnamespace spw::ops::gelu_tables_avx512 {\n")
    print(f"inline constexpr float kFastMaxT = {f32(FAST_MAX_T)!r}f;")
    print(f"inline constexpr float kQuadScale = {scale!r}f;")
    print(f"inline constexpr float kQuadShiftScale = {shift_scale!r}f;")
    emit("kQuad", rows, "Coefficients from u^0 up, one row of 32 intervals each.")
    emit_derivative()
    print("\n}  // namespace spw::ops::gelu_tables_avx512")


def emit_derivative():
    """GELU'(x) = Phi(x) + x phi(x): 1 + D(t) for x >= 0, -D(t) below, with t = |x| and
    D(t) = t phi(t) - Q(t), on 32 equal intervals of t in [0, DERIV_MAX_T] indexed by the
    integer part of t kDerivScale, a polynomial of degree 4 in its fraction on each (absolute
    error is what matters here: the derivative crosses zero)."""
    scale = f32(QUAD_INTERVALS / mp.mpf(DERIV_MAX_T))
    while f32(mp.mpf(scale) * DERIV_MAX_T) >= QUAD_INTERVALS:
        scale = struct.unpack("f", struct.pack("I", struct.unpack("I", struct.pack("f", scale))[0] - 1))[0]

    def d(t):
        return t * mp.npdf(t) - q(t)

    rows = [[] for _ in range(QUAD_DEGREE + 1)]
    worst_abs = 0
    for k in range(QUAD_INTERVALS):
        f = lambda u, k=k: d((k + u) / mp.mpf(scale))
        coef = interpolate(f, mp.mpf(0), mp.mpf(1), mp.mpf(0), QUAD_DEGREE)
        rounded = [mp.mpf(f32(c)) for c in coef]
        worst_abs = max(worst_abs, worst(f, rounded, mp.mpf(0), mp.mpf(1), mp.mpf(0)))
        for j in range(QUAD_DEGREE + 1):
            rows[j].append(f32(coef[j]))
    print("// The backward's: D(t) = t phi(t) - Q(t), GELU'(x) = 1 + D(|x|) for x >= 0 and -D(|x|)")
    print(f"// below, on 32 intervals of t kDerivScale, t clamped to kDerivMaxT ({DERIV_MAX_T}, where |D| is")
    print(f"// {float(abs(d(mp.mpf(DERIV_MAX_T)))):.1e}); largest absolute error of the fits with their "
          f"coefficients rounded: {float(worst_abs):.1e}.")
    print(f"inline constexpr float kDerivMaxT = {f32(DERIV_MAX_T)!r}f;")
    print(f"inline constexpr float kDerivScale = {scale!r}f;")
    emit("kDeriv", rows, "Coefficients from u^0 up, one row of 32 intervals each.")


def main():
    if sys.argv[1:] == ["--avx512"]:
        emit_avx512()
        return 0
    avx2 = sys.argv[1:] == ["--avx2"]
    if sys.argv[1:] and not avx2:
        print(__doc__, file=sys.stderr)
        return 2
    count, degree = (8, 5) if avx2 else (16, 4)
    centres, l_rows = [], [[] for _ in range(degree + 1)]
    notes, exponents = [], []
    for i, (lo, hi) in enumerate(intervals(count)):
        c = f32((lo + hi) / 2)
        centres.append(c)
        cl = interpolate(log2_q, lo, hi, mp.mpf(c), degree)
        notes.append(f"//   {i:2d}: t in [{float(lo):6.3f}, {float(hi):6.3f}), L error "
                     f"{float(worst(log2_q, cl, lo, hi, mp.mpf(c))):.1e}")
        whole = mp.nint(cl[0])
        exponents.append(float(whole))
        cl[0] -= whole
        for j in range(degree + 1):
            l_rows[j].append(f32(cl[j]))
    e = [f32(c) for c in relative_minimax(lambda x: mp.power(2, x), mp.mpf(-0.5), mp.mpf(0.5),
                                          EXP2_DEGREE)]
    exp2_err = worst(lambda x: mp.power(2, x), e, mp.mpf(-0.5), mp.mpf(0.5), mp.mpf(0), True)
    if avx2:
        print("// Generated by kernels/ops/fit_gelu_tables.py --avx2; do not edit. The fits behind GELU")
        print("// forward on AVX2 (gelu_avx2.hpp says how they are used; 8 intervals, degree 5, so")
        print("// that each coefficient is one 8-entry vpermps); per interval, the largest error of")
        print("// the fit in exact arithmetic, in units of log2:")
    else:
        print("// Generated by kernels/ops/fit_gelu_tables.py; do not edit. The fits behind GELU forward")
        print("// (gelu_scalar.hpp says how they are used); per interval, the largest error of the fit")
        print("// in exact arithmetic, in units of log2:")
    print("\n".join(notes))
    namespace = "gelu_tables_avx2" if avx2 else "gelu_tables"
    print(f"#pragma once\n\nnamespace spw::ops::{namespace} {{\n")
    print(f"inline constexpr float kMaxT = {float(T_MAX)!r}f;\n")
    print("// The middle of each interval, rounded to float: u = t - kCentre[i].")
    print(f"alignas(64) inline constexpr float kCentre[{count}] = {{" +
          ", ".join(f"{v!r}f" for v in centres) + "};")
    print("// L(t) = log2 Phi(-t) = kLog2QWhole[i] + sum_j kLog2Q[j][i] u^j on interval i: the")
    print("// integer part apart, so that the float sum of the polynomial stays small (|L| reaches")
    print("// 157, where a float's rounding alone is 8e-6).")
    print(f"alignas(64) inline constexpr float kLog2QWhole[{count}] = {{" +
          ", ".join(f"{v!r}f" for v in exponents) + "};")
    emit("kLog2Q", l_rows, "The rest of L, polynomial coefficients from u^0 up.")
    if avx2:
        emit_fast()
    print(f"// 2^f = sum_j kExp2[j] f^j for |f| <= 1/2; relative error {float(exp2_err):.1e}.")
    print("inline constexpr float kExp2[] = {" + ", ".join(f"{f32(v)!r}f" for v in e) + "};")
    print(f"\n}}  // namespace spw::ops::{namespace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
