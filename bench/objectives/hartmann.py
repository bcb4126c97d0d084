"""The multi-fidelity Hartmann 3 and 6 functions of mf-prior-bench (`mfpbench.MFHartmann*`).

Source: automl/mf-prior-bench, `src/mfpbench/synthetic/hartmann/generators.py` and
`benchmark.py` (Mallik et al., "PriorBand", NeurIPS 2023), which extend the classic Hartmann
functions (Dixon & Szego 1978; constants as tabulated at https://www.sfu.ca/~ssurjano/hart3.html
and hart6.html) with a fidelity z in [z_min, z_max] = [1, 100]:

    s(z)   = (log z - log z_min) / (log z_max - log z_min)        # 0 at z_min, 1 at z_max
    a'_i   = a_i - bias * (1 - s(z))                               # flattens low fidelities
    f(x,z) = -sum_i a'_i exp(-sum_j A_ij (x_j - P_ij)^2) + noise * (1 - s(z)) * |e|,  e ~ N(0, 1)

with a = (1.0, 1.2, 3.0, 3.2). At z = z_max both terms vanish and f is the ordinary Hartmann
function: global minimum -3.86278 at (0.114614, 0.555649, 0.852547) for 3D and -3.32237 at
(0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573) for 6D. The noise draw is
deterministic in (seed, z, x), as in mf-prior-bench (which seeds a generator with
seed * z * hash(x)); we seed ours with a stable hash of the same triple.

Presets (bias, noise), from mf-prior-bench's `MFHartmann{3,6}Benchmark{Terrible,Bad,Moderate,Good}`:
terrible (4.0, 5.0), bad (3.5, 4.0), moderate (3.0, 3.0), good (2.5, 2.0); the unsuffixed
benchmark uses (0.5, 0.1). mf-prior-bench queries z in its `fidelity_range` (3, 100): lengths
below 3 are evaluated at z = 3. The search space is x in [0, 1]^d (`X_0` .. `X_{d-1}`).

Differences, on purpose: the fidelity is the trial's length in batches (max_length = 100 = z_max)
and the simulator charges the length trained (resumes pay the added length only), not
mf-prior-bench's cost curve 0.05 + 0.95 (z / z_max)^2.
"""

from __future__ import annotations

import hashlib
import math
import random
import struct
from dataclasses import dataclass, field
from typing import Any

ALPHA = (1.0, 1.2, 3.0, 3.2)
A3 = ((3.0, 10.0, 30.0), (0.1, 10.0, 35.0), (3.0, 10.0, 30.0), (0.1, 10.0, 35.0))
P3 = ((3689, 1170, 2673), (4699, 4387, 7470), (1091, 8732, 5547), (381, 5743, 8828))
A6 = (
    (10.0, 3.0, 17.0, 3.5, 1.7, 8.0),
    (0.05, 10.0, 17.0, 0.1, 8.0, 14.0),
    (3.0, 3.5, 1.7, 10.0, 17.0, 8.0),
    (17.0, 8.0, 0.05, 10.0, 0.1, 14.0),
)
P6 = (
    (1312, 1696, 5569, 124, 8283, 5886),
    (2329, 4135, 8307, 3736, 1004, 9991),
    (2348, 1451, 3522, 2883, 3047, 6650),
    (4047, 8828, 8732, 5743, 1091, 381),
)
ARGMIN = {
    3: (0.114614, 0.555649, 0.852547),
    6: (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573),
}
OPTIMUM = {3: -3.86278, 6: -3.32237}
PRESETS: dict[str, tuple[float, float]] = {  # name -> (bias, noise)
    "terrible": (4.0, 5.0),
    "bad": (3.5, 4.0),
    "moderate": (3.0, 3.0),
    "good": (2.5, 2.0),
    "default": (0.5, 0.1),
}
Z_MIN, Z_MAX = 1, 100  # the generator's log scaling
Z_LOWEST = 3  # the lowest fidelity mf-prior-bench's benchmark queries


