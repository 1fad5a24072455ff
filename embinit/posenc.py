"""Sinusoidal position encodings (Vaswani et al. 2017, eq. in section 3.5).

PE[pos, 2i] = sin(pos / base^(2i/D)),  PE[pos, 2i+1] = cos(pos / base^(2i/D)).
The paper's appendix A.1 (eq. 2) prints sin/cos(i / 1000^(j/D)) with j the column itself; its own
Table 6 fits Vaswani's table instead: PE mean 0.131 is that of 5,000 rows of this table at D=300 (0.1314),
while the printed formula gives 0.011 there (and 0.114 at 1,000 rows, where its std is 0.698, not 0.67).
This table's std at 5,000 rows is 0.695, not 0.67 either: no table tried matches both numbers.
One implementation shared by the models, the embedding statistics and the analyses, so that every
number about "position signal" refers to the same table.
"""

import math

import torch


def sinusoidal(length: int, dim: int, base: float = 10000.0, dtype=torch.float32) -> torch.Tensor:
    """The `length` x `dim` sinusoidal position-encoding table."""
    if length < 1 or dim < 1:
        raise ValueError(f"length and dim must be positive, got length={length}, dim={dim}")
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    # frequencies for the even columns; odd columns reuse the frequency of the column before them
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(base) / dim))
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div[: dim // 2])
    return table.to(dtype)