def _constants(dims: int) -> tuple[tuple, tuple]:
    if dims == 3:
        return A3, P3
    if dims == 6:
        return A6, P6
    raise ValueError(f"Hartmann is defined for 3 or 6 dimensions, not {dims}")


def fidelity_scale(z: float) -> float:
    """s(z): 0 at z_min, 1 at z_max, logarithmic in between."""
    return (math.log(z) - math.log(Z_MIN)) / (math.log(Z_MAX) - math.log(Z_MIN))


def _noise_draw(seed: int, z: float, x: tuple[float, ...]) -> float:
    """|e|, e ~ N(0, 1), deterministic in (seed, z, x)."""
    key = hashlib.blake2b(struct.pack(f"<qd{len(x)}d", seed, z, *x), digest_size=8).digest()
    return abs(random.Random(int.from_bytes(key, "little")).gauss(0.0, 1.0))


def mf_hartmann(
    x: tuple[float, ...], z: float, bias: float = 0.0, noise: float = 0.0, seed: int = 1337
) -> float:
    """f(x, z) of mf-prior-bench's MFHartmann3/6 (the dimension is len(x)); minimise."""
    a_mat, p_mat = _constants(len(x))
    slack = 1.0 - fidelity_scale(z)
    total = 0.0
    for alpha, a_row, p_row in zip(ALPHA, a_mat, p_mat, strict=True):
        inner = sum(a * (xj - 1e-4 * p) ** 2 for a, xj, p in zip(a_row, x, p_row, strict=True))
        total -= (alpha - bias * slack) * math.exp(-inner)
    if noise and slack > 0:
        total += noise * slack * _noise_draw(seed, z, x)
    return total


@dataclass
class HartmannTrial:
    objective: MFHartmann
    x: tuple[float, ...]
    length: int = 0

    def train_to(self, length: int) -> float:
        self.length = max(self.length, length)
        return self.objective.evaluate(self.x, self.length)


@dataclass
class MFHartmann:
    """mf-prior-bench's MFHartmann{dims}Benchmark{preset} as a resumable detlab objective.

    A trial's length in batches is the fidelity z (clamped to [3, 100]); the seed fixes the
    noise (the benchmark seed, shared by every trial of one search, like mf-prior-bench's).
    """

    dims: int = 3
    preset: str = "moderate"
    seed: int = 1337
    max_length: int = Z_MAX
    name: str = field(init=False)
    space: dict[str, Any] = field(init=False)
    optimum: float = field(init=False)

    def __post_init__(self) -> None:
        _constants(self.dims)
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; one of {', '.join(PRESETS)}")
        self.bias, self.noise = PRESETS[self.preset]
        self.name = f"mfh{self.dims}_{self.preset}"
        self.space = {
            f"X_{i}": {"type": "double", "minval": 0.0, "maxval": 1.0} for i in range(self.dims)
        }
        self.optimum = OPTIMUM[self.dims]

    def evaluate(self, x: tuple[float, ...], length: float) -> float:
        z = min(max(float(length), Z_LOWEST), Z_MAX)
        return mf_hartmann(x, z, self.bias, self.noise, self.seed)

    def true_value(self, x: tuple[float, ...]) -> float:
        """f at the highest fidelity (no bias, no noise)."""
        return mf_hartmann(x, Z_MAX)

    def expected_value(self, hparams: dict[str, Any]) -> float:
        """The noise-free value at the highest fidelity (there the noise term vanishes)."""
        return self.true_value(self._x(hparams))

    def trial(self, hparams: dict[str, Any], seed: int) -> HartmannTrial:
        return HartmannTrial(self, self._x(hparams))

    def _x(self, hparams: dict[str, Any]) -> tuple[float, ...]:
        return tuple(float(hparams[f"X_{i}"]) for i in range(self.dims))
